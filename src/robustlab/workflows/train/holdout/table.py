"""The surface-variation report table: one row per stored protocol run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from robustlab.workflows.train.holdout.run import HOLDOUT_SHIFT, SUITE


def holdout_table(runs: pd.DataFrame, preds: pd.DataFrame) -> pd.DataFrame:
    """One row per surface-variation run: protocol, what was held out, sizes and accuracies.

    Args:
        runs: ``Store.runs()`` rows (others than surface-variation runs are ignored).
        preds: Their predictions (``run_id``, ``shift``, ``correct``).
    """
    from robustlab.store import CLEAN_SHIFT

    rows = []
    for r in runs.itertuples():
        cfg = r.config if isinstance(r.config, dict) else json.loads(r.config or "{}")
        if r.suite != SUITE or "holdout" not in cfg:
            continue
        g = preds[preds["run_id"] == r.run_id]
        seen, held = g[g["shift"] == CLEAN_SHIFT], g[g["shift"] == HOLDOUT_SHIFT]
        h = cfg["holdout"]
        rows.append(
            {
                "run_id": r.run_id,
                "model": r.model_spec,
                "protocol": h.get("protocol"),
                "held_out": h.get("held_out"),
                "seed": h.get("seed"),
                "n_train": h.get("n_train"),
                "n_seen": len(seen),
                "seen_top1": float(seen["correct"].mean()) if len(seen) else np.nan,
                "n_held": len(held),
                "held_top1": float(held["correct"].mean()) if len(held) else np.nan,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "model",
            "protocol",
            "held_out",
            "seed",
            "n_train",
            "n_seen",
            "seen_top1",
            "n_held",
            "held_top1",
        ],
    )
