"""Everything the report shows, read from the results database and computed by the metrics
module (never by hand here).

The per-cell and CE / mCE numbers come from :func:`robustlab.workflows.results.results_table`,
the same function ``robustlab results`` prints, so the two always agree. The rest
(bootstrap intervals, per-family and per-class accuracy, scenario accuracies, robustness
score, BG-gap, regression) are the functions of :mod:`robustlab.metrics` applied to counts
the database computes from the stored predictions (:mod:`robustlab.store.aggregates`: per
cell, class and image, never a run's 3.8 M rows in pandas). A part that cannot be computed
becomes a note saying why, never a silently missing or wrong number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from robustlab.errors import InputError
from robustlab.metrics.attributes import attribute_effects
from robustlab.metrics.mce import is_corruption
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.store.aggregates import ImageCounts, pool_levels
from robustlab.store.schema import HOLDOUT_SUITE
from robustlab.workflows.report.benchmark_data import (
    edit_curves,
    edit_tables,
    holdout_table,
    imagenet_d_subsets,
    is_edit,
    mining_table,
    review_table,
)
from robustlab.workflows.report.fits import FitData, _regression
from robustlab.workflows.report.runs import RunView

if TYPE_CHECKING:
    from robustlab.metrics.regression import RegressionResult

log = logging.getLogger(__name__)


@dataclass
class ReportData:
    """All numbers of one report.

    Attributes:
        db: The database file.
        runs: Selected runs, oldest first.
        baseline: The ``--baseline`` spec given, if any.
        results: ``results_table`` rows of every run (what ``robustlab results`` prints),
            plus ``run_full`` (the full run id) and ``label``.
        cells: The per-cell rows of ``results`` with bootstrap intervals
            (``top1_lo``/``top1_hi``/``top5_lo``/``top5_hi``) and ``family``.
        ce: CE rows (run_full, shift, error, ce, relative_ce, baseline).
        mce: run id -> {mce, relative_mce, n_corruptions, baseline}.
        corruption_error: run_full, shift, family, mean_error (over stored severities).
        families: per-family accuracy per run and level (for the family plot).
        pooled: run id -> dict(clean top-1, shifted top-1 and intervals).
        scenarios: run id -> (mu, {scenario: accuracy}).
        robustness: run id -> RobustnessScore (EX1 only: partial).
        bg_gap: BG-gap rows (run_id, n, acc_same, acc_rand, bg_gap).
        class_drops: per-class drop rows (run_id, shift, label, class name, top1, drop).
        regression: RegressionResult or None (per-cell OLS).
        logit: RegressionResult or None (per-image logistic model, clustered by image).
        edits: ImageNet-E table rows (run_full, label, shift, level, n, top1, top1_lo,
            top1_hi, clean, n_clean, clean_paired, drop): accuracy and paired drop from
            clean per attribute level (:func:`edit_tables`).
        imagenet_d: top-1 per ImageNet-D subset of the runs on the imagenet-d label space
            (run_full, label, subset, n, top1); see :func:`imagenet_d_subsets`.
        mining, reviews: ``robustlab mine`` records and ``robustlab review`` statistics of
            the database (:func:`mining_table`, :func:`review_table`).
        edit_effects: logistic fits of correctness on each measured attribute per run and
            edit (:func:`robustlab.metrics.attributes.attribute_effects`).
        edit_curves: accuracy vs a measured attribute (run_full, label, attribute, x, n,
            top1): each edited image binned by what its edit achieved (quantile bins).
        surface: the surface-variation runs (``robustlab holdout``): protocol, what was held
            out, in-distribution and held-out top-1 (:func:`robustlab.workflows.report.benchmark_data.holdout_table`).
        summary: One row per run (``robustlab results --summary``'s columns, from
            :func:`robustlab.metrics.summary.summarise_run`) plus ``run_full``.
        notes: Why something is absent or partial, one line each.
    """

    db: Path
    runs: list[RunView]
    baseline: str | None
    results: pd.DataFrame
    cells: pd.DataFrame
    ce: pd.DataFrame
    mce: dict[str, dict[str, Any]]
    corruption_error: pd.DataFrame
    families: pd.DataFrame
    pooled: dict[str, dict[str, float]]
    scenarios: dict[str, tuple[float, dict[str, float]]]
    robustness: dict[str, Any]
    bg_gap: pd.DataFrame
    class_drops: pd.DataFrame
    regression: RegressionResult | None = None
    logit: RegressionResult | None = None
    edits: pd.DataFrame = field(default_factory=pd.DataFrame)
    edit_curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    edit_effects: pd.DataFrame = field(default_factory=pd.DataFrame)
    imagenet_d: pd.DataFrame = field(default_factory=pd.DataFrame)
    mining: pd.DataFrame = field(default_factory=pd.DataFrame)
    reviews: pd.DataFrame = field(default_factory=pd.DataFrame)
    n_resamples: int = 0
    confidence: float = 0.95
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    surface: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)

    def run(self, run_id: str) -> RunView:
        return next(r for r in self.runs if r.run_id == run_id)

    @property
    def labels(self) -> dict[str, str]:
        return {r.run_id: r.label for r in self.runs}


def _is_ximagenet12(shift: str) -> bool:
    from robustlab.shifts.registry import get_shift

    try:
        return "ximagenet12" in get_shift(shift).tags
    except ValueError:
        return False


def family(shift: str) -> str:
    from robustlab.metrics.accuracy import family_of

    return family_of(shift)


def _labels(runs: pd.DataFrame) -> list[str]:
    from robustlab.store.naming import model_label

    specs = [model_label(s, c) for s, c in zip(runs["model_spec"], runs["config"])]
    return [
        s if specs.count(s) == 1 else f"{s} [{rid[:8]}]" for s, rid in zip(specs, runs["run_id"])
    ]


class ClassNames:
    """id -> readable class name of a label space (``class <id>`` when unknown).

    Attributes:
        size: Number of classes known (0 when the label space cannot be loaded).
    """

    def __init__(self, label_space: str | None):
        self.classes: Sequence[str] = ()
        if label_space:
            try:
                from robustlab.data.labels import get_label_space

                self.classes = list(get_label_space(label_space).classes)
            except (ImportError, ValueError, KeyError) as exc:
                log.info("class names of %s unavailable: %s", label_space, exc)

    @property
    def size(self) -> int:
        return len(self.classes)

    def __call__(self, i) -> str:
        if i is None or (isinstance(i, float) and np.isnan(i)):
            return "?"
        i = int(i)
        return str(self.classes[i]) if 0 <= i < len(self.classes) else f"class {i}"


def run_namer(record: dict) -> ClassNames:
    """Class names of a run: its own list when it has one (a network trained from scratch
    on a set's classes, as ``robustlab holdout`` stores in ``config["classes"]``), else its
    label space's."""
    classes = (record.get("config") or {}).get("classes")
    if classes:
        namer = ClassNames(None)
        namer.classes = list(classes)
        return namer
    return class_namer(record.get("label_space"))


def class_namer(label_space: str | None) -> ClassNames:
    """Cached :class:`ClassNames` for a label space name."""
    if label_space not in _NAMERS:
        _NAMERS[label_space] = ClassNames(label_space)
    return _NAMERS[label_space]


_NAMERS: dict[str | None, ClassNames] = {}


def gather(
    db: str | Path,
    *,
    run_ids: Sequence[str] | None = None,
    baseline: str | None = None,
    rng: np.random.Generator | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    regression: bool = True,
) -> ReportData:
    """Read the selected runs and compute every table and plot input.

    Args:
        db: Results database file.
        run_ids: Run ids or unique prefixes (default: every run in the database).
        baseline: CE baseline as ``robustlab results --baseline`` takes it: ``"alexnet"``
            or a model spec evaluated on the same images (default: AlexNet when valid).
        rng: Generator for the bootstrap intervals (default ``default_rng(0)``, so a
            report is reproducible).
        n_resamples: Bootstrap resamples per interval.
        confidence: Interval coverage.
        regression: Fit the accuracy regression when the data allows it.

    Raises:
        InputError: no database, no matching runs, or none with predictions.
    """
    from robustlab.metrics.accuracy import family_counts

    if rng is None:
        rng = np.random.default_rng(0)
    store = Store(db)
    store.require()
    runs_df, runs = _select(store, run_ids)
    notes: list[str] = []
    # Aggregates computed in the database: a full ImageNet-C run is 3.8 M predictions,
    # and nothing below needs them as rows (robustlab.store.aggregates). Each pass over
    # the rows costs seconds per run, so each is made once: per cell and class together,
    # then per image for each run.
    counts, classes = store.cell_and_class_counts([r.run_id for r in runs])
    results, runs = _results(store, runs, baseline, notes, counts)
    ids = [r.run_id for r in runs]
    counts = counts[counts["run_id"].isin(ids)].reset_index(drop=True)
    classes = classes[classes["run_id"].isin(ids)]
    images = {rid: store.image_counts(rid) for rid in sorted(ids)}

    # the generator's draws, in this order, are part of the report's reproducibility
    cells = _cells(results, counts, rng, n_resamples, confidence)
    ce, mce_rows = _ce_rows(results)

    # Pooled accuracy per family and level (plot), and per run (leaderboard).
    fam_map = {s: family(s) for s in counts["shift"].unique()}
    families = family_counts(counts, by=("run_id", "level"), families=fam_map)
    pooled = _pooled(images, counts, cells, rng, n_resamples, confidence)
    scenarios, robustness, bg = _scenes(store, runs, counts, notes)
    class_drops = _class_drops(classes, notes)
    reg = logit = None
    if regression:
        fit_data = FitData.from_store(
            store, counts, pool_levels(classes), {k: v.ids for k, v in images.items()}
        )
        reg, logit = _regression(fit_data, runs, notes)
    return ReportData(
        db=store.path,
        runs=runs,
        baseline=baseline,
        results=results,
        cells=cells,
        ce=ce,
        mce=mce_rows,
        corruption_error=_corruption_error(cells),
        families=families,
        pooled=pooled,
        scenarios=scenarios,
        robustness=robustness,
        bg_gap=bg,
        class_drops=class_drops,
        regression=reg,
        logit=logit,
        n_resamples=n_resamples,
        confidence=confidence,
        summary=_summary(store, runs, counts, {k: len(v.ids) for k, v in images.items()}, mce_rows),
        notes=notes,
        **_benchmark_tables(store, runs_df, runs, cells, counts, notes),
    )


def _select(store: Store, run_ids: Sequence[str] | None) -> tuple[pd.DataFrame, list[RunView]]:
    """The selected ``runs`` rows, and a view of each with the label the report shows."""
    from robustlab.store.queries import select_runs

    runs_df = select_runs(store, run_ids=run_ids)
    if runs_df.empty:
        raise InputError(f"no runs in {store.path}; run `robustlab evaluate` first")
    runs = [
        RunView(rid, lab, rec)
        for rid, lab, rec in zip(runs_df["run_id"], _labels(runs_df), runs_df.to_dict("records"))
    ]
    return runs_df, runs


def _results(
    store: Store, runs: list[RunView], baseline: str | None, notes: list[str], cells: pd.DataFrame
) -> tuple[pd.DataFrame, list[RunView]]:
    """``results_table`` rows of every run with predictions, and those runs.

    Exactly as ``robustlab results`` computes them, one run at a time so that a baseline
    missing for one run leaves the others' CE rows in place. A baseline that fits no run at
    all is the user's mistake (as in ``robustlab results``); one that fits only some runs
    (several data sets in one database) leaves a note.
    """
    from robustlab.workflows.results import results_table

    parts, kept, failed = [], [], []
    for r in runs:
        mine = cells[cells["run_id"] == r.run_id]
        try:
            part, run_notes = results_table(
                store, run_ids=[r.run_id], baseline=baseline, cells=mine
            )
        except ValueError as exc:
            if baseline is None:
                raise
            failed.append(exc)
            notes.append(f"{r.label}: no CE/mCE against baseline {baseline!r}: {exc}")
            part, run_notes = results_table(store, run_ids=[r.run_id], baseline=None, cells=mine)
            part = part[part["level"] != "all"]
            run_notes = [n for n in run_notes if "CE/mCE" not in n]
        notes.extend(run_notes)
        if part.empty:
            continue
        parts.append(part.assign(run_full=r.run_id, label=r.label))
        kept.append(r)
    if not parts:
        raise InputError(f"none of the selected runs in {store.path} has predictions yet")
    if failed and len(failed) == len(runs):
        raise failed[0]
    return pd.concat(parts, ignore_index=True), kept


def _cells(
    results: pd.DataFrame,
    counts: pd.DataFrame,
    rng: np.random.Generator,
    n_resamples: int,
    confidence: float,
) -> pd.DataFrame:
    """The per-cell rows of ``results`` with bootstrap intervals (from the cells' counts)
    and the shift's family."""
    from robustlab.metrics.bootstrap import count_intervals

    cells = results[results["level"] != "all"].copy()
    ci = count_intervals(
        counts, rng, by=("run_id", "shift", "level"), n_resamples=n_resamples, confidence=confidence
    ).rename(columns={"run_id": "run_full"})
    cells = cells.merge(ci, on=["run_full", "shift", "level"], how="left")
    cells["family"] = [family(s) for s in cells["shift"]]
    return cells


def _ce_rows(results: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    """The CE rows, and run id -> {mce, relative_mce, n_corruptions, baseline}."""
    summary = results[results["level"] == "all"]
    is_mce = summary["shift"].astype(str).str.startswith("mCE (")
    ce = summary[~is_mce][["run_full", "label", "shift", "error", "ce", "relative_ce", "baseline"]]
    mce_rows = {
        row.run_full: {
            "mce": row.ce,
            "relative_mce": row.relative_ce,
            "n_corruptions": int(str(row.shift).split("(")[1].split()[0]),
            "baseline": row.baseline,
        }
        for row in summary[is_mce].itertuples()
    }
    return ce.reset_index(drop=True), mce_rows


def _corruption_error(cells: pd.DataFrame) -> pd.DataFrame:
    """Mean error over the stored severities of each corruption (ImageNet-C's E_c when no
    baseline makes CE possible); where CE rows exist their `error` column is the same mean."""
    corr_cells = cells[[is_corruption(s) for s in cells["shift"]]]
    corruption_error = (
        corr_cells.groupby(["run_full", "shift"], sort=False)["error"]
        .mean()
        .rename("mean_error")
        .reset_index()
    )
    corruption_error["family"] = [family(s) for s in corruption_error["shift"]]
    return corruption_error


def _pooled(
    images: dict[str, ImageCounts],
    counts: pd.DataFrame,
    cells: pd.DataFrame,
    rng: np.random.Generator,
    n_resamples: int,
    confidence: float,
) -> dict[str, dict[str, float]]:
    """Per run: clean top-1 and pooled shifted top-1 with their intervals (a per-image
    bootstrap: the images, not the predictions, are the independent units; each image's
    counts come from the database, 50,000 pairs for a full run)."""
    from robustlab.metrics.bootstrap import ratio_ci

    pooled: dict[str, dict[str, float]] = {}
    # runs in id order: the order of the generator's draws
    for rid, g in counts.sort_values("run_id", kind="stable").groupby("run_id", sort=False):
        clean = g[g["shift"] == CLEAN_SHIFT]
        shifted = g[g["shift"] != CLEAN_SHIFT]
        entry: dict[str, float] = {}
        if not clean.empty:
            row = cells[(cells["run_full"] == rid) & (cells["shift"] == CLEAN_SHIFT)].iloc[0]
            entry.update(
                clean=float(row["top1"]),
                clean_lo=float(row["top1_lo"]),
                clean_hi=float(row["top1_hi"]),
                clean_n=int(row["n"]),
            )
        if not shifted.empty:
            n, k = int(shifted["n"].sum()), int(shifted["n_correct"].sum())
            lo, hi = ratio_ci(
                images[str(rid)].shifted(), rng, n_resamples=n_resamples, confidence=confidence
            )
            entry.update(shifted=k / n, shifted_lo=lo, shifted_hi=hi, shifted_n=n)
        pooled[str(rid)] = entry
    return pooled


def _summary(
    store: Store, runs: list[RunView], counts: pd.DataFrame, images: dict[str, int], mce_rows: dict
) -> pd.DataFrame:
    """The per-run summary, with the function ``robustlab results --summary`` uses."""
    from robustlab.workflows.results import run_summaries

    rows = run_summaries(store, [r.record for r in runs], mce_rows, counts, images)
    return pd.DataFrame(
        [{**row, "run_full": r.run_id, "label": r.label} for r, row in zip(runs, rows)]
    )


def _scenes(
    store: Store, runs: list[RunView], counts: pd.DataFrame, notes: list[str]
) -> tuple[dict, dict, pd.DataFrame]:
    """Scenario accuracies (XIMAGENET-12 Table 1 / ImageNet-9), robustness score, BG-gap."""
    from robustlab.metrics.scenes import bg_gap, cell_scenario_accuracies, robustness_score
    from robustlab.metrics.summary import BG_GAP_CELLS

    # in shift then level order, as the scenario tables list them
    counts = counts.sort_values(["shift", "level"], kind="stable")
    scenarios, robustness, gaps, pairs = {}, {}, [], []
    for r in runs:
        if r.record.get("suite") == HOLDOUT_SUITE:  # its own table (surface variation)
            continue
        g = counts[counts["run_id"] == r.run_id]
        scen = [
            s
            for s in g["shift"].unique()
            if s != CLEAN_SHIFT and not is_corruption(s) and not is_edit(s, r.record.get("suite"))
        ]
        if not scen:
            continue
        try:
            mu, acc = cell_scenario_accuracies(g, scenarios=scen)
        except ValueError as exc:
            notes.append(f"{r.label}: no scenario table: {exc}")
            continue
        scenarios[r.run_id] = (mu, acc)
        # S_robust is XIMAGENET-12's score: only over that benchmark's scenarios.
        xim = {k: v for k, v in acc.items() if _is_ximagenet12(k.split(":")[0])}
        if xim:
            robustness[r.run_id] = robustness_score(mu, xim)
        if set(BG_GAP_CELLS) <= set(scen):
            pairs.append(r)
    rows = store.predictions(
        [r.run_id for r in pairs],
        columns=["run_id", "sample_id", "shift", "correct"],
        shifts=BG_GAP_CELLS,
    )
    for r in pairs:
        try:
            gaps.append(bg_gap(rows[rows["run_id"] == r.run_id], by=("run_id",)))
        except ValueError as exc:
            notes.append(f"{r.label}: no BG-gap: {exc}")
    if robustness:
        notes.append(
            "robustness score: only EX1 (train on original, test on each scenario) can "
            "be measured from stored predictions; sigma2_inner needs EX2 models trained "
            "on each scenario, so S_robust is shown as the partial score 1 - sigma2_cross"
        )
    bg = (
        pd.concat(gaps, ignore_index=True)
        if gaps
        else pd.DataFrame(columns=["run_id", "n", "acc_same", "acc_rand", "bg_gap"])
    )
    return scenarios, robustness, bg


def variant_columns(classes: pd.DataFrame) -> pd.Series:
    """The heat map's column of each per-class row: the shift, its levels pooled, except
    for a shift whose levels are named variants (random_bg's add and paste, a direction's
    ``random``), which the scenario tables show apart: ``"random_bg add"``."""
    levels = classes["level"].astype(str)
    named = {
        shift
        for shift, lv in levels.groupby(classes["shift"], sort=False)
        if shift != CLEAN_SHIFT
        and lv.nunique() > 1
        and pd.to_numeric(lv, errors="coerce").isna().any()
    }
    split = classes["shift"].isin(named)
    return classes["shift"].where(~split, classes["shift"].astype(str) + " " + levels)


def _class_drops(classes: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Per-class drop from clean, per heat-map column (:func:`variant_columns`: a shift's
    levels pooled, named variants apart), from the database's counts per run, cell and
    class."""
    from robustlab.metrics.accuracy import accuracy_drop, add_rates

    labelled = classes.dropna(subset=["label"]).assign(shift=variant_columns)
    if not (labelled["shift"] != CLEAN_SHIFT).any():
        return pd.DataFrame()
    pc = add_rates(
        labelled.groupby(["run_id", "shift", "label"], sort=True)[["n", "n_correct", "n_correct5"]]
        .sum()
        .reset_index()
    )
    have_clean = pc[pc["shift"] == CLEAN_SHIFT][["run_id", "label"]]
    pc = pc.merge(have_clean, on=["run_id", "label"])
    try:
        drops = accuracy_drop(pc, by=("run_id", "label"))
    except ValueError as exc:
        notes.append(f"no per-class drops: {exc}")
        return pd.DataFrame()
    return drops[drops["shift"] != CLEAN_SHIFT].reset_index(drop=True)


def _benchmark_tables(
    store: Store,
    runs_df: pd.DataFrame,
    runs: list[RunView],
    cells: pd.DataFrame,
    counts: pd.DataFrame,
    notes: list[str],
) -> dict[str, pd.DataFrame]:
    """ImageNet-E's per-level table and attribute fits, ImageNet-D's subsets, mining and
    review records, and the surface-variation runs: the ReportData fields of those names."""
    ids = [r.run_id for r in runs]
    joined = store.predictions_with_attributes(ids)
    effects = attribute_effects(joined)
    if not effects.empty:
        # fits with a note (perfect separation, too few rows...) stay out of the table
        for why, k in effects.loc[effects["note"] != "", "note"].value_counts().items():
            notes.append(f"edit effects: {k} attribute fit(s) left out of the table: {why}")
    edited = [
        r.run_id
        for r in runs
        if any(
            is_edit(s, r.record.get("suite")) for s in counts[counts["run_id"] == r.run_id]["shift"]
        )
    ]
    d_runs = [r.run_id for r in runs if r.record.get("label_space") == "imagenet-d"]
    return {
        "edits": edit_tables(cells, runs, store.clean_of_cells(edited) if edited else None),
        "imagenet_d": imagenet_d_subsets(store.clean_by_folder(d_runs), runs),
        "mining": mining_table(store),
        "reviews": review_table(store),
        "edit_curves": edit_curves(joined, {r.run_id: r.label for r in runs}),
        "edit_effects": effects,
        "surface": holdout_table(runs_df[runs_df["run_id"].isin(ids)], counts),
    }
