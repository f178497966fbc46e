"""Everything the report shows, read from the results database and computed by the metrics
module (never by hand here).

The per-cell and CE / mCE numbers come from :func:`robustlab.store.queries.results_table`,
the same function ``robustlab results`` prints, so the two always agree. The rest
(bootstrap intervals, per-family and per-class accuracy, scenario accuracies, robustness
score, BG-gap, regression) are the functions of :mod:`robustlab.metrics` applied to the
stored predictions. A part that cannot be computed becomes a note saying why, never a
silently missing or wrong number.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustlab.errors import InputError
from robustlab.metrics.attributes import attribute_effects
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.workflows.train.holdout import SUITE as HOLDOUT_SUITE
from robustlab.workflows.train.holdout import holdout_table

log = logging.getLogger(__name__)

# The columns of predictions the report needs (top-5 lists are read only for the grid).
PRED_COLUMNS = [
    "run_id",
    "sample_id",
    "shift",
    "level",
    "label",
    "class_name",
    "correct",
    "correct5",
]
# The regression's Class factor is left out above this many classes (dense design matrix).
MAX_REGRESSION_CLASSES = 200
# The per-image logistic model is skipped above this many design-matrix entries (memory).
MAX_LOGIT_ENTRIES = 20_000_000


@dataclass
class RunView:
    """One selected run: its ``runs`` row and the name the report shows for it.

    Attributes:
        run_id: Full run id.
        label: The model spec (``spec +defence`` for a defended run), or ``spec [run8]``
            when the selection holds the same label more than once (two seeds, two suites).
        record: The ``runs`` row (JSON columns decoded).
    """

    run_id: str
    label: str
    record: dict[str, Any]

    @property
    def short(self) -> str:
        return self.run_id[:8]


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
            out, in-distribution and held-out top-1 (:func:`robustlab.workflows.train.holdout.holdout_table`).
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
    regression: Any = None
    logit: Any = None
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


def is_corruption(shift: str) -> bool:
    """The same test ``robustlab results`` uses to decide which shifts get CE rows."""
    from robustlab.store.queries import _is_corruption

    return shift != CLEAN_SHIFT and _is_corruption(shift)


def _is_ximagenet12(shift: str) -> bool:
    from robustlab.shifts.registry import get_shift

    try:
        return "ximagenet12" in get_shift(shift).tags
    except ValueError:
        return False


# Runs of the published archive (evaluate on ImageNet-E's own folders): every cell is an edit.
ARCHIVE_SUITE = "imagenet-e-archive"
# Measured attributes drawn as accuracy curves, with their axis names.
EDIT_ATTRIBUTES = {"object_rate": "object pixel rate", "hf_after": "mean |FFT| complexity"}
EDIT_BINS = 5


def is_edit(shift: str, suite: str | None = None) -> bool:
    """An ImageNet-E attribute edit: registered with tag ``imagenet-e``, or any cell of a
    run on the published archive."""
    if shift == CLEAN_SHIFT:
        return False
    if suite == ARCHIVE_SUITE:
        return True
    from robustlab.shifts.registry import get_shift

    try:
        return "imagenet-e" in get_shift(shift).tags
    except ValueError:
        return False


def edit_tables(
    cells: pd.DataFrame, runs: Sequence[RunView], preds: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Accuracy and drop from clean per edit level (ImageNet-E Table 1 shape).

    The drop is paired: with ``preds`` (prediction rows), ``clean_paired`` is the clean
    accuracy over exactly the images the level holds, so a level that skipped images (an
    object that could not move, a file missing from an archive folder) is compared with
    the clean accuracy of the same images, never of a different set. ``clean`` is the
    clean accuracy over all images; ``n_clean`` how many; ``drop`` = ``clean_paired`` -
    ``top1`` (= ``clean`` - ``top1`` when nothing was skipped).
    """
    rows = []
    for r in runs:
        suite = r.record.get("suite")
        c = cells[cells["run_full"] == r.run_id]
        clean = c[c["shift"] == CLEAN_SHIFT]
        base = float(clean["top1"].iloc[0]) if len(clean) else np.nan
        n_clean = int(clean["n"].iloc[0]) if len(clean) else 0
        clean_hits = per_level = None
        if preds is not None:
            g = preds[preds["run_id"] == r.run_id]
            clean_hits = g[g["shift"] == CLEAN_SHIFT].set_index("sample_id")["correct"]
            per_level = {
                key: set(x["sample_id"]) for key, x in g.groupby(["shift", "level"], sort=False)
            }
        for row in c.itertuples():
            if is_edit(row.shift, suite):
                paired = base
                if clean_hits is not None and per_level is not None:
                    ids = per_level.get((row.shift, str(row.level)), set())
                    hits = clean_hits[clean_hits.index.isin(ids)]
                    paired = float(hits.astype(float).mean()) if len(hits) else np.nan
                rows.append(
                    {
                        "run_full": r.run_id,
                        "label": r.label,
                        "shift": row.shift,
                        "level": str(row.level),
                        "n": int(row.n),
                        "top1": float(row.top1),
                        "top1_lo": getattr(row, "top1_lo", np.nan),
                        "top1_hi": getattr(row, "top1_hi", np.nan),
                        "clean": base,
                        "n_clean": n_clean,
                        "clean_paired": paired,
                        "drop": paired - float(row.top1),
                    }
                )
    return pd.DataFrame(
        rows,
        columns=[
            "run_full",
            "label",
            "shift",
            "level",
            "n",
            "top1",
            "top1_lo",
            "top1_hi",
            "clean",
            "n_clean",
            "clean_paired",
            "drop",
        ],
    )


def edit_curves(
    joined: pd.DataFrame, labels: dict[str, str], *, bins: int = EDIT_BINS
) -> pd.DataFrame:
    """Top-1 accuracy against each measured attribute, in quantile bins per run.

    Args:
        joined: ``Store.predictions_with_attributes`` rows.
        labels: run id -> label.
        bins: At most this many bins (fewer when values repeat).

    Returns:
        Rows run_full, label, attribute, x (mean attribute value in the bin), n, top1.
    """
    out = []
    for attr in EDIT_ATTRIBUTES:
        if attr not in joined.columns:
            continue
        for rid, g in joined.dropna(subset=[attr]).groupby("run_id", sort=False):
            if g[attr].nunique() < 2:
                continue
            q = pd.qcut(g[attr].astype(float), q=min(bins, g[attr].nunique()), duplicates="drop")
            for _, b in g.groupby(q, observed=True):
                out.append(
                    {
                        "run_full": rid,
                        "label": labels.get(rid, rid),
                        "attribute": attr,
                        "x": float(b[attr].astype(float).mean()),
                        "n": len(b),
                        "top1": float(b["correct"].astype(float).mean()),
                    }
                )
    return pd.DataFrame(out, columns=["run_full", "label", "attribute", "x", "n", "top1"])


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
    from robustlab.metrics.accuracy import per_family

    if rng is None:
        rng = np.random.default_rng(0)
    store = Store(db)
    store.require()
    runs_df, runs = _select(store, run_ids)
    notes: list[str] = []
    results, runs = _results(store, runs, baseline, notes)
    ids = [r.run_id for r in runs]

    preds = store.predictions(ids, columns=PRED_COLUMNS)
    preds["level"] = preds["level"].astype(str)

    # the generator's draws, in this order, are part of the report's reproducibility
    cells = _cells(results, preds, rng, n_resamples, confidence)
    ce, mce_rows = _ce_rows(results)

    # Pooled accuracy per family and level (plot), and per run (leaderboard).
    fam_map = {s: family(s) for s in preds["shift"].unique()}
    families = per_family(preds, by=("run_id", "level"), families=fam_map)
    pooled = _pooled(preds, cells, rng, n_resamples, confidence)
    scenarios, robustness, bg = _scenes(runs, preds, notes)
    class_drops = _class_drops(preds, notes)
    reg = logit = None
    if regression:
        reg, logit = _regression(preds, runs, notes)
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
        summary=_summary(runs, preds, mce_rows),
        notes=notes,
        **_benchmark_tables(store, runs_df, runs, cells, preds, notes),
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
    store: Store, runs: list[RunView], baseline: str | None, notes: list[str]
) -> tuple[pd.DataFrame, list[RunView]]:
    """``results_table`` rows of every run with predictions, and those runs.

    Exactly as ``robustlab results`` computes them, one run at a time so that a baseline
    missing for one run leaves the others' CE rows in place. A baseline that fits no run at
    all is the user's mistake (as in ``robustlab results``); one that fits only some runs
    (several data sets in one database) leaves a note.
    """
    from robustlab.store.queries import results_table

    parts, kept, failed = [], [], []
    for r in runs:
        try:
            part, run_notes = results_table(store, run_ids=[r.run_id], baseline=baseline)
        except ValueError as exc:
            if baseline is None:
                raise
            failed.append(exc)
            notes.append(f"{r.label}: no CE/mCE against baseline {baseline!r}: {exc}")
            part, run_notes = results_table(store, run_ids=[r.run_id], baseline=None)
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
    preds: pd.DataFrame,
    rng: np.random.Generator,
    n_resamples: int,
    confidence: float,
) -> pd.DataFrame:
    """The per-cell rows of ``results`` with bootstrap intervals and the shift's family."""
    from robustlab.metrics.bootstrap import cell_intervals

    cells = results[results["level"] != "all"].copy()
    ci = cell_intervals(
        preds, rng, by=("run_id", "shift", "level"), n_resamples=n_resamples, confidence=confidence
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
    preds: pd.DataFrame,
    cells: pd.DataFrame,
    rng: np.random.Generator,
    n_resamples: int,
    confidence: float,
) -> dict[str, dict[str, float]]:
    """Per run: clean top-1 and pooled shifted top-1 with their intervals (a per-image
    bootstrap: the images, not the predictions, are the independent units)."""
    from robustlab.metrics.accuracy import per_family
    from robustlab.metrics.bootstrap import bootstrap_ci

    pooled: dict[str, dict[str, float]] = {}
    for rid, g in preds.groupby("run_id", sort=False):
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
            pf = per_family(
                shifted, by=(), families=dict.fromkeys(shifted["shift"].unique(), "shifted")
            )
            per_image = shifted.groupby("sample_id")["correct"].agg(["sum", "size"]).to_numpy(float)
            lo, hi = bootstrap_ci(
                per_image,
                rng,
                n_resamples=n_resamples,
                confidence=confidence,
                statistic=lambda a: a[:, 0].sum() / a[:, 1].sum(),
            )
            entry.update(
                shifted=float(pf["top1"].iloc[0]),
                shifted_lo=lo,
                shifted_hi=hi,
                shifted_n=int(pf["n"].iloc[0]),
            )
        pooled[str(rid)] = entry
    return pooled


def _summary(runs: list[RunView], preds: pd.DataFrame, mce_rows: dict) -> pd.DataFrame:
    """The per-run summary, with the function ``robustlab results --summary`` uses."""
    from robustlab.metrics.summary import summarise_run

    return pd.DataFrame(
        [
            {
                **summarise_run(
                    r.record, preds[preds["run_id"] == r.run_id], mce_rows.get(r.run_id)
                ),
                "run_full": r.run_id,
                "label": r.label,
            }
            for r in runs
        ]
    )


def _scenes(
    runs: list[RunView], preds: pd.DataFrame, notes: list[str]
) -> tuple[dict, dict, pd.DataFrame]:
    """Scenario accuracies (XIMAGENET-12 Table 1 / ImageNet-9), robustness score, BG-gap."""
    from robustlab.metrics.scenes import bg_gap, robustness_score, scenario_accuracies

    scenarios, robustness, gaps = {}, {}, []
    for r in runs:
        if r.record.get("suite") == HOLDOUT_SUITE:  # its own table (surface variation)
            continue
        g = preds[preds["run_id"] == r.run_id]
        scen = [
            s
            for s in g["shift"].unique()
            if s != CLEAN_SHIFT and not is_corruption(s) and not is_edit(s, r.record.get("suite"))
        ]
        if not scen:
            continue
        try:
            mu, acc = scenario_accuracies(g, scenarios=scen)
        except ValueError as exc:
            notes.append(f"{r.label}: no scenario table: {exc}")
            continue
        scenarios[r.run_id] = (mu, acc)
        # S_robust is XIMAGENET-12's score: only over that benchmark's scenarios.
        xim = {k: v for k, v in acc.items() if _is_ximagenet12(k.split(":")[0])}
        if xim:
            robustness[r.run_id] = robustness_score(mu, xim)
        if {"mixed_same", "mixed_rand"} <= set(scen):
            try:
                gaps.append(bg_gap(g, by=("run_id",)))
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


def _class_drops(preds: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Per-class drop from clean, pooled over the levels of each shift."""
    from robustlab.metrics.accuracy import accuracy_drop, per_class

    labelled = preds.dropna(subset=["label"])
    if not (labelled["shift"] != CLEAN_SHIFT).any():
        return pd.DataFrame()
    pc = per_class(labelled, by=("run_id", "shift"), class_column="label")
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
    preds: pd.DataFrame,
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
    return {
        "edits": edit_tables(cells, runs, preds),
        "imagenet_d": imagenet_d_subsets(preds, runs),
        "mining": mining_table(store),
        "reviews": review_table(store),
        "edit_curves": edit_curves(joined, {r.run_id: r.label for r in runs}),
        "edit_effects": effects,
        "surface": holdout_table(runs_df[runs_df["run_id"].isin(ids)], preds),
    }


def imagenet_d_subsets(preds: pd.DataFrame, runs: list[RunView]) -> pd.DataFrame:
    """Top-1 accuracy per ImageNet-D subset (background, texture, material, and all) of
    each run on the ``imagenet-d`` label space, like the paper's main table.

    The subset is the first folder of the sample id (the published ``<subset>/<class>/<file>``
    layout, or ``robustlab synth``'s); other samples count under "all" only.
    """
    from robustlab.workflows.evaluate import IMAGENET_D_SUBSETS

    cols = ["run_full", "label", "subset", "n", "top1"]
    ids = [r.run_id for r in runs if r.record.get("label_space") == "imagenet-d"]
    clean = preds[preds["run_id"].isin(ids) & (preds["shift"] == CLEAN_SHIFT)]
    if clean.empty:
        return pd.DataFrame(columns=cols)
    subset = clean["sample_id"].astype(str).str.split("/", n=1).str[0]
    clean = clean.assign(subset=subset.where(subset.isin(IMAGENET_D_SUBSETS), None))
    labels = {r.run_id: r.label for r in runs}
    rows = []
    for rid, g in clean.groupby("run_id", sort=False):
        parts = [(name, g[g["subset"] == name]) for name in ("background", "texture", "material")]
        for name, part in [*parts, ("all", g)]:
            if len(part):
                rows.append(
                    {
                        "run_full": rid,
                        "label": labels.get(rid, rid),
                        "subset": name,
                        "n": int(len(part)),
                        "top1": float(part["correct"].mean()),
                    }
                )
    return pd.DataFrame(rows, columns=cols)


def mining_table(store: Store) -> pd.DataFrame:
    """One row per ``robustlab mine`` record: data, surrogates, k of n, candidates, kept."""
    from robustlab.store.mining import mining_runs

    df = mining_runs(store)
    cols = ["mining_id", "data_root", "surrogates", "rule", "n_candidates", "n_kept", "kept"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    return pd.DataFrame(
        {
            "mining_id": df["mining_id"].astype(str).str[:8],
            "data_root": df["data_root"],
            "surrogates": [", ".join(map(str, s or [])) for s in df["surrogates"]],
            "rule": [f"{k} of {n} wrong" for k, n in zip(df["k"], df["n"])],
            "n_candidates": df["n_candidates"],
            "n_kept": df["n_kept"],
            "kept": df["n_kept"] / df["n_candidates"].where(df["n_candidates"] > 0),
        },
        columns=cols,
    )


def review_table(store: Store, k: int = 2) -> pd.DataFrame:
    """Per review set: images decided, annotators, decisions by kind, images kept by the
    k-of-n agreement rule (over the decided images) and Fleiss' kappa over the images every
    annotator decided."""
    import numpy as np

    from robustlab.workflows.imagenet_d.review.agreement import CATEGORIES, fleiss_kappa, verdict
    from robustlab.store.reviews import ReviewStore

    cols = ["review_set", "images", "annotators", *CATEGORIES, "kept", "kappa"]
    if not store.exists():
        return pd.DataFrame(columns=cols)
    reviews = ReviewStore(store.path)
    try:
        sets = reviews.review_sets()
    except Exception:  # noqa: BLE001 - a database without review tables has no reviews
        return pd.DataFrame(columns=cols)
    rows = []
    for name in sets:
        current = reviews.current(name)
        if not current:
            continue
        by_image: dict[str, list] = {}
        for dec in current:
            by_image.setdefault(dec.image_id, []).append(dec)
        annotators = sorted({d.annotator for d in current})
        kept = sum(
            verdict(ds[0].label, [(d.decision, d.target) for d in ds], k).kept
            for ds in by_image.values()
        )
        full = [ds for ds in by_image.values() if len({d.annotator for d in ds}) == len(annotators)]
        counts = np.array([[sum(d.decision == c for d in ds) for c in CATEGORIES] for ds in full])
        kappa = fleiss_kappa(counts) if len(annotators) >= 2 and len(full) else None
        rows.append(
            {
                "review_set": name,
                "images": len(by_image),
                "annotators": len(annotators),
                **{c: sum(d.decision == c for d in current) for c in CATEGORIES},
                "kept": kept,
                "kappa": kappa,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def _distinct_runs(preds: pd.DataFrame, runs: list[RunView], notes: list[str]) -> list[str]:
    """Run ids with duplicates removed: the same model (spec, weights) on the same data
    (content fingerprint, label space, seed) over the same cells is one measurement, whether
    it ran on the fly or from a generated folder; counting it twice would double its cells
    and shrink every p-value."""
    cells = {
        rid: frozenset(zip(g["shift"], g["level"].astype(str)))
        for rid, g in preds.groupby("run_id")
    }
    seen: dict[tuple, str] = {}
    keep = []
    for r in runs:
        rec = r.record
        key = (
            rec.get("model_spec"),
            rec.get("weights_hash"),
            rec.get("data_fingerprint"),
            rec.get("label_space"),
            rec.get("seed"),
            cells.get(r.run_id),
        )
        if key in seen:
            notes.append(
                f"regression: run {r.short} repeats run {seen[key][:8]} (same model, "
                "data and cells) and is counted once"
            )
            continue
        seen[key] = r.run_id
        keep.append(r.run_id)
    return keep


def _readable_classes(preds: pd.DataFrame, runs: list[RunView]) -> pd.Series:
    """The Class factor's levels as the label space's readable names (``tench``, not
    ``n01440764``); a name two classes share keeps its key in brackets."""
    from robustlab.data.labels import get_label_space

    out = preds["class_name"].astype(object).copy()
    spaces = {r.run_id: r.record.get("label_space") for r in runs}
    for rid, g in preds.groupby("run_id"):
        try:
            space = get_label_space(spaces.get(rid) or "imagenet1k")
        except Exception:  # noqa: BLE001 - an unknown space keeps its raw keys
            continue
        names = np.asarray(space.classes, dtype=object)
        counts = pd.Series(names).value_counts()
        shared = set(counts[counts > 1].index)
        lab = pd.to_numeric(g["label"], errors="coerce")
        ok = (lab.notna() & (lab >= 0) & (lab < len(names))).to_numpy()
        picked = names[lab[ok].astype(int).to_numpy()]
        keys = g["class_name"].astype(str).to_numpy()[ok]
        out.loc[g.index[ok]] = [f"{n} ({k})" if n in shared else n for n, k in zip(picked, keys)]
    return out


def _regression(preds: pd.DataFrame, runs: list[RunView], notes: list[str]):
    """OLS of per-cell accuracy on Model, Shift and Class (XIMAGENET-12's analysis), and the
    per-image logistic model with standard errors clustered by image.

    Cells are (model, shift, class) with the shift's levels pooled; ``clean`` is the Shift
    reference and the first run the Model reference. Factors with one level are left out.
    Returns (OLS result or None, logistic result or None).
    """
    from robustlab.metrics.regression import cell_accuracy, logit_correctness, regress_accuracy

    if not (preds["shift"] != CLEAN_SHIFT).any():
        return None, None
    keep = _distinct_runs(preds, runs, notes)
    labels = {r.run_id: r.label for r in runs}
    data = preds[preds["run_id"].isin(keep)]
    data = data.assign(model=data["run_id"].map(labels), class_name=_readable_classes(data, runs))
    factors = {"Model": "model", "Shift": "shift", "Class": "class_name"}
    reference = {"Model": next(r.label for r in runs if r.run_id in keep), "Shift": CLEAN_SHIFT}
    n_classes = data["class_name"].nunique()
    if n_classes > MAX_REGRESSION_CLASSES:
        notes.append(
            f"regression: Class factor left out ({n_classes} classes; at most "
            f"{MAX_REGRESSION_CLASSES} are fitted as dummies)"
        )
        factors.pop("Class")
    for name in list(factors):
        if data[factors[name]].nunique() < 2:
            factors.pop(name)
            reference.pop(name, None)
    if "Shift" not in factors:
        return None, None
    cells = cell_accuracy(data, by=list(factors.values()))
    # The independent observations behind both fits: the report withholds p-values when
    # they are no more than the terms (robustlab.workflows.report.analysis.withheld_inference).
    n_images = int(data["sample_id"].nunique())
    ols = logit = None
    try:
        ols = regress_accuracy(cells, factors, reference=reference)
        ols.table.attrs["n_images"] = n_images
    except ValueError as exc:
        notes.append(f"no regression table: {exc}")
    terms = 1 + sum(data[c].nunique() - 1 for c in factors.values())
    if len(data) * terms > MAX_LOGIT_ENTRIES:
        notes.append(
            f"per-image logistic model left out: {len(data):,} predictions x {terms} "
            f"terms is over {MAX_LOGIT_ENTRIES:,} design entries (fit "
            "robustlab.metrics.regression.logit_correctness on a sample)"
        )
    else:
        try:
            logit = logit_correctness(data, factors, reference=reference)
        except ValueError as exc:
            notes.append(f"no per-image logistic model: {exc}")
        else:
            logit.table.attrs["n_images"] = n_images
            if logit.table.attrs.get("separated"):
                notes.append(separation_note(logit.table.attrs.get("constant_levels", [])))
    return ols, logit


def separation_note(levels: list[str]) -> str:
    """The report's note for a logistic fit with perfect separation (``levels``: the
    factor levels always right or always wrong)."""
    why = (
        f"{len(levels)} level(s) always right or always wrong: {', '.join(levels)}"
        if levels
        else "a combination of levels predicts correctness exactly"
    )
    return (
        f"per-image logistic model: perfect separation ({why}); its estimates and "
        "intervals are not meaningful"
    )
