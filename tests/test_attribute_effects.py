"""Logistic fits of correctness on measured ImageNet-E attributes, against statsmodels fitted
independently here, on data with known structure."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.formula.api as smf

from robustlab.metrics.attributes import attribute_effects, fit_logit


def _frame(rng, n_images=150, levels=4, slope=-6.0, image_sd=2.5, per_image_x=False):
    """Rows (image x level): correct ~ Bernoulli(logit(1 + slope * x + u_image))."""
    u = rng.normal(0, image_sd, n_images)
    rows = []
    for i in range(n_images):
        x_img = rng.uniform(0.02, 0.3)
        for k in range(levels):
            x = x_img if per_image_x else rng.uniform(0.02, 0.3)
            p = 1 / (1 + np.exp(-(1 + slope * x + u[i])))
            rows.append(
                {
                    "run_id": "r",
                    "sample_id": f"img{i:04d}",
                    "shift": "obj_size",
                    "level": str(k),
                    "correct": bool(rng.random() < p),
                    "object_rate": x,
                    "angle": (k * 100) % 360 - 180,
                    "hf_after": np.nan,
                }
            )
    return pd.DataFrame(rows)


def test_matches_statsmodels_fitted_independently():
    df = _frame(np.random.default_rng(0), slope=-20.0, image_sd=1.5)
    got = attribute_effects(df, ["object_rate"]).iloc[0]
    d = df.assign(y=df["correct"].astype(int), g=pd.factorize(df["sample_id"])[0])
    ref = smf.logit("y ~ object_rate", d).fit(
        disp=0, cov_type="cluster", cov_kwds={"groups": d["g"]}
    )
    naive = smf.logit("y ~ object_rate", d).fit(disp=0)
    assert got["coef"] == pytest.approx(ref.params["object_rate"], rel=1e-6)
    assert got["se_cluster"] == pytest.approx(ref.bse["object_rate"], rel=1e-6)
    assert got["se_naive"] == pytest.approx(naive.bse["object_rate"], rel=1e-6)
    assert got["n"] == 600 and got["n_images"] == 150
    assert got["coef"] < 0 and got["p_cluster"] < 0.01  # the real effect is found


def test_clustered_errors_where_naive_ones_are_too_small():
    # The attribute varies only between images and has no effect; images differ a lot.
    df = _frame(np.random.default_rng(1), slope=0.0, image_sd=3.0, per_image_x=True)
    got = fit_logit(df["correct"], df["object_rate"], df["sample_id"])
    assert got["se_cluster"] > 1.3 * got["se_naive"]
    assert got["p_cluster"] > got["p_naive"]


def test_angle_is_wrapped_and_constant_columns_are_explained():
    df = _frame(np.random.default_rng(2), n_images=40)
    out = attribute_effects(df).set_index("attribute")
    assert "abs_angle" in out.index and "hf_after" not in out.index  # all NaN: left out
    df2 = df.assign(object_rate=0.1)
    note = attribute_effects(df2, ["object_rate"]).iloc[0]["note"]
    assert "does not vary" in note
    df3 = df.assign(correct=True)
    assert "no slope" in attribute_effects(df3, ["object_rate"]).iloc[0]["note"]
    assert attribute_effects(df.iloc[:0]).empty
