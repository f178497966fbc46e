"""What the stored saliency rows say: per cell, per model, and across models.

- :func:`cell_summary`: per run and cell, the mean foreground share with a percentile
  bootstrap interval (:mod:`robustlab.metrics.bootstrap`, explicit generator), the mean
  normalised share, the pointing-game hit rate and top-1 accuracy.
- :func:`model_table`: per run, the clean foreground share, the share on the scenario
  cells, and the robustness numbers computed from the *same rows'* predictions: the
  XIMAGENET-12 score from the clean and scenario accuracies (cross protocol only, so the
  partial score ``1 - sigma2_cross``) and ImageNet-9's BG-gap when the run covers
  ``mixed_same`` and ``mixed_rand``.
- :func:`correlations`: across runs, Pearson and Spearman correlation of the clean
  foreground share with each robustness number: the paper's claim ("more robust models
  look at the object") tested on the user's models. The number of models is always
  given; with fewer than :data:`FEW_MODELS` the row says it is descriptive only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from robustlab.cells import level_key
from robustlab.store.schema import CLEAN_SHIFT

# Below this many models a correlation is shown but labelled as descriptive only.
FEW_MODELS = 8
N_RESAMPLES = 1000
SUMMARY_COLUMNS = [
    "run_id",
    "shift",
    "level",
    "n",
    "fg_share",
    "fg_share_lo",
    "fg_share_hi",
    "fg_share_norm",
    "pointing",
    "top1",
]


def _order(df: pd.DataFrame) -> pd.DataFrame:
    key = (df["shift"] != CLEAN_SHIFT).astype(int)
    return (
        df.assign(_k=key)
        .sort_values(["run_id", "_k", "shift", "level"])
        .drop(columns="_k")
        .reset_index(drop=True)
    )


def cell_summary(
    rows: pd.DataFrame, rng: np.random.Generator, *, n_resamples: int = N_RESAMPLES
) -> pd.DataFrame:
    """One row per (run, shift, level), clean first: n, mean foreground share and its 95 %
    bootstrap interval over images, mean normalised share, pointing-game rate, top-1."""
    from robustlab.metrics.bootstrap import bootstrap_ci

    out = []
    if rows.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    for (rid, shift, level), g in rows.groupby(["run_id", "shift", "level"], sort=False):
        share = pd.to_numeric(g["fg_share"], errors="coerce").dropna().to_numpy(float)
        lo = hi = float("nan")
        if len(share) > 1:
            lo, hi = bootstrap_ci(share, rng, n_resamples=n_resamples)
        out.append(
            {
                "run_id": rid,
                "shift": shift,
                "level": level_key(level),
                "n": len(g),
                "fg_share": float(share.mean()) if len(share) else float("nan"),
                "fg_share_lo": float(lo),
                "fg_share_hi": float(hi),
                "fg_share_norm": float(pd.to_numeric(g["fg_share_norm"]).mean()),
                "pointing": float(pd.to_numeric(g["pointing"]).mean()),
                "top1": float(g["correct"].astype(float).mean()),
            }
        )
    return _order(pd.DataFrame(out, columns=SUMMARY_COLUMNS))


def model_table(rows: pd.DataFrame, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per run: ``fg_clean`` (mean clean foreground share), ``fg_scenes`` (mean
    over the scenario cells' images), ``n_images``, ``top1_clean``, ``s_robust`` (the
    cross-protocol score from this run's own predictions; NaN without scenario cells),
    ``bg_gap`` (NaN without ``mixed_same``/``mixed_rand``), and ``model`` (spec and
    weights hash) when ``runs`` is given."""
    from robustlab.metrics.scenes import bg_gap, robustness_score, scenario_accuracies

    out = []
    for rid, g in rows.groupby("run_id", sort=True):
        clean = g[g["shift"] == CLEAN_SHIFT]
        scenes = g[g["shift"] != CLEAN_SHIFT]
        score = gap = float("nan")
        if not clean.empty and not scenes.empty:
            mu, acc = scenario_accuracies(g[["shift", "level", "correct"]])
            score = robustness_score(mu, acc).s_partial
        shifts = set(g["shift"])
        if {"mixed_same", "mixed_rand"} <= shifts:
            try:
                gap = float(bg_gap(g[["sample_id", "shift", "correct"]], by=()).iloc[0]["bg_gap"])
            except ValueError:  # no image in both cells: no gap to give
                gap = float("nan")
        out.append(
            {
                "run_id": rid,
                "n_images": int(clean["sample_id"].nunique()),
                "fg_clean": float(pd.to_numeric(clean["fg_share"]).mean()),
                "fg_scenes": float(pd.to_numeric(scenes["fg_share"]).mean())
                if not scenes.empty
                else float("nan"),
                "pointing_clean": float(pd.to_numeric(clean["pointing"]).mean()),
                "top1_clean": float(clean["correct"].astype(float).mean()),
                "s_robust": float(score),
                "bg_gap": float(gap),
            }
        )
    df = pd.DataFrame(out)
    if runs is not None and not df.empty:
        names = {r.run_id: run_label(r._asdict()) for r in runs.itertuples()}
        df.insert(1, "model", [names.get(r, r) for r in df["run_id"]])
    return df


def run_label(run: dict) -> str:
    """``lite0 (57934424) gradcam``: model spec, weights hash and saliency method."""
    method = ((run.get("config") or {}).get("saliency") or {}).get("method", "")
    return f"{run['model_spec']} ({str(run.get('weights_hash') or '')[:8]}) {method}".strip()


def correlations(models: pd.DataFrame, x: str = "fg_clean") -> pd.DataFrame:
    """Pearson and Spearman correlation of ``x`` with ``s_robust`` and ``bg_gap`` across
    the runs that have both numbers; ``n`` models each, and a ``note`` saying when ``n``
    is too small to mean more than a description (or to compute at all)."""
    from scipy import stats

    out = []
    for y in ("s_robust", "bg_gap"):
        if models.empty or y not in models:
            continue
        pair = models[[x, y]].apply(pd.to_numeric, errors="coerce").dropna()
        n = len(pair)
        r = rho = float("nan")
        constant = n and (pair[x].nunique() < 2 or pair[y].nunique() < 2)
        if n >= 3 and not constant:
            r = float(stats.pearsonr(pair[x], pair[y])[0])
            rho = float(stats.spearmanr(pair[x], pair[y])[0])
        if n < 3:
            note = f"{n} model(s): no correlation (needs at least 3)"
        elif constant:
            note = f"{n} models: one of the two numbers is the same for all; no correlation"
        elif n < FEW_MODELS:
            note = f"only {n} models: descriptive, not evidence for or against the claim"
        else:
            note = f"{n} models"
        out.append({"x": x, "y": y, "n": n, "pearson": r, "spearman": rho, "note": note})
    return pd.DataFrame(out, columns=["x", "y", "n", "pearson", "spearman", "note"])


__all__ = ["cell_summary", "model_table", "correlations", "run_label", "FEW_MODELS"]
