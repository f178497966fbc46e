"""Accuracy metrics: pure functions over a predictions table.

A predictions table is a DataFrame with at least ``shift``, ``level``, ``correct`` and
``correct5`` columns (plus ``run_id``, ``sample_id``, ``label``, ``class_name`` where a
function groups by them), i.e. rows of the ``predictions`` table of the results
database. Every number is recomputed from these rows; nothing keeps counters.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from robustlab.cells import level_key
from robustlab.metrics.mce import alexnet_table
from robustlab.store.schema import CLEAN_SHIFT as CLEAN


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"predictions table lacks column(s) {', '.join(missing)}")


def add_rates(counts: pd.DataFrame) -> pd.DataFrame:
    """Add top1/top5/error/top5_error to a frame of ``n``, ``n_correct``, ``n_correct5``.

    The one place rates are derived from counts, whether the counts came from pandas or
    from a SQL aggregate in the store.
    """
    out = counts
    for col in ("n", "n_correct", "n_correct5"):
        out[col] = out[col].astype("int64")
    out["top1"] = out["n_correct"] / out["n"]
    out["top5"] = out["n_correct5"] / out["n"]
    out["error"] = 1.0 - out["top1"]
    out["top5_error"] = 1.0 - out["top5"]
    return out


def _summarise(grouped) -> pd.DataFrame:
    return add_rates(
        grouped.agg(
            n=("correct", "size"), n_correct=("correct", "sum"), n_correct5=("correct5", "sum")
        ).reset_index()
    )


def shift_order() -> dict[str, int]:
    """Report order of shifts: clean, the corruptions in canonical order, then the rest of
    the registry in registration order."""
    from robustlab.shifts.registry import list_shifts

    # The AlexNet table lists all 19 corruptions in the canonical order.
    names = [*alexnet_table()["corruption"], *(s.name for s in list_shifts())]
    return {name: i for i, name in enumerate(dict.fromkeys(names))}


def _level_sort_key(level) -> tuple:
    text = level_key(level)
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)


def sort_cells(df: pd.DataFrame) -> pd.DataFrame:
    """Sort rows by run, then shift in report order, then level (numeric levels first)."""
    if df.empty:
        return df.reset_index(drop=True)
    order = shift_order()
    keys = pd.DataFrame(
        {
            "_shift": [order.get(s, len(order)) for s in df["shift"]],
            "_name": df["shift"].astype(str).values,
            "_level": [_level_sort_key(v) for v in df["level"]],
        },
        index=df.index,
    )
    by = (["run_id"] if "run_id" in df.columns else []) + ["_shift", "_name", "_level"]
    tmp = pd.concat([df, keys], axis=1).sort_values(by, kind="stable")
    return tmp.drop(columns=["_shift", "_name", "_level"]).reset_index(drop=True)


def cell_table(predictions: pd.DataFrame, by: Sequence[str] = ("run_id",)) -> pd.DataFrame:
    """Top-1 / top-5 accuracy and error per (``by``..., shift, level) cell.

    Returns:
        Columns ``by``, shift, level, n, n_correct, n_correct5, top1, top5, error,
        top5_error; clean first, then shifts in registry order.
    """
    keys = [c for c in by if c in predictions.columns] + ["shift", "level"]
    _require(predictions, keys + ["correct", "correct5"])
    return sort_cells(_summarise(predictions.groupby(keys, sort=False)))


def per_class(
    predictions: pd.DataFrame,
    by: Sequence[str] = ("run_id", "shift", "level"),
    class_column: str = "label",
) -> pd.DataFrame:
    """Accuracy per class within each (``by``...) group (e.g. per cell)."""
    keys = [c for c in by if c in predictions.columns] + [class_column]
    _require(predictions, keys + ["correct", "correct5"])
    out = _summarise(predictions.groupby(keys, sort=True))
    return out


def family_of(shift: str) -> str:
    """The registry family of a shift (``clean`` for clean rows, ``unknown`` if unregistered)."""
    if shift == CLEAN:
        return CLEAN
    from robustlab.shifts.registry import get_shift

    try:
        return get_shift(shift).family
    except ValueError:
        return "unknown"


def per_family(
    predictions: pd.DataFrame,
    by: Sequence[str] = ("run_id",),
    families: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Accuracy pooled over all cells of each shift family (noise, blur, ...).

    Pooling counts every (sample, cell) prediction once, so a family with more levels or
    shifts weighs each of them equally.

    Args:
        predictions: Prediction rows.
        by: Grouping columns kept in the output (when present).
        families: Shift -> family; shifts not in it take their registry family.
    """
    _require(predictions, ["shift", "correct", "correct5"])
    keys = [c for c in by if c in predictions.columns and c != "shift"] + ["shift"]
    counts = predictions.groupby(keys, sort=False).agg(
        n=("correct", "size"), n_correct=("correct", "sum"), n_correct5=("correct5", "sum")
    )
    return family_counts(counts.reset_index(), by, families)


def family_counts(
    counts: pd.DataFrame,
    by: Sequence[str] = ("run_id",),
    families: dict[str, str] | None = None,
) -> pd.DataFrame:
    """:func:`per_family` from per-cell counts (``shift``, ``n``, ``n_correct``,
    ``n_correct5`` and the ``by`` columns, e.g. :meth:`robustlab.store.Store.cell_table`'s):
    the predictions pooled per family are the cells' counts summed."""
    _require(counts, ["shift", "n", "n_correct", "n_correct5"])
    families = dict(families or {})
    fam = {s: families.get(s) or family_of(s) for s in counts["shift"].unique()}
    df = counts.assign(family=counts["shift"].map(fam))
    keys = [c for c in by if c in df.columns] + ["family"]
    out = add_rates(
        df.groupby(keys, sort=False)
        .agg(n=("n", "sum"), n_correct=("n_correct", "sum"), n_correct5=("n_correct5", "sum"))
        .reset_index()
    )
    rank = {CLEAN: -1}
    return (
        out.assign(_r=out["family"].map(lambda f: rank.get(f, 0)))
        .sort_values([*keys[:-1], "_r", "family"], kind="stable")
        .drop(columns="_r")
        .reset_index(drop=True)
    )


def accuracy_drop(cells: pd.DataFrame, by: Sequence[str] = ("run_id",)) -> pd.DataFrame:
    """Add ``clean_top1``, ``drop`` (clean top-1 minus the cell's top-1) and ``drop5``.

    Args:
        cells: Output of :func:`cell_table`; each group in ``by`` needs its clean cell.

    Raises:
        ValueError: a group has no clean cell to compare against.
    """
    keys = [c for c in by if c in cells.columns]
    _require(cells, ["shift", "top1", "top5"])
    clean = cells[cells["shift"] == CLEAN]
    if keys:
        ref = clean.set_index(keys)[["top1", "top5"]]
        if ref.index.has_duplicates:
            raise ValueError("more than one clean cell per group; group by more columns")
        missing = set(map(tuple, cells[keys].drop_duplicates().values)) - set(
            map(lambda k: k if isinstance(k, tuple) else (k,), ref.index)
        )
        if missing:
            raise ValueError(f"no clean cell for {', '.join(map(str, sorted(missing)))}")
        joined = cells.join(
            ref.rename(columns={"top1": "clean_top1", "top5": "clean_top5"}), on=keys
        )
    else:
        if len(clean) != 1:
            raise ValueError(f"expected exactly one clean cell, found {len(clean)}")
        joined = cells.assign(
            clean_top1=float(clean["top1"].iloc[0]), clean_top5=float(clean["top5"].iloc[0])
        )
    joined["drop"] = joined["clean_top1"] - joined["top1"]
    joined["drop5"] = joined["clean_top5"] - joined["top5"]
    return joined.drop(columns=["clean_top5"])
