"""Corruption Error (CE), mCE, relative CE and relative mCE (Hendrycks & Dietterich, 2019).

For model f, corruption c and severity s, E^f_{s,c} is the top-1 error; E^f_clean the
clean error. Against a baseline b:

    CE^f_c          = sum_s E^f_{s,c} / sum_s E^b_{s,c}
    relative CE^f_c = sum_s (E^f_{s,c} - E^f_clean) / sum_s (E^b_{s,c} - E^b_clean)
    mCE, relative mCE = the means over corruptions.

The baseline is either the bundled AlexNet errors (valid only for the full ImageNet
validation set: 50,000 images over 1,000 classes) or any run stored in the database that
was evaluated on the same images and cells. Inputs are cell tables (one row per shift,
level with an ``error`` column), so these are pure functions of the predictions.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from robustlab.errors import InputError
from robustlab.store.schema import CLEAN_SHIFT as CLEAN

ALEXNET = "alexnet"
IMAGENET_VAL_IMAGES = 50_000
IMAGENET_CLASSES = 1_000
_CSV = "alexnet_imagenet_c.csv"


@lru_cache(maxsize=1)
def alexnet_table() -> pd.DataFrame:
    """The bundled AlexNet errors: columns corruption, s1..s5, mean (clean row: mean only)."""
    text = resources.files("robustlab.metrics").joinpath(_CSV).read_text()
    rows = list(csv.reader(line for line in text.splitlines() if line and not line.startswith("#")))
    header, body = rows[0], rows[1:]
    df = pd.DataFrame(body, columns=header)
    for c in header[1:]:
        df[c] = pd.to_numeric(df[c].replace("", np.nan))
    return df


def is_corruption(shift: str) -> bool:
    """Whether CE is defined for ``shift``: a corruption of ImageNet-C's family (its 15,
    its 4 extras, a row of the AlexNet table), never the clean cell. ``results`` gives such
    shifts CE rows and ``report`` groups them as corruptions by this one test."""
    if shift == CLEAN:
        return False
    if shift in set(alexnet_table()["corruption"]):
        return True
    try:
        from robustlab.shifts.corruptions import list_corruptions

        return shift in list_corruptions("all")
    except ValueError:
        return False


def alexnet_cells() -> pd.DataFrame:
    """The AlexNet errors as a cell table: shift, level ('0' for clean, '1'..'5'), error."""
    rows = []
    for rec in alexnet_table().itertuples(index=False):
        if rec.corruption == CLEAN:
            rows.append((CLEAN, "0", float(rec.mean)))
            continue
        for s in range(1, 6):
            rows.append((rec.corruption, str(s), float(getattr(rec, f"s{s}"))))
    return pd.DataFrame(rows, columns=["shift", "level", "error"])


def alexnet_clean_error() -> float:
    t = alexnet_table()
    return float(t.loc[t["corruption"] == CLEAN, "mean"].iloc[0])


def check_full_imagenet_val(cells: pd.DataFrame, n_classes: int) -> None:
    """Refuse the AlexNet constants unless every cell covers the full ImageNet val set.

    Args:
        cells: The run's cell table (``shift``, ``level``, ``n``).
        n_classes: Distinct labels among the run's samples.

    Raises:
        InputError: one line saying what differs and what to do instead.
    """
    short = cells[cells["n"] != IMAGENET_VAL_IMAGES]
    if n_classes != IMAGENET_CLASSES or not short.empty:
        n = int(cells["n"].max()) if len(cells) else 0
        raise InputError(
            "the bundled AlexNet errors are only valid on the full ImageNet validation set "
            f"({IMAGENET_VAL_IMAGES:,} images over {IMAGENET_CLASSES:,} classes in every cell); "
            f"this run has up to {n:,} images over {n_classes:,} classes; evaluate a baseline "
            "model on the same images and pass it with --baseline MODEL"
        )


def _error_lookup(cells: pd.DataFrame, what: str) -> dict[tuple[str, str], float]:
    for c in ("shift", "level", "error"):
        if c not in cells.columns:
            raise ValueError(f"{what} cell table lacks column {c!r}")
    keys = list(zip(cells["shift"].astype(str), cells["level"].astype(str)))
    if len(set(keys)) != len(keys):
        raise ValueError(f"{what} cell table has duplicate (shift, level) rows; pass one run")
    return dict(zip(keys, cells["error"].astype(float)))


def corruption_errors(
    model_cells: pd.DataFrame, baseline_cells: pd.DataFrame, corruptions: list[str] | None = None
) -> pd.DataFrame:
    """CE and relative CE per corruption.

    Args:
        model_cells: One run's cells (shift, level, error), including the clean cell.
        baseline_cells: The baseline's cells, same columns.
        corruptions: Shifts to score (default: every non-clean shift of the model run,
            in the order they appear).

    Returns:
        Columns shift, levels (comma-separated), error_sum, baseline_error_sum, ce,
        relative_ce. Relative CE is NaN when the baseline's summed degradation is zero, or
        when the model run has no clean cell (a downloaded ImageNet-C publishes no clean
        images; CE needs none).

    Raises:
        InputError: a cell the model has is missing from the baseline, or the baseline has
            no clean cell; the message names the missing cells.
    """
    model = _error_lookup(model_cells, "model")
    base = _error_lookup(baseline_cells, "baseline")
    if (CLEAN, "0") not in base:
        raise InputError("the baseline has no clean cell; relative CE needs its clean error")
    if corruptions is None:
        corruptions = list(dict.fromkeys(s for s, _ in model if s != CLEAN))
    e_clean, b_clean = model.get((CLEAN, "0"), float("nan")), base[(CLEAN, "0")]
    rows, missing = [], []
    for c in corruptions:
        levels = [lv for s, lv in model if s == c]
        if not levels:
            raise InputError(f"the model run has no cells for {c!r}")
        miss = [f"{c}/{lv}" for lv in levels if (c, lv) not in base]
        if miss:
            missing.extend(miss)
            continue
        e = np.array([model[(c, lv)] for lv in levels])
        b = np.array([base[(c, lv)] for lv in levels])
        denom = float(np.sum(b - b_clean))
        rel = float(np.sum(e - e_clean)) / denom if denom != 0 else float("nan")
        rows.append(
            (
                c,
                ",".join(levels),
                float(e.sum()),
                float(b.sum()),
                float(e.sum() / b.sum()) if b.sum() > 0 else float("nan"),
                rel,
            )
        )
    if missing:
        shown = ", ".join(missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise InputError(f"the baseline lacks cells the model has: {shown}")
    return pd.DataFrame(
        rows, columns=["shift", "levels", "error_sum", "baseline_error_sum", "ce", "relative_ce"]
    )


def mce(ce_table: pd.DataFrame) -> dict[str, float]:
    """mCE and relative mCE: plain means of CE and relative CE over the corruptions."""
    if ce_table.empty:
        raise InputError("no corruption errors to average")
    return {
        "mce": float(ce_table["ce"].mean()),
        "relative_mce": float(ce_table["relative_ce"].mean()),
        "n_corruptions": int(len(ce_table)),
    }
