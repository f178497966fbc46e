"""Accuracy against what an ImageNet-E edit actually achieved, not only its nominal level.

An edit's level is a request ("object rate 0.05", "random direction"); what reached the
model is measured per image (``attributes`` table: object rate, angle, background
complexity). :func:`attribute_effects` fits, per run and edit, a logistic regression of
top-1 correctness on each measured attribute.

Why logistic and why clustered: correctness is binary, and one photo contributes one row
per level of an edit, so its rows are not independent (an easy photo is right at every
level). Naive standard errors treat them as independent and come out too small; the
standard errors here are clustered by image (statsmodels' cluster-robust covariance), and
the naive ones are reported beside them so the difference is visible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from robustlab.metrics.regression import fit_logit_quietly

# Measured attributes and how each enters the model.
ATTRIBUTES = {
    "object_rate": "object pixels in the object's box / image area (size edits)",
    "abs_angle": "|rotation| in degrees, 0..180 (direction edits)",
    "hf_after": "background mean |FFT| after the edit (complexity)",
}
COLUMNS = [
    "run_id",
    "shift",
    "attribute",
    "n",
    "n_images",
    "coef",
    "se_cluster",
    "p_cluster",
    "se_naive",
    "p_naive",
    "note",
]


def _with_derived(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    if "angle" in out and "abs_angle" not in out:
        a = pd.to_numeric(out["angle"], errors="coerce")
        out["abs_angle"] = np.abs(((a + 180.0) % 360.0) - 180.0)  # wrap to [-180, 180)
    return out


def fit_logit(correct, x, groups) -> dict:
    """Logit of ``correct`` on ``x`` (with intercept); clustered and naive inference.

    Returns:
        ``coef`` (log-odds per unit of ``x``), ``se_cluster``, ``p_cluster``,
        ``se_naive``, ``p_naive``, and ``note`` (empty, or why nothing was estimated).
    """
    import statsmodels.api as sm

    y = np.asarray(correct, dtype=float)
    xv = np.asarray(x, dtype=float)
    empty = {
        "coef": np.nan,
        "se_cluster": np.nan,
        "p_cluster": np.nan,
        "se_naive": np.nan,
        "p_naive": np.nan,
    }
    if len(y) < 10 or np.ptp(xv) == 0:
        return {**empty, "note": "too few rows or the attribute does not vary"}
    if y.min() == y.max():
        return {**empty, "note": "all predictions right (or all wrong): no slope to estimate"}
    X = sm.add_constant(xv, has_constant="add")
    codes = pd.factorize(pd.Series(groups))[0]
    try:
        naive, separated = fit_logit_quietly(sm.Logit(y, X))
        clustered, _ = fit_logit_quietly(
            sm.Logit(y, X), cov_type="cluster", cov_kwds={"groups": codes}
        )
    except Exception as exc:  # noqa: BLE001 - a singular Hessian and friends: say so
        return {**empty, "note": f"not estimable: {type(exc).__name__}: {exc}"}
    return {
        "coef": float(clustered.params[1]),
        "se_cluster": float(clustered.bse[1]),
        "p_cluster": float(clustered.pvalues[1]),
        "se_naive": float(naive.bse[1]),
        "p_naive": float(naive.pvalues[1]),
        "note": (
            "perfect separation: the attribute predicts correctness exactly, the slope is "
            "not meaningful"
            if separated
            else ""
        ),
    }


def attribute_effects(df: pd.DataFrame, attributes: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (run, edit, attribute) that varies: the logistic fit of correctness.

    Args:
        df: :meth:`robustlab.store.Store.predictions_with_attributes` rows (``run_id``,
            ``sample_id``, ``shift``, ``correct`` and the measured columns).
        attributes: Attribute names (default: :data:`ATTRIBUTES`; ``abs_angle`` is derived
            from ``angle``).

    Returns:
        A DataFrame with :data:`COLUMNS`; empty when ``df`` is.
    """
    if df is None or df.empty:
        return pd.DataFrame(columns=COLUMNS)
    data = _with_derived(df)
    rows = []
    for (run_id, shift), g in data.groupby(["run_id", "shift"], sort=True):
        for attr in attributes or ATTRIBUTES:
            if attr not in g:
                continue
            vals = pd.to_numeric(g[attr], errors="coerce")
            keep = vals.notna()
            if keep.sum() == 0:
                continue
            sub = g[keep]
            fit = fit_logit(sub["correct"].astype(bool), vals[keep], sub["sample_id"])
            rows.append(
                {
                    "run_id": run_id,
                    "shift": shift,
                    "attribute": attr,
                    "n": int(keep.sum()),
                    "n_images": int(sub["sample_id"].nunique()),
                    **fit,
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


__all__ = ["ATTRIBUTES", "COLUMNS", "attribute_effects", "fit_logit"]
