"""The tables of ``robustlab results``: per-cell accuracy plus CE / mCE summary rows, the
per-run summary, segmentation scores and the paired comparison of two runs.

The per-cell numbers are SQL aggregates over ``predictions``; the CE rows are the pure
functions of :mod:`robustlab.metrics.mce` applied to those cell tables, with either the
bundled AlexNet errors or a baseline run from the same database. ``report`` builds its
tables with the same functions, so the two never disagree.
"""

from __future__ import annotations

import logging

import pandas as pd

from robustlab.errors import InputError
from robustlab.metrics.mce import (
    ALEXNET,
    alexnet_cells,
    check_full_imagenet_val,
    corruption_errors,
    is_corruption,
    mce,
)
from robustlab.store.db import Store
from robustlab.store.naming import model_label
from robustlab.store.queries import find_baseline_run, is_segmentation, select_runs
from robustlab.store.schema import SALIENCY_TASK

log = logging.getLogger(__name__)

RESULT_COLUMNS = [
    "model",
    "suite",
    "run_id",
    "shift",
    "level",
    "n",
    "top1",
    "top5",
    "error",
    "ce",
    "relative_ce",
    "baseline",
]


# Suites whose corruptions use another generator's constants (the presets, and their
# releases read as downloaded): the AlexNet errors were measured on ImageNet-C's own.
_OTHER_CONSTANTS = frozenset(
    {
        "cifar-c",
        "tiny-imagenet-c",
        "imagenet-64-c",
        "imagenet-c-299",
        "cifar-10-c-published",
        "tiny-imagenet-c-published",
        "imagenet-c-299-published",
    }
)


def _check_imagenet_c_constants(run: dict) -> None:
    """Refuse the AlexNet errors for a run of a preset suite (other constants, sizes)."""
    if str(run.get("suite")) in _OTHER_CONSTANTS:
        raise InputError(
            f"the bundled AlexNet errors are ImageNet-C's (224 px, its constants); suite "
            f"{run['suite']!r} uses another generator's; evaluate a baseline model on the "
            "same images and pass it with --baseline MODEL"
        )


def summary_rows(store: Store, run: dict, cells: pd.DataFrame, baseline: str | None):
    """CE rows per corruption plus one mCE row for ``run``, or None with a reason.

    Args:
        baseline: ``"alexnet"``, a model spec, or None (AlexNet when it applies, else no
            CE rows).

    Raises:
        InputError: an explicit baseline cannot be used (wrong data, missing cells).
    """
    corr = [s for s in dict.fromkeys(cells["shift"]) if is_corruption(s)]
    if not corr:
        return None, "no corruption cells"
    if baseline is None or baseline == ALEXNET:
        try:
            _check_imagenet_c_constants(run)
            check_full_imagenet_val(cells, store.run_stats(run["run_id"])["n_classes"])
        except ValueError as exc:
            if baseline == ALEXNET:
                raise
            return None, str(exc)
        base_cells, label = alexnet_cells(), ALEXNET
    else:
        base_id = find_baseline_run(store, run, baseline)
        base_cells, label = store.cell_table([base_id]), f"{baseline} ({base_id[:8]})"
    ce = corruption_errors(cells[["shift", "level", "error"]], base_cells, corr)
    summary = mce(ce)
    rows = [
        {
            "shift": r.shift,
            "level": "all",
            "n": None,
            "top1": None,
            "top5": None,
            "error": r.error_sum / len(r.levels.split(",")),
            "ce": r.ce,
            "relative_ce": r.relative_ce,
            "baseline": label,
        }
        for r in ce.itertuples()
    ]
    rows.append(
        {
            "shift": f"mCE ({summary['n_corruptions']} corruptions)",
            "level": "all",
            "n": None,
            "top1": None,
            "top5": None,
            "error": None,
            "ce": summary["mce"],
            "relative_ce": summary["relative_mce"],
            "baseline": label,
        }
    )
    return pd.DataFrame(rows), None


def results_table(
    store: Store,
    *,
    run_ids=None,
    models=None,
    suites=None,
    baseline: str | None = None,
    cells: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, list[str]]:
    """One row per model x suite x cell, then CE / mCE rows per run.

    ``cells``: ``Store.cell_table`` of (at least) the selected runs when the caller has it
    already (each computation is a pass over the runs' rows).

    Returns:
        (table with :data:`RESULT_COLUMNS`, notes explaining missing summary rows).
    """
    store.require()
    runs = select_runs(store, run_ids=run_ids, models=models, suites=suites)
    if runs.empty:
        raise InputError(f"no runs match in {store.path}")
    seg = is_segmentation(runs)
    notes = (
        [
            (
                f"{int(seg.sum())} segmentation run(s) not in this table (no predictions); "
                "`robustlab results --segmentation` lists their mIoU and pixel accuracy"
            )
        ]
        if seg.any()
        else []
    )
    sal = pd.Series(
        [isinstance(c, dict) and c.get("task") == SALIENCY_TASK for c in runs["config"]],
        index=runs.index,
        dtype=bool,
    )
    if sal.any():
        notes.append(
            f"{int(sal.sum())} saliency run(s) not in this table (no predictions); "
            "`robustlab report` has their foreground shares"
        )
    runs = runs[~seg & ~sal]
    all_cells = store.cell_table(list(runs["run_id"])) if cells is None else cells
    parts = []
    for run in runs.to_dict("records"):
        cells = all_cells[all_cells["run_id"] == run["run_id"]]
        if cells.empty:
            notes.append(f"run {run['run_id'][:8]} ({run['model_spec']}) has no predictions yet")
            continue
        head = {
            "model": model_label(run["model_spec"], run.get("config")),
            "suite": run["suite"] or "clean",
            "run_id": run["run_id"][:8],
        }
        part = cells[["shift", "level", "n", "top1", "top5", "error"]].assign(
            ce=None, relative_ce=None, baseline=None
        )
        summary, why = summary_rows(store, run, cells, baseline)
        if summary is not None:
            part = pd.concat([part, summary], ignore_index=True)
        elif why != "no corruption cells":
            notes.append(
                f"{run['model_spec']} ({run['suite']}, run {run['run_id'][:8]}): "
                f"no CE/mCE rows: {why}"
            )
        for k, v in reversed(list(head.items())):
            part.insert(0, k, v)
        if run["status"] != "finished":
            notes.append(
                f"run {run['run_id'][:8]} ({run['model_spec']}) is {run['status']}; "
                "rerun the same evaluate command to complete it"
            )
        parts.append(part)
    table = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=RESULT_COLUMNS)
    return table[RESULT_COLUMNS], notes


SEGMENTATION_RESULT_COLUMNS = [
    "model",
    "suite",
    "run_id",
    "shift",
    "level",
    "n",
    "pixel_acc",
    "miou",
    "fg_iou",
    "bg_iou",
    "image_fg_iou",
]


def segmentation_table(
    store: Store, *, run_ids=None, models=None, suites=None, require: bool = False
) -> tuple[pd.DataFrame, list[str]]:
    """Per-cell mIoU / IoU / pixel accuracy of the selected segmentation runs.

    The scores are :func:`robustlab.metrics.segmentation.cell_scores` over the stored
    per-image counts, so they equal what ``robustlab segment`` printed.

    Args:
        require: Raise when no segmentation run matches (``robustlab segment`` needs
            one); otherwise return an empty table.

    Returns:
        (table with :data:`SEGMENTATION_RESULT_COLUMNS`, notes about unfinished runs).
    """
    from robustlab.metrics.segmentation import cell_scores

    store.require()
    runs = select_runs(store, run_ids=run_ids, models=models, suites=suites)
    runs = runs[is_segmentation(runs)] if not runs.empty else runs
    if runs.empty:
        if require:
            raise InputError(f"no segmentation runs match in {store.path}")
        return pd.DataFrame(columns=SEGMENTATION_RESULT_COLUMNS), []
    counts = store.segmentation_counts(list(runs["run_id"]))
    scores = cell_scores(counts)
    parts, notes = [], []
    for run in runs.to_dict("records"):
        part = scores[scores["run_id"] == run["run_id"]].drop(columns=["run_id"])
        if run["status"] != "finished":
            notes.append(
                f"segmentation run {run['run_id'][:8]} ({run['model_spec']}) is "
                f"{run['status']}; rerun the same segment command to complete it"
            )
        if part.empty:
            notes.append(
                f"segmentation run {run['run_id'][:8]} ({run['model_spec']}) has no rows yet"
            )
            continue
        part.insert(0, "run_id", run["run_id"][:8])
        part.insert(0, "suite", run["suite"] or "clean")
        part.insert(0, "model", run["model_spec"])
        parts.append(part)
    table = (
        pd.concat(parts, ignore_index=True)
        if parts
        else pd.DataFrame(columns=SEGMENTATION_RESULT_COLUMNS)
    )
    return table[SEGMENTATION_RESULT_COLUMNS], notes


def summary_table(
    store: Store, *, run_ids=None, models=None, suites=None, baseline: str | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """One row per classification run: :func:`robustlab.metrics.summary.summary_row`.

    The mCE columns are the mCE rows of :func:`results_table` (same baseline rule), so
    ``results --summary`` and ``results`` never disagree.

    Returns:
        (table with :data:`robustlab.metrics.summary.SUMMARY_COLUMNS`, notes).
    """
    from robustlab.metrics.summary import SUMMARY_COLUMNS

    runs = select_runs(store, run_ids=run_ids, models=models, suites=suites)
    runs = runs[~is_segmentation(runs)]
    cells = store.cell_table(list(runs["run_id"]))  # one pass over the rows, for both
    table, notes = results_table(
        store, run_ids=run_ids, models=models, suites=suites, baseline=baseline, cells=cells
    )
    mce_rows = table[table["shift"].astype(str).str.startswith("mCE (")]
    mce = {
        run_id: {
            "mce": hit.iloc[0]["ce"],
            "relative_mce": hit.iloc[0]["relative_ce"],
            "baseline": hit.iloc[0]["baseline"],
        }
        for run_id in runs["run_id"]
        if not (hit := mce_rows[mce_rows["run_id"] == run_id[:8]]).empty
    }
    rows = run_summaries(store, runs.to_dict("records"), mce, cells)
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS), notes


def run_summaries(
    store: Store,
    runs: list[dict],
    mce: dict[str, dict],
    cells: pd.DataFrame | None = None,
    images: dict[str, int] | None = None,
) -> list[dict]:
    """The summary row of each run with predictions, computed from aggregates in the
    database (:func:`robustlab.metrics.summary.summary_row`): per-cell counts, distinct
    images and the rows of ImageNet-9's two cells, never a run's whole table.

    Args:
        runs: ``runs`` rows (JSON decoded).
        mce: run id -> ``{"mce", "relative_mce", "baseline"}`` where a baseline applies.
        cells, images: ``Store.cell_table`` and ``Store.distinct_images`` of the runs when
            the caller has them already.
    """
    from robustlab.metrics.summary import BG_GAP_CELLS, run_bg_gap, summary_row

    ids = [r["run_id"] for r in runs]
    if cells is None:
        cells = store.cell_table(ids)
    if images is None:
        images = store.distinct_images(ids)
    paired = [rid for rid, g in cells.groupby("run_id") if set(BG_GAP_CELLS) <= set(g["shift"])]
    pairs = store.predictions(
        paired, columns=["run_id", "sample_id", "shift", "correct"], shifts=BG_GAP_CELLS
    )
    rows = []
    for run in runs:
        rid = run["run_id"]
        mine = cells[cells["run_id"] == rid]
        if mine.empty:
            continue
        gap = run_bg_gap(pairs[pairs["run_id"] == rid])
        rows.append(summary_row(run, mine, images.get(rid, 0), gap, mce.get(rid)))
    return rows


def compare_table(
    store: Store,
    run_a: str,
    run_b: str,
    *,
    seed: int = 0,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> tuple[pd.DataFrame, list[str]]:
    """Runs A and B cell by cell: :func:`robustlab.metrics.compare.compare_runs`, from
    counts joined in the database (:meth:`Store.paired_counts`).

    Args:
        run_a, run_b: Run ids or unique prefixes.
        seed: Seed of the bootstrap generator (the same seed gives the same intervals).

    Returns:
        (table with ``compare.COMPARE_COLUMNS``, notes: what differs between the runs).

    Raises:
        InputError: an unknown or ambiguous id, or two runs with no image in common.
    """
    import numpy as np

    from robustlab.metrics.compare import compare_counts

    store.require()
    picked = [select_runs(store, run_ids=[rid]).iloc[0] for rid in (run_a, run_b)]
    cells, per_image = store.paired_counts(picked[0]["run_id"], picked[1]["run_id"])
    for r, n in zip(picked, (cells["n_a"].sum(), cells["n_b"].sum())):
        if not n:
            raise InputError(f"run {r['run_id'][:8]} ({r['model_spec']}) has no predictions")
    table = compare_counts(
        cells,
        per_image,
        np.random.default_rng(seed),
        n_resamples=n_resamples,
        confidence=confidence,
    )
    if not (table["n_shared"] > 0).any():
        raise InputError(
            f"runs {picked[0]['run_id'][:8]} and {picked[1]['run_id'][:8]} share "
            "no image in any cell; compare runs evaluated on the same data"
        )
    a, b = picked
    notes = [
        (
            f"A = {a['model_spec']} ({a['suite'] or 'clean'}, run {a['run_id'][:8]}), "
            f"B = {b['model_spec']} ({b['suite'] or 'clean'}, run {b['run_id'][:8]}); diff = "
            f"B - A on the images both runs predicted, {100 * confidence:.0f} % paired "
            f"bootstrap interval ({n_resamples} resamples, seed {seed})"
        )
    ]
    if a["data_fingerprint"] != b["data_fingerprint"]:
        notes.append(
            "the two runs were evaluated on different data; only shared image ids are compared"
        )
    return table, notes
