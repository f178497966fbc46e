"""Regression analysis: coefficients, errors and tests checked against a hand-built example."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from scipy import stats

from robustlab.metrics.regression import (
    cell_accuracy,
    design_matrix,
    regress_accuracy,
    significance_stars,
)

TRUE = {
    "Intercept": 0.90,
    "Model[resnet]": -0.05,
    "Scenario[blur_bg]": -0.02,
    "Scenario[segmented]": -0.30,
    "Class[dog]": -0.10,
    "Class[fox]": 0.04,
}
FACTORS = {"Model": "model", "Scenario": "shift", "Class": "class_name"}
REF = {"Model": "lite0", "Scenario": "original", "Class": "cello"}


def _example(noise=0.01, reps=4, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for m, s, c, _ in itertools.product(
        ["lite0", "resnet"],
        ["original", "blur_bg", "segmented"],
        ["cello", "dog", "fox"],
        range(reps),
    ):
        y = (
            TRUE["Intercept"]
            + TRUE.get(f"Model[{m}]", 0)
            + TRUE.get(f"Scenario[{s}]", 0)
            + TRUE.get(f"Class[{c}]", 0)
            + rng.normal(0, noise)
        )
        rows.append({"model": m, "shift": s, "class_name": c, "accuracy": y})
    return pd.DataFrame(rows)


def test_recovers_known_coefficients_with_reference_levels():
    res = regress_accuracy(_example(noise=1e-4), FACTORS, reference=REF)
    got = dict(zip(res.table["term"], res.table["estimate"]))
    assert set(got) == set(TRUE)
    for k, v in TRUE.items():
        assert got[k] == pytest.approx(v, abs=1e-3), k
    assert res.reference == REF


def test_statistics_match_an_independent_least_squares():
    data = _example(noise=0.03, seed=3)
    res = regress_accuracy(data, FACTORS, reference=REF)
    X, _ = design_matrix(data, FACTORS, REF)
    Xa, y = X.to_numpy(), data["accuracy"].to_numpy()
    beta, *_ = np.linalg.lstsq(Xa, y, rcond=None)
    dof = len(y) - Xa.shape[1]
    s2 = np.sum((y - Xa @ beta) ** 2) / dof
    se = np.sqrt(np.diag(s2 * np.linalg.inv(Xa.T @ Xa)))
    t = beta / se
    p = 2 * stats.t.sf(np.abs(t), dof)
    q = stats.t.ppf(0.975, dof)
    tab = res.table.set_index("term").loc[list(X.columns)]
    np.testing.assert_allclose(tab["estimate"], beta, atol=1e-10)
    np.testing.assert_allclose(tab["std_error"], se, rtol=1e-8)
    np.testing.assert_allclose(tab["t"], t, rtol=1e-8)
    np.testing.assert_allclose(tab["p"], p, rtol=1e-6, atol=1e-300)
    np.testing.assert_allclose(tab["ci_low"], beta - q * se, rtol=1e-8)
    np.testing.assert_allclose(tab["ci_high"], beta + q * se, rtol=1e-8)
    assert list(tab["stars"]) == [significance_stars(v) for v in p]
    # the large segmented effect is highly significant, the tiny blur effect is not
    assert tab.loc["Scenario[segmented]", "stars"] == "****"
    assert tab.loc["Scenario[blur_bg]", "stars"] in ("ns", "*")


def test_changing_the_reference_level_shifts_estimates():
    data = _example(noise=1e-4)
    res = regress_accuracy(data, FACTORS, reference={**REF, "Scenario": "segmented"})
    got = dict(zip(res.table["term"], res.table["estimate"]))
    assert got["Scenario[blur_bg]"] == pytest.approx(-0.02 + 0.30, abs=1e-3)
    assert got["Scenario[original]"] == pytest.approx(0.30, abs=1e-3)
    # default reference: first level in sorted order
    res = regress_accuracy(data, ["model", "shift"])
    assert res.reference == {"model": "lite0", "shift": "blur_bg"}


@pytest.mark.parametrize(
    "p,stars",
    [
        (0.2, "ns"),
        (0.05, "ns"),
        (0.049, "*"),
        (0.01, "*"),
        (0.0099, "**"),
        (0.001, "**"),
        (0.00099, "***"),
        (0.0001, "***"),
        (0.00009, "****"),
        (float("nan"), "ns"),
    ],
)
def test_significance_stars(p, stars):
    assert significance_stars(p) == stars


def test_bad_input_is_a_clear_error():
    data = _example()
    with pytest.raises(ValueError, match="not a level of Scenario"):
        regress_accuracy(data, FACTORS, reference={"Scenario": "rainbow"})
    with pytest.raises(ValueError, match="single level"):
        regress_accuracy(data[data["model"] == "lite0"], FACTORS)
    with pytest.raises(ValueError, match="lacks column"):
        regress_accuracy(data, {"Model": "arch"})
    with pytest.raises(ValueError, match="response"):
        regress_accuracy(data, FACTORS, response="top1")
    confounded = data.assign(copy=data["model"])
    with pytest.raises(ValueError, match="confounded"):
        regress_accuracy(confounded, ["model", "copy"])
    with pytest.raises(ValueError, match="cannot fit"):
        regress_accuracy(data.head(3).assign(model=["a", "b", "c"]), ["model"])


def test_cell_accuracy_and_plots(tmp_path):
    rng = np.random.default_rng(1)
    preds = pd.DataFrame(
        {
            "model": rng.choice(["a", "b"], 400),
            "shift": rng.choice(["clean", "blur_bg", "segmented"], 400),
            "class_name": rng.choice(["x", "y"], 400),
        }
    )
    preds["correct"] = rng.random(400) < np.where(preds["shift"] == "segmented", 0.4, 0.85)
    cells = cell_accuracy(preds, ["model", "shift", "class_name"])
    assert len(cells) == 12 and cells["n"].sum() == 400
    one = preds[(preds.model == "a") & (preds["shift"] == "clean") & (preds.class_name == "x")]
    row = cells[
        (cells.model == "a") & (cells["shift"] == "clean") & (cells.class_name == "x")
    ].iloc[0]
    assert row["accuracy"] == pytest.approx(one["correct"].mean()) and row["n"] == len(one)
    # per-prediction linear probability model works on the raw rows too
    res = regress_accuracy(
        preds.assign(correct=preds["correct"].astype(float)),
        {"Model": "model", "Scenario": "shift"},
        response="correct",
        reference={"Scenario": "clean"},
    )
    seg = res.table.set_index("term").loc["Scenario[segmented]"]
    assert seg["estimate"] < -0.3 and seg["stars"] == "****"
    paths = res.plots(tmp_path)
    for p in paths.values():
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size == (500, 400)
