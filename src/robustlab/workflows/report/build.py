"""Assemble the report: summary, paper-style tables, plots, image grid, all cells.

:func:`build_report` is what ``robustlab report`` calls, with a :class:`ReportRequest`. It
gathers the numbers (:mod:`robustlab.workflows.report.gather`), lets each section module
add its part to the page (:mod:`.overview`, :mod:`.benchmarks`, :mod:`.hard_images`,
:mod:`.analysis`, :mod:`.figures`, :mod:`.examples`, :mod:`.saliency`) and writes one
self-contained HTML file atomically (a reader never sees half a report).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np

from robustlab.errors import InputError, closest
from robustlab.workflows.report.benchmarks import MCE_NOTE
from robustlab.workflows.report.gather import ReportData, gather
from robustlab.workflows.report.html import notes_list, page
from robustlab.workflows.report.page import Page, ReportResult


@dataclass(frozen=True)
class ReportRequest:
    """Everything one report depends on, validated once (``robustlab report`` builds it
    from its flags; :func:`build_report` from keywords).

    Attributes:
        db: Results database.
        out: Output HTML path (parent folders are created).
        run_ids: Runs (ids or unique prefixes) to include; None: all.
        baseline: CE baseline, as for ``robustlab results --baseline``.
        grid: Include the example image grid (re-renders images from the data root).
        grid_sample: Sample id to show in the grid (default: chosen deterministically).
        seed: Seed of the bootstrap generator (the report is reproducible for a seed).
        n_resamples: Bootstrap resamples per interval.
        title: Page title (None: "robustlab report").
        progress: One stderr line as each stage starts (the CLI's default).
        force: Replace ``out`` even when it is not an HTML page (never the database).
        reference: Add the published numbers of the runs' benchmarks (package data).
        card: A card's record (``robustlab card``): its section goes first.
    """

    db: str | Path
    out: str | Path
    run_ids: tuple[str, ...] | None = None
    baseline: str | None = None
    grid: bool = True
    grid_sample: str | None = None
    seed: int = 0
    n_resamples: int = 1000
    title: str | None = None
    progress: bool = False
    force: bool = False
    reference: bool = False
    card: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.run_ids is not None:
            ids = (self.run_ids,) if isinstance(self.run_ids, str) else self.run_ids
            object.__setattr__(self, "run_ids", tuple(str(r) for r in ids))
        if int(self.n_resamples) < 1:
            raise InputError(f"n_resamples must be at least 1, not {self.n_resamples}")
        from robustlab.seeding import check_seed

        check_seed(self.seed)  # the bootstrap's seed follows the one seed rule too


OPTIONS = tuple(f.name for f in dataclasses.fields(ReportRequest))[2:]


def report_request(db: str | Path, out: str | Path, **options: Any) -> ReportRequest:
    """The request for ``build_report(db, out, **options)``: each keyword goes to the field
    of its name; a misspelt one is a TypeError naming the closest option (a Python caller's
    mistake, as for any function)."""
    for name in options:
        if name not in OPTIONS:
            near = closest(name, OPTIONS)
            hint = f"; did you mean {' or '.join(near)}?" if near else ""
            raise TypeError(f"build_report() got an unexpected keyword argument {name!r}{hint}")
    return ReportRequest(db, out, **options)


def build_report(
    request: ReportRequest | str | Path, out: str | Path | None = None, **options: Any
) -> ReportResult:
    """Write the HTML report described by ``request``.

    ``build_report(db, out, run_ids=..., baseline=..., ...)`` also works: the keywords are
    :class:`ReportRequest`'s fields.

    Raises:
        InputError: missing database, no matching runs, a bad output path.
        TypeError: an unknown keyword, or keywords next to a request.
    """
    if isinstance(request, ReportRequest):
        if out is not None or options:
            raise TypeError("build_report() takes a ReportRequest alone, or (db, out, **options)")
        req = request
    else:
        if out is None:
            raise TypeError("build_report() missing the output path: build_report(db, out, ...)")
        req = report_request(request, out, **options)
    return _build(req)


def _build(req: ReportRequest) -> ReportResult:
    from robustlab.files.safety import check_outputs, check_replaceable, write_output
    from robustlab.execution.progress import StageLines

    out = Path(req.out)
    if out.exists() and out.is_dir():
        raise InputError(f"--out {out} is a folder; give a file name such as report.html")
    check_outputs({"--db": req.db}, {"--out": out})
    check_replaceable(out, kind="html", flag="--out", force=req.force)
    stages = StageLines("report", 5, enabled=req.progress)
    rng = np.random.default_rng(int(req.seed))
    run_ids = list(req.run_ids) if req.run_ids is not None else None
    d = gather(req.db, run_ids=run_ids, baseline=req.baseline, rng=rng, n_resamples=req.n_resamples)
    # after the reading, so a bad --db or --run prints its one error line and nothing else
    stages.stage(f"read {len(d.runs)} run(s) and their bootstrap intervals")
    notes = list(d.notes)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    from robustlab.workflows.report.headline import random_weight_runs

    p = Page(random_weight_runs(d.runs), d.labels)
    _tables(p, d, req, generated, rng, notes)
    n_grids = _pictures(p, d, req, stages, notes)
    stages.stage("tables and page")
    from robustlab.workflows.report.overview import cells_table

    cells_table(p, d)
    # said once, where the missing mCE would be (the corruption tables)
    notes = [n for n in notes if MCE_NOTE not in n or "corruption-errors" not in p.tables]
    if notes:
        p.section("notes", "Notes", "What is missing or partial, and why.")
        p.add(notes_list(list(dict.fromkeys(notes))))
    document = _document(p, d, req.title or "robustlab report", generated)
    write_output(out, document, kind="html", flag="--out", force=req.force)
    stages.done()
    return ReportResult(out, p.tables, p.figures, n_grids, list(dict.fromkeys(notes)))


def _tables(
    p: Page, d: ReportData, req: ReportRequest, generated: str, rng, notes: list[str]
) -> None:
    """The summary and every benchmark's tables, in the page's order."""
    from robustlab.store import Store
    from robustlab.workflows.report import benchmarks, overview
    from robustlab.workflows.report.hard_images import mining_and_review
    from robustlab.workflows.report.saliency import add_section as saliency

    if req.card is not None:
        from robustlab.workflows.report.card import card_section

        card_section(p, req.card)
    overview.summary(p, d, generated)
    if len(d.runs) > 1:
        overview.leaderboard(p, d)
    benchmarks.corruption_tables(p, d)
    benchmarks.scenario_tables(p, d)
    benchmarks.edit_tables(p, d)
    benchmarks.imagenet_d(p, d)
    benchmarks.surface_variation(p, d)
    run_ids = list(req.run_ids) if req.run_ids is not None else None
    models = list(dict.fromkeys(str(r.record.get("model_spec")) for r in d.runs))
    saliency(p, Store(req.db), run_ids, rng, req.n_resamples, notes, models)
    mining_and_review(p, d, req.seed)
    if req.reference and req.card is None:
        from robustlab.workflows.report.card import reference_table
        from robustlab.workflows.report.headline import benchmark_key

        p.section(
            "published",
            "Published numbers",
            "The papers' and official repositories' numbers for the benchmarks of these runs, "
            "each with its source and what it was measured on.",
        )
        reference_table(p, list(dict.fromkeys(benchmark_key(r.record) for r in d.runs)))


def _pictures(p: Page, d: ReportData, req: ReportRequest, stages, notes: list[str]) -> int:
    """The regression analysis, the plots and the example grids; returns the grid count."""
    import tempfile

    from robustlab.workflows.report.analysis import regression
    from robustlab.workflows.report.examples import grids_section
    from robustlab.workflows.report.figures import plots_section

    stages.stage("regression models")
    with tempfile.TemporaryDirectory(prefix="robustlab-report-") as tmp:
        regression(p, d, Path(tmp))
    stages.stage("plots")
    plots_section(p, d, notes)
    stages.stage("example images")
    if req.grid:
        return grids_section(p, d, req.grid_sample, notes)
    notes.append("image grid left out (--no-grid)")
    return 0


def _document(p: Page, d: ReportData, title: str, generated: str) -> str:
    """The whole HTML page: title, contents and the sections."""
    from robustlab.workflows.report.render import render

    head = render(
        "header.html", title=title, n_runs=len(d.runs), db=d.db, generated=generated, toc=p.toc
    )
    return page(title, head + p.body())


__all__ = ["ReportRequest", "ReportResult", "build_report", "report_request"]
