"""``robustlab results`` as a workflow: the stored runs' tables, or their Parquet export.

One frozen request, :class:`ResultsRequest`, says which runs and which view (per cell with
CE / mCE rows, segmentation scores, one summary row per run, two runs compared, or the
Parquet export); :func:`run_results` computes it into a :class:`ResultsResult` (the table
and the notes on what it leaves out, or the exported files). ``robustlab results`` builds
the request from its flags and only prints the result; :func:`results` (``robustlab.results``)
builds it from keywords. The tables are :mod:`.tables`' functions, which ``report`` uses too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from robustlab.errors import InputError
from robustlab.seeding import check_seed
from robustlab.store.connection import DEFAULT_DB
from robustlab.workflows.keywords import as_names
from robustlab.workflows.results.tables import (
    RESULT_COLUMNS,
    SEGMENTATION_RESULT_COLUMNS,
    compare_table,
    results_table,
    run_summaries,
    segmentation_table,
    summary_rows,
    summary_table,
)

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "RESULT_COLUMNS",
    "SEGMENTATION_RESULT_COLUMNS",
    "VIEWS",
    "ResultsRequest",
    "ResultsResult",
    "compare_table",
    "results",
    "results_table",
    "run_results",
    "run_summaries",
    "segmentation_table",
    "summary_rows",
    "summary_table",
]

# What a result holds: per-cell rows (with CE / mCE), segmentation scores, one row per
# run, two runs cell by cell, or the exported Parquet files.
VIEWS = ("cells", "segmentation", "summary", "compare", "export")


@dataclass(frozen=True)
class ResultsRequest:
    """Which stored runs, and what to compute from them (validated when built).

    Attributes:
        db: The results database (read only, except ``export``'s files).
        runs, models, suites: Only these run ids (or unique prefixes), model specs,
            suites (``--run``, ``--model``, ``--suite``; default: every run).
        baseline: CE baseline: ``"alexnet"`` or a model spec evaluated on the same images
            (default: AlexNet where it applies).
        segmentation: Segmentation runs' mIoU and pixel accuracy instead (shown anyway
            when the selected runs are all segmentation runs).
        summary: One row per run instead.
        compare: Two runs (ids or prefixes) cell by cell instead, with paired bootstrap
            intervals of ``bootstrap_seed`` and ``resamples``.
        export: Write ``runs.parquet`` and ``predictions.parquet`` into this folder
            instead of computing a table.
        force: Let ``export`` replace files of another kind (never an input).
    """

    db: str | Path = DEFAULT_DB
    runs: tuple[str, ...] | None = field(default=None, metadata={"arg": ("runs", as_names)})
    models: tuple[str, ...] | None = field(default=None, metadata={"arg": ("model", as_names)})
    suites: tuple[str, ...] | None = field(default=None, metadata={"arg": ("suite", as_names)})
    baseline: str | None = None
    segmentation: bool = False
    summary: bool = False
    compare: tuple[str, str] | None = None
    export: str | Path | None = None
    force: bool = False
    bootstrap_seed: int = 0
    resamples: int = 2000

    def __post_init__(self):
        for name in ("runs", "models", "suites"):
            object.__setattr__(self, name, as_names(getattr(self, name)))
        if self.compare is not None:
            pair = as_names(self.compare) or ()
            if len(pair) != 2:
                raise InputError(f"compare takes two run ids, got {len(pair)}")
            object.__setattr__(self, "compare", pair)
        check_seed(self.bootstrap_seed)
        if self.resamples < 1:
            raise InputError(f"--resamples must be at least 1, got {self.resamples}")

    @property
    def view(self) -> str:
        """The one of :data:`VIEWS` asked for (the first that applies, as the CLI reads
        its flags; ``cells`` turns into ``segmentation`` when only such runs match)."""
        if self.export is not None:
            return "export"
        if self.compare is not None:
            return "compare"
        if self.summary:
            return "summary"
        return "segmentation" if self.segmentation else "cells"


@dataclass
class ResultsResult:
    """What :func:`run_results` computed.

    Attributes:
        view: Which table (:data:`VIEWS`): ``cells`` has :data:`RESULT_COLUMNS`,
            ``segmentation`` :data:`SEGMENTATION_RESULT_COLUMNS`, ``summary``
            :data:`robustlab.metrics.summary.SUMMARY_COLUMNS`, ``compare``
            :data:`robustlab.metrics.compare.COMPARE_COLUMNS`; ``export`` has no table.
        table: The rows, with top1, error, CE and the rates as fractions in [0, 1].
        notes: What the table leaves out or cannot say, and why (the CLI's ``note:`` lines).
        paths: The files ``export`` wrote.
    """

    view: str
    table: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)


def results(db: str | Path = DEFAULT_DB, **options) -> ResultsResult:
    """The stored results of ``db``: what ``robustlab results`` prints, as a table.

    Args:
        db: The results database.
        **options: The fields of :class:`ResultsRequest` (``runs``, ``models``,
            ``suites``, ``baseline``, ``segmentation``, ``summary``, ``compare``,
            ``export``, ``force``, ``bootstrap_seed``, ``resamples``).

    Raises:
        TypeError: an unknown keyword (the message names the closest).
        InputError, StoreError: no such database, runs or baseline (one line, with a hint).

    Example:
        >>> robustlab.results("robustlab.duckdb", models=["lite0"]).table  # doctest: +SKIP
    """
    from robustlab.workflows.keywords import build_specs

    request = build_specs("results", {**options, "db": db}, {"request": ResultsRequest})
    return run_results(request["request"])


def run_results(request: ResultsRequest) -> ResultsResult:
    """Compute ``request``'s view from its database (what ``robustlab results`` calls)."""
    from robustlab.store import Store
    from robustlab.store.queries import select_runs

    store = Store(request.db)
    store.require()
    filters = {"run_ids": request.runs, "models": request.models, "suites": request.suites}
    view = request.view
    if request.export is not None:
        ids = None
        if request.runs or request.models or request.suites:
            ids = list(select_runs(store, **filters)["run_id"])
        paths = store.export_parquet(request.export, ids, force=request.force)
        return ResultsResult("export", paths=[Path(p) for p in paths])
    if view == "compare":
        assert request.compare is not None  # the view says so
        return ResultsResult(
            view,
            *compare_table(
                store, *request.compare, seed=request.bootstrap_seed, n_resamples=request.resamples
            ),
        )
    if view == "summary":
        return ResultsResult(view, *summary_table(store, baseline=request.baseline, **filters))
    notes: list[str] = []
    if view == "cells":
        table, notes = results_table(store, baseline=request.baseline, **filters)
        if len(table):
            return ResultsResult(view, table, notes)
    seg, seg_notes = segmentation_table(store, require=request.segmentation, **filters)
    if request.segmentation or len(seg):
        notes = [n for n in notes if "segmentation run(s)" not in n] + seg_notes
        return ResultsResult("segmentation", seg, notes)
    return ResultsResult(view, table, notes)
