"""Metrics against hand-computed values: accuracy tables, drops, bootstrap CIs, CE/mCE."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from robustlab.metrics import (
    accuracy_ci,
    accuracy_drop,
    alexnet_cells,
    bootstrap_ci,
    cell_intervals,
    cell_table,
    corruption_errors,
    drop_ci,
    mce,
    per_class,
    per_family,
)
from robustlab.metrics.mce import alexnet_clean_error, alexnet_table, check_full_imagenet_val


def _preds():
    rows = []
    cells = {
        ("clean", "0"): ([1, 1, 1, 0], [1, 1, 1, 1]),
        ("gaussian_noise", "1"): ([1, 0, 0, 0], [1, 1, 0, 0]),
        ("shot_noise", "1"): ([1, 1, 0, 0], [1, 1, 1, 0]),
        ("contrast", "2"): ([0, 0, 0, 0], [0, 0, 0, 1]),
    }
    for (shift, level), (c1, c5) in cells.items():
        for i, (a, b) in enumerate(zip(c1, c5)):
            rows.append(("r", f"s{i}", shift, level, i % 2, bool(a), bool(b)))
    return pd.DataFrame(
        rows, columns=["run_id", "sample_id", "shift", "level", "label", "correct", "correct5"]
    )


def test_cell_table_by_hand():
    t = cell_table(_preds())
    assert list(zip(t["shift"], t["level"])) == [
        ("clean", "0"),
        ("gaussian_noise", "1"),
        ("shot_noise", "1"),
        ("contrast", "2"),
    ]
    assert t["n"].tolist() == [4, 4, 4, 4]
    assert t["top1"].tolist() == [0.75, 0.25, 0.5, 0.0]
    assert t["top5"].tolist() == [1.0, 0.5, 0.75, 0.25]
    assert t["error"].tolist() == [0.25, 0.75, 0.5, 1.0]


def test_drop_family_and_class_by_hand():
    d = accuracy_drop(cell_table(_preds()))
    assert d["drop"].tolist() == [0.0, 0.5, 0.25, 0.75]
    assert d["drop5"].tolist() == [0.0, 0.5, 0.25, 0.75]
    f = per_family(_preds(), families={"shot_noise": "noise", "contrast": "digital"})
    f = f.set_index("family")  # gaussian_noise's family comes from the registry
    assert f.index.tolist()[0] == "clean"
    assert f.loc["noise", "n"] == 8 and f.loc["noise", "top1"] == 3 / 8
    assert f.loc["digital", "top1"] == 0.0
    c = per_class(_preds())
    clean = c[c["shift"] == "clean"].set_index("label")
    assert clean.loc[0, "top1"] == 1.0 and clean.loc[1, "top1"] == 0.5


def test_drop_needs_a_clean_cell():
    p = _preds()
    with pytest.raises(ValueError, match="no clean cell"):
        accuracy_drop(cell_table(p[p["shift"] != "clean"]))


def test_alexnet_table_is_consistent_with_its_means():
    t = alexnet_table()
    assert len(t) == 20 and alexnet_clean_error() == 0.4348
    body = t[t["corruption"] != "clean"]
    np.testing.assert_allclose(
        body[["s1", "s2", "s3", "s4", "s5"]].mean(axis=1), body["mean"], atol=1e-6
    )
    cells = alexnet_cells().set_index(["shift", "level"])["error"]
    assert cells[("glass_blur", "3")] == 0.88806 and cells[("saturate", "5")] == 0.82260


def test_ce_and_relative_ce_against_alexnet_by_hand():
    model = pd.DataFrame(
        {
            "shift": ["clean"] + ["gaussian_noise"] * 5 + ["brightness"] * 5,
            "level": ["0"] + [str(s) for s in range(1, 6)] * 2,
            "error": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.2, 0.2, 0.2, 0.2, 0.2],
        }
    )
    ce = corruption_errors(model, alexnet_cells()).set_index("shift")
    # sum of AlexNet gaussian_noise errors: .69528+.82542+.93554+.98138+.99452 = 4.43214
    assert ce.loc["gaussian_noise", "ce"] == pytest.approx(2.5 / 4.43214)
    assert ce.loc["gaussian_noise", "relative_ce"] == pytest.approx(
        (2.5 - 1.0) / (4.43214 - 5 * 0.4348)
    )
    # brightness: .45140+.48502+.54048+.62166+.72440 = 2.82296; no degradation -> relative CE 0
    assert ce.loc["brightness", "ce"] == pytest.approx(1.0 / 2.82296)
    assert ce.loc["brightness", "relative_ce"] == 0.0
    m = mce(ce.reset_index())
    assert m["mce"] == pytest.approx((2.5 / 4.43214 + 1.0 / 2.82296) / 2)
    assert m["n_corruptions"] == 2


def test_ce_against_a_stored_baseline_and_missing_cells():
    model = pd.DataFrame(
        {
            "shift": ["clean", "contrast", "contrast"],
            "level": ["0", "1", "2"],
            "error": [0.1, 0.3, 0.5],
        }
    )
    base = pd.DataFrame(
        {
            "shift": ["clean", "contrast", "contrast"],
            "level": ["0", "1", "2"],
            "error": [0.2, 0.4, 0.8],
        }
    )
    ce = corruption_errors(model, base).iloc[0]
    assert ce["ce"] == pytest.approx(0.8 / 1.2)
    assert ce["relative_ce"] == pytest.approx((0.8 - 0.2) / (1.2 - 0.4))
    with pytest.raises(ValueError, match="baseline lacks cells the model has: contrast/2"):
        corruption_errors(model, base.iloc[:2])


def test_alexnet_refused_unless_full_imagenet_val():
    cells = cell_table(_preds())
    with pytest.raises(ValueError, match="full ImageNet validation set"):
        check_full_imagenet_val(cells, n_classes=2)
    full = cells.assign(n=50_000)
    check_full_imagenet_val(full, n_classes=1000)


def test_bootstrap_is_reproducible_and_matches_binomial_theory():
    rng = np.random.default_rng(0)
    correct = rng.random(1000) < 0.7
    p = correct.mean()
    lo, hi = accuracy_ci(correct, np.random.default_rng(1), n_resamples=4000)
    assert (lo, hi) == accuracy_ci(correct, np.random.default_rng(1), n_resamples=4000)
    half = 1.96 * np.sqrt(p * (1 - p) / 1000)  # normal approximation, about 0.028
    assert lo == pytest.approx(p - half, abs=0.005) and hi == pytest.approx(p + half, abs=0.005)
    lo2, hi2 = bootstrap_ci(correct.astype(float), np.random.default_rng(2), n_resamples=2000)
    assert lo2 == pytest.approx(lo, abs=0.006) and hi2 == pytest.approx(hi, abs=0.006)
    assert accuracy_ci(np.ones(50, bool), np.random.default_rng(0)) == (1.0, 1.0)


def test_paired_drop_interval_and_cell_intervals():
    rng = np.random.default_rng(3)
    a = rng.random(400) < 0.8
    assert drop_ci(a, a, np.random.default_rng(0)) == (0.0, 0.0)
    b = a & (rng.random(400) < 0.5)
    lo, hi = drop_ci(a, b, np.random.default_rng(0))
    assert lo < (a.mean() - b.mean()) < hi
    ci = cell_intervals(_preds(), np.random.default_rng(0), n_resamples=500)
    assert len(ci) == 4 and (ci["top1_lo"] <= ci["top1_hi"]).all()
    with pytest.raises(ValueError, match="numpy.random.Generator"):
        accuracy_ci(a, 0)


def test_ratio_interval_is_the_per_resample_bootstrap_of_the_same_draws():
    """ratio_ci (pooled accuracy over images, its sums vectorised per chunk) gives the
    interval of the per-resample bootstrap with the same statistic and chunks, to the bit."""
    from robustlab.metrics.bootstrap import bootstrap_ci, bootstrap_distribution, ratio_ci

    rng = np.random.default_rng(5)
    n = rng.integers(1, 16, size=701)
    pairs = np.stack([rng.binomial(n, 0.6), n], axis=1)

    def ratio(x):
        return x[:, 0].sum() / x[:, 1].sum()

    want = bootstrap_ci(pairs, np.random.default_rng(9), n_resamples=301, statistic=ratio)
    assert ratio_ci(pairs, np.random.default_rng(9), n_resamples=301) == want
    # chunks of 7 resamples (4,907 draws each): the same draws, in the same order
    dist = bootstrap_distribution(
        pairs, np.random.default_rng(9), statistic=ratio, n_resamples=301, chunk_elements=7 * 701
    )
    small = ratio_ci(pairs, np.random.default_rng(9), n_resamples=301, chunk_elements=7 * 701)
    assert small == tuple(float(q) for q in np.quantile(dist, [0.025, 0.975]))
    with pytest.raises(ValueError, match="empty"):
        ratio_ci(np.empty((0, 2)), np.random.default_rng(0))
