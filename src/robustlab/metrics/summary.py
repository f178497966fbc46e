"""One line per run: the numbers a reader looks for first.

``robustlab results --summary`` and the report's first table both come from
:func:`summarise_run`, a pure function of one run's ``runs`` record, its prediction rows
and (when a CE baseline applies) its mCE row, so the two can never disagree.

The columns and what they mean:

* ``images``: distinct images with at least one prediction in the run.
* ``clean_top1``: top-1 accuracy on the clean images.
* ``shifted_top1``: the mean over the run's shifted cells (shift x level) of each cell's
  top-1 accuracy, so a cell that lost images to skips weighs as much as any other.
* ``mce`` / ``relative_mce`` / ``baseline``: from ``robustlab results``' mCE row; blank
  when no baseline applies (``baseline`` then says why not in the notes).
* ``s_robust`` / ``s_partial``: XIMAGENET-12's robustness score over that benchmark's
  scenarios. Stored predictions give only EX1 (train on original, test on scenario), so
  ``s_robust`` stays blank and ``s_partial`` = 1 - sigma2_cross.
* ``bg_gap``: ImageNet-9's acc(mixed_same) - acc(mixed_rand) over paired images.
* ``seed``: the global seed the shifts drew from (two runs that differ only in it are two
  draws of the same benchmark).
* ``protocol``: how the images were framed and shown to the model: the protocol's name
  (``imagenet-c``, ``model``, ``imagenet-e``, ``imagenet-e-archive``), its one-line label
  when it has none (``custom: ...``), and ``(override)`` when ``--protocol`` replaced the
  suite's own.
* ``path``: how the shifted pixels were made: ``on-the-fly`` or ``generated`` (from a
  folder written by ``robustlab generate``), or the published archive's own folders;
  on the fly with batched torch shifts (``--shift-device``) it says
  ``on-the-fly, torch:cuda`` (or ``torch:cpu``): other pixels than the exact path.
* ``precision``: the numeric type the model computed in: ``float32`` (its parameters'
  type), or ``bfloat16 (autocast)`` / ``float16 (autocast)`` for a run with
  ``--precision bf16|fp16``; ``, compiled`` is added for a ``--compile`` run.
* ``defence``: the test-time defence the model ran behind (``clahe``, ``nlmeans``,
  ``ten-crop``, ``clahe+ten-crop``; parameters shown when not the defaults); blank for
  the plain model (:mod:`robustlab.defences`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from robustlab.defences import defence_label
from robustlab.metrics.scenes import bg_gap, robustness_score

from robustlab.store.schema import CLEAN_SHIFT as CLEAN

SUMMARY_COLUMNS = [
    "model",
    "suite",
    "run_id",
    "data",
    "images",
    "clean_top1",
    "shifted_top1",
    "mce",
    "relative_mce",
    "baseline",
    "s_robust",
    "s_partial",
    "bg_gap",
    "seed",
    "protocol",
    "path",
    "precision",
    "defence",
    "status",
]
# ImageNet-9's pair of cells whose accuracy difference is the BG-gap.
BG_GAP_CELLS = ("mixed_same", "mixed_rand")


def _path(config: Mapping) -> str | None:
    """The ``path`` column: the source kind, plus ``torch:<device>`` for batched shifts."""
    source = config.get("source")
    shift_path = config.get("shift_path")
    if not shift_path:
        return source
    from robustlab.store.naming import shift_path_label

    return f"{source}, {shift_path_label(shift_path)}"


def is_ximagenet12(shift: str) -> bool:
    """Whether a shift is one of XIMAGENET-12's scenarios (its registry tag)."""
    from robustlab.shifts.registry import get_shift

    try:
        return "ximagenet12" in get_shift(shift).tags
    except ValueError:
        return False


def _scenario_accuracies(shifted: pd.DataFrame) -> dict[str, float]:
    """XIMAGENET-12 scenario -> accuracy from the shifted cells' counts (sorted by shift
    and level); a shift with several levels gives ``shift:level``."""
    out: dict[str, float] = {}
    for shift, g in shifted.groupby("shift", sort=True):
        if not is_ximagenet12(str(shift)):
            continue
        for rec in g.itertuples(index=False):
            name = str(shift) if len(g) == 1 else f"{shift}:{rec.level}"
            out[name] = int(rec.n_correct) / int(rec.n)
    return out


def protocol_text(run: Mapping[str, Any]) -> str | None:
    """The ``protocol`` column of a run (see the module docstring); runs whose record has
    no protocol entry (published layouts, runs stored before protocols had names) are named
    from their preprocessing record."""
    from robustlab.suites import protocol_label, protocol_name

    config = run.get("config") or {}
    p = config.get("protocol") if isinstance(config, Mapping) else None
    override = None
    if isinstance(p, Mapping) and (p.get("name") or p.get("label")):
        described, override = dict(p), p.get("override")
    else:
        pre = run.get("preprocessing") or {}
        found = pre.get("protocol") if isinstance(pre, Mapping) else None
        if not isinstance(found, Mapping) or not found:
            return None
        described = dict(found)
    name = str(described.get("name") or protocol_name(described))
    text = name if name != "custom" else str(described.get("label") or protocol_label(described))
    return text + (" (override)" if override else "")


def _short_dtype(value) -> str | None:
    """``torch.float32`` -> ``float32``: the framework prefix says nothing to a reader."""
    return None if value is None else str(value).rsplit(".", 1)[-1]


def precision_label(config: Mapping) -> str | None:
    """The ``precision`` column of a run's config: the autocast or parameter type, and
    whether the forward pass was compiled (an archive run keeps both outside ``inputs``)."""
    inputs = config.get("inputs") or {}
    value = _short_dtype(inputs.get("precision") or config.get("precision"))
    if inputs.get("compile") or config.get("compile"):
        return f"{value or 'unknown'}, compiled"
    return value


def summarise_run(
    run: Mapping[str, Any], predictions: pd.DataFrame, mce: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The summary row of one run (keys: :data:`SUMMARY_COLUMNS`) from its prediction rows.

    Args:
        run: The run's ``runs`` row (JSON columns decoded), as ``Store.runs()`` gives it.
        predictions: The run's prediction rows (``sample_id``, ``shift``, ``level``,
            ``correct`` at least).
        mce: ``{"mce", "relative_mce", "baseline"}`` when a CE baseline applies.

    Returns:
        :func:`summary_row` of the rows' counts.
    """
    preds = predictions.assign(level=predictions["level"].astype(str))
    cells = (
        preds.assign(correct=preds["correct"].astype(bool))
        .groupby(["shift", "level"], sort=True)["correct"]
        .agg(n="size", n_correct="sum")
        .reset_index()
    )
    pair = preds[preds["shift"].isin(BG_GAP_CELLS)]
    return summary_row(run, cells, int(preds["sample_id"].nunique()), run_bg_gap(pair), mce)


def run_bg_gap(rows: pd.DataFrame) -> float | None:
    """ImageNet-9's BG-gap of one run from the rows of its two cells (``sample_id``,
    ``shift``, ``correct``), or None without both cells or an image predicted in both."""
    if not set(BG_GAP_CELLS) <= set(rows["shift"]):
        return None
    try:
        return float(bg_gap(rows, by=()).iloc[0]["bg_gap"])
    except ValueError:  # no image predicted in both cells
        return None


def summary_row(
    run: Mapping[str, Any],
    cells: pd.DataFrame,
    images: int,
    gap: float | None = None,
    mce: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The summary row of one run (keys: :data:`SUMMARY_COLUMNS`) from compact numbers:
    what ``results --summary`` and the report compute in the database for runs of
    millions of predictions (:func:`summarise_run` does the same from rows).

    Args:
        run: The run's ``runs`` row (JSON columns decoded), as ``Store.runs()`` gives it.
        cells: One row per cell: ``shift``, ``level`` (text), ``n``, ``n_correct``.
        images: Distinct images with at least one prediction in the run.
        gap: The run's BG-gap (:func:`run_bg_gap`), None without ImageNet-9's pair.
        mce: ``{"mce", "relative_mce", "baseline"}`` when a CE baseline applies.

    Returns:
        One dict; numbers absent for this run (no clean cell, no shifted cell, no
        XIMAGENET-12 scenario, no ImageNet-9 pair, no baseline) are None.
    """
    config = run.get("config") or {}
    cells = cells.assign(level=cells["level"].astype(str)).sort_values(
        ["shift", "level"], kind="stable"
    )
    clean = cells[cells["shift"] == CLEAN]
    shifted = cells[cells["shift"] != CLEAN]
    cell_top1 = shifted["n_correct"].astype("int64") / shifted["n"].astype("int64")
    mu = int(clean["n_correct"].sum()) / int(clean["n"].sum()) if len(clean) else None
    s_robust = s_partial = None
    scen = _scenario_accuracies(shifted)
    if scen and mu is not None:
        score = robustness_score(mu, scen)
        s_robust, s_partial = score.s_robust, score.s_partial
    root = run.get("data_root")
    return {
        "model": run["model_spec"],
        "suite": run.get("suite") or "clean",
        "run_id": str(run["run_id"])[:8],
        "data": Path(str(root)).name if root else None,
        "images": int(images),
        "clean_top1": mu,
        "shifted_top1": float(cell_top1.mean()) if len(cell_top1) else None,
        "mce": (mce or {}).get("mce"),
        "relative_mce": (mce or {}).get("relative_mce"),
        "baseline": (mce or {}).get("baseline"),
        "s_robust": s_robust,
        "s_partial": s_partial,
        "bg_gap": gap,
        "seed": None if pd.isna(run.get("seed")) else int(run["seed"]),
        "protocol": protocol_text(run),
        "path": _path(config),
        "precision": precision_label(config),
        "defence": defence_label(config.get("defence")),
        "status": run.get("status"),
    }
