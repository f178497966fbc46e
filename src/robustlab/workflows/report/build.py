"""Assemble the report: summary, paper-style tables, plots, image grid, all cells.

:func:`build_report` is what ``robustlab report`` calls. It gathers the numbers
(:mod:`robustlab.workflows.report.gather`), draws the plots (:mod:`robustlab.workflows.report.plots`),
renders the grid (:mod:`robustlab.workflows.report.grid`) and writes one self-contained HTML file
atomically (a reader never sees half a report).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from robustlab.errors import InputError
from robustlab.metrics.regression import significance_stars
from robustlab.workflows.report import plots
from robustlab.workflows.report.gather import (
    EDIT_ATTRIBUTES,
    ReportData,
    family,
    gather,
    is_corruption,
    run_namer,
)
from robustlab.workflows.report.html import (
    CORRECT_MARK,
    WRONG_MARK,
    Column,
    Table,
    data_uri,
    esc,
    figure,
    integer,
    is_missing,
    notes_list,
    num,
    page,
    pct,
    render_table,
)
from robustlab.store import CLEAN_SHIFT

log = logging.getLogger(__name__)

# Marks gather's note on why a run has no CE/mCE (shown once, under the corruption tables).
MCE_NOTE = "CE/mCE"


@dataclass
class ReportResult:
    """What was written.

    Attributes:
        path: The HTML file.
        tables: Ids of the tables in the page.
        figures: Ids of the plot figures in the page.
        grids: Number of image grids.
        notes: Everything left out or partial, with the reason.
    """

    path: Path
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    grids: int = 0
    notes: list[str] = field(default_factory=list)


class _Page:
    """Collects sections and remembers which tables and figures went in."""

    def __init__(self):
        self.parts: list[str] = []
        self.toc: list[tuple[str, str]] = []
        self.tables: list[str] = []
        self.figures: list[str] = []

    def section(self, sid: str, title: str, intro: str = "") -> None:
        # "sec-": a section and its table often share a name (cells, leaderboard, ...),
        # and an id must be unique in the page
        self.toc.append((f"sec-{sid}", title))
        self.parts.append(f'<h2 id="sec-{esc(sid)}">{esc(title)}</h2>')
        if intro:
            self.parts.append(f'<p class="note">{esc(intro)}</p>')

    def add(self, html_text: str) -> None:
        self.parts.append(html_text)

    def table(self, t: Table) -> None:
        self.tables.append(t.id)
        self.parts.append(render_table(t))

    def figure(self, fig_id: str, png: bytes, caption: str, alt: str) -> None:
        self.figures.append(fig_id)
        self.parts.append(figure(fig_id, png, caption, alt))


# ---------------------------------------------------------------------------- sections
def _summary(p: _Page, d: ReportData, generated: str) -> None:
    from robustlab import __version__

    runs = d.runs
    models = list(dict.fromkeys(r.record["model_spec"] for r in runs))
    suites = list(
        dict.fromkeys(
            f"{r.record['suite'] or 'clean only'}"
            + (f" v{r.record['suite_version']}" if r.record.get("suite_version") else "")
            for r in runs
        )
    )
    roots = list(dict.fromkeys(str(r.record["data_root"]) for r in runs))
    seeds = list(dict.fromkeys(int(r.record["seed"] or 0) for r in runs))
    p.section("summary", "Summary")
    items = [
        ("Models", ", ".join(models)),
        ("Suites", ", ".join(suites)),
        ("Data", "; ".join(roots)),
        ("Seeds", ", ".join(map(str, seeds))),
        ("Runs", str(len(runs))),
        ("Database", str(d.db)),
        ("CE baseline", d.baseline or "AlexNet constants when valid (full ImageNet val)"),
        (
            "Intervals",
            f"{100 * d.confidence:.0f} % percentile bootstrap, {d.n_resamples} resamples",
        ),
        ("Generated", f"{generated} by robustlab {__version__}"),
    ]
    p.add(
        '<dl class="kv">'
        + "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
        + "</dl>"
    )
    _run_summary(p, d)
    rows = []
    for r in runs:
        rec = r.record
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "model": rec["model_spec"],
                "weights": (rec.get("weights_hash") or "")[:12],
                "suite": rec["suite"] or "clean only",
                "suite_version": rec.get("suite_version"),
                "protocol": run_protocol(rec),
                "data": rec["data_root"],
                "fingerprint": (rec.get("data_fingerprint") or "")[:12],
                "label_space": rec.get("label_space"),
                "seed": rec.get("seed"),
                "n_samples": rec.get("n_samples"),
                "n_skipped": rec.get("n_skipped"),
                "status": rec.get("status"),
                "started": str(rec.get("started_at") or "")[:19],
                "finished": str(rec.get("finished_at") or "")[:19]
                if not pd.isna(rec.get("finished_at"))
                else "",
            }
        )
    p.table(
        Table(
            "runs",
            [
                Column("label", "Model"),
                Column("run", "Run"),
                Column("weights", "Weights hash"),
                Column("suite", "Suite"),
                Column("suite_version", "Version"),
                Column(
                    "protocol",
                    "Protocol",
                    tip="how the model saw the images: the benchmark's official protocol "
                    "unless marked (override)",
                ),
                Column("data", "Data root"),
                Column("fingerprint", "Data fingerprint"),
                Column("label_space", "Label space"),
                Column("seed", "Seed", integer, True),
                Column("n_samples", "Images", integer, True),
                Column("n_skipped", "Skipped", integer, True),
                Column("status", "Status"),
                Column("started", "Started (UTC)"),
                Column("finished", "Finished (UTC)"),
            ],
            rows,
            caption="Runs in this report (library versions, preprocessing and configuration "
            "of each run: below the table)",
        )
    )
    for r in runs:
        rec = r.record
        detail = {
            "preprocessing": rec.get("preprocessing"),
            "versions": rec.get("versions"),
            "config": {k: v for k, v in (rec.get("config") or {}).items() if k != "cells"},
        }
        skipped = rec.get("skipped") or []
        body = esc(json.dumps(detail, indent=1, sort_keys=True, default=str))
        extra = ""
        if skipped:
            shown = "".join(
                f"<li>{esc(s[0] if isinstance(s, list) else s)}: "
                f"{esc(s[1] if isinstance(s, list) and len(s) > 1 else '')}</li>"
                for s in skipped[:20]
            )
            more = f"<li>... and {len(skipped) - 20} more</li>" if len(skipped) > 20 else ""
            extra = f"<p>Skipped inputs:</p><ul>{shown}{more}</ul>"
        p.add(
            f"<details><summary>{esc(r.label)} (run {esc(r.short)}): preprocessing, "
            f"versions, configuration</summary>{extra}<pre>{body}</pre></details>"
        )


def run_protocol(rec: dict) -> str:
    """The protocol a run used, one line (``(override)`` when the user chose it); runs
    stored before protocols had names are labelled from their preprocessing record."""
    from robustlab.suites import protocol_label

    cfg = rec.get("config") or {}
    p = cfg.get("protocol") if isinstance(cfg, dict) else None
    if isinstance(p, dict) and p.get("label"):
        return str(p["label"]) + (" (override)" if p.get("override") else "")
    pre = rec.get("preprocessing") or {}
    return protocol_label(pre.get("protocol") if isinstance(pre, dict) else None)


def _run_summary(p: _Page, d: ReportData) -> None:
    """The first table: ``robustlab results --summary``, one row per run."""
    rows = d.summary.to_dict("records")
    has = {
        k: any(not is_missing(r.get(k)) for r in rows)
        for k in ("mce", "s_robust", "s_partial", "bg_gap")
    }
    cols = [
        Column("label", "Model"),
        Column("suite", "Suite"),
        Column("run_id", "Run"),
        Column("data", "Data"),
        Column("images", "Images", integer, True),
        Column("clean_top1", "Clean top-1 %", pct, True),
        Column("shifted_top1", "Shifted top-1 %", pct, True, tip=SHIFTED_TOP1),
    ]
    if has["mce"]:
        cols += [
            Column("mce", "mCE %", pct, True),
            Column("relative_mce", "Rel. mCE %", pct, True),
            Column("baseline", "CE baseline"),
        ]
    if has["s_robust"]:
        cols.append(Column("s_robust", "S_robust", num, True))
    if has["s_partial"]:
        cols.append(
            Column(
                "s_partial",
                "S partial (EX1)",
                num,
                True,
                tip="1 - sigma2_cross: EX2 needs models trained on each scenario",
            )
        )
    if has["bg_gap"]:
        cols.append(Column("bg_gap", "BG-gap %", pct, True))
    cols += [
        Column(
            "path",
            "Path",
            tip="on-the-fly (torch:cuda/cpu: batched torch shifts), or read from a "
            "generated folder",
        ),
        Column("precision", "Precision"),
    ]
    if any(not is_missing(r.get("defence")) for r in rows):
        cols.append(
            Column(
                "defence",
                "Defence",
                tip="test-time defence the model ran behind (--preprocess, --tta)",
            )
        )
    p.table(
        Table(
            "run-summary",
            cols,
            rows,
            caption="One row per run (the same numbers as `robustlab results --summary`)",
            notes=[f"Shifted top-1 %: {SHIFTED_TOP1}."],
        )
    )


# The one definition of "Shifted top-1 %" wherever the report shows it (summary, leaderboard).
SHIFTED_TOP1 = (
    "the mean over the run's shifted cells (shift x level) of each cell's top-1, every "
    "cell weighing the same, as `robustlab results --summary` computes it"
)


def _leaderboard(p: _Page, d: ReportData) -> None:
    """Runs ranked against runs over exactly the same shifted cells, others listed apart.

    A mean over 20 cells is not comparable with one over 75 (other shifts, other levels),
    even within one suite, so only runs whose stored shifted (shift, level) cells are the
    same set are ranked together; a run that shares its cells with no other run is listed
    apart with its cell count.
    """
    summary = d.summary.set_index("run_full") if not d.summary.empty else pd.DataFrame()
    shifted = d.cells[d.cells["shift"] != CLEAN_SHIFT]
    cellsets = {
        rid: frozenset(zip(g["shift"].astype(str), g["level"].astype(str)))
        for rid, g in shifted.groupby("run_full")
    }
    groups: dict[frozenset, list[dict]] = {}
    for r in d.runs:
        one = summary.loc[r.run_id] if r.run_id in summary.index else {}
        m = d.mce.get(r.run_id, {})
        rs = d.robustness.get(r.run_id)
        gap = d.bg_gap[d.bg_gap["run_id"] == r.run_id]["bg_gap"] if not d.bg_gap.empty else []
        cells = cellsets.get(r.run_id, frozenset())
        groups.setdefault(cells, []).append(
            {
                "label": r.label,
                "run": r.short,
                "suite": r.record["suite"] or "clean only",
                "cells": len(cells),
                "n": one.get("images"),
                "clean": one.get("clean_top1"),
                "shifted": one.get("shifted_top1"),
                "mce": m.get("mce"),
                "rel_mce": m.get("relative_mce"),
                "s_partial": rs.s_partial if rs is not None else None,
                "bg_gap": float(gap.iloc[0]) if len(gap) else None,
            }
        )
    ranked = [g for cells, g in groups.items() if cells and len(g) > 1]
    alone = [x for cells, g in groups.items() if not (cells and len(g) > 1) for x in g]
    all_rows = [x for g in groups.values() for x in g]

    def columns(rank: bool) -> list[Column]:
        cols = [Column("label", "Model"), Column("run", "Run"), Column("suite", "Suite")]
        if rank:
            cols.append(Column("rank", "Rank", integer, True))
        cols += [
            Column("cells", "Shifted cells", integer, True),
            Column("n", "Images", integer, True),
            Column("clean", "Clean top-1 %", pct, True),
            Column("shifted", "Shifted top-1 %", pct, True, tip=SHIFTED_TOP1),
        ]
        if any(not is_missing(x["mce"]) for x in all_rows):
            cols += [Column("mce", "mCE %", pct, True), Column("rel_mce", "Rel. mCE %", pct, True)]
        if any(not is_missing(x["s_partial"]) for x in all_rows):
            cols.append(Column("s_partial", "S partial (EX1)", num, True))
        if any(not is_missing(x["bg_gap"]) for x in all_rows):
            cols.append(Column("bg_gap", "BG-gap %", pct, True))
        return cols

    p.section(
        "leaderboard",
        "Leaderboard",
        "Runs are ranked only against runs over exactly the same shifted cells (the same "
        f"shifts at the same levels), by shifted top-1: {SHIFTED_TOP1}. Click a header to sort.",
    )
    for i, rows in enumerate(sorted(ranked, key=lambda g: -len(g))):

        def score(x: dict) -> float:
            return -1.0 if is_missing(x["shifted"]) else float(x["shifted"])

        rows.sort(key=lambda x: -score(x))
        for x in rows:
            x["rank"] = 1 + sum(1 for y in rows if score(y) > score(x))
        suites = ", ".join(dict.fromkeys(x["suite"] for x in rows))
        p.table(
            Table(
                "leaderboard" if i == 0 else f"leaderboard-{i + 1}",
                columns(rank=True),
                rows,
                caption=f"Ranked: {len(rows)} runs over the same {rows[0]['cells']} shifted "
                f"cells ({suites})",
            )
        )
    if alone:
        p.table(
            Table(
                "leaderboard-unranked",
                columns(rank=False),
                alone,
                caption="Not ranked: no other run covers the same shifted cells, so a rank "
                "would compare different cells (the cell counts say how many each covers)",
            )
        )


def _corruption_tables(p: _Page, d: ReportData) -> None:
    ce_runs = [r for r in d.runs if r.run_id in d.mce]
    corr = list(dict.fromkeys(d.corruption_error["shift"]))
    if not corr:
        return
    fam = {s: family(s) for s in corr}
    p.section(
        "corruptions",
        "Corruptions (ImageNet-C)",
        "Like ImageNet-C Table 1: per corruption, the top-1 error averaged over the "
        "stored severities; CE divides the summed errors by the baseline's (lower is better).",
    )
    clean = d.cells[d.cells["shift"] == CLEAN_SHIFT].set_index("run_full")["error"]
    # 15 corruption columns are wide: the Run column goes when every label already names
    # its run ("lite0 [9b862906]", one model evaluated several times).
    who = [Column("label", "Model")]
    if not all(f"[{r.short}]" in r.label for r in d.runs):
        who.append(Column("run", "Run"))
    rows = []
    for r in d.runs:
        g = d.corruption_error[d.corruption_error["run_full"] == r.run_id].set_index("shift")[
            "mean_error"
        ]
        if g.empty:
            continue
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "clean": clean.get(r.run_id),
                **{f"e:{s}": g.get(s) for s in corr},
            }
        )
    cols = [
        *who,
        Column("clean", "Clean error %", pct, True),
    ]
    cols += [Column(f"e:{s}", s.replace("_", " "), pct, True, note=fam[s]) for s in corr]
    p.table(
        Table(
            "corruption-errors",
            cols,
            rows,
            caption="Top-1 error (%) per corruption, mean over the stored severities",
        )
    )
    if ce_runs:
        rows = []
        for r in ce_runs:
            g = d.ce[d.ce["run_full"] == r.run_id].set_index("shift")
            m = d.mce[r.run_id]
            rows.append(
                {
                    "label": r.label,
                    "run": r.short,
                    "baseline": m["baseline"],
                    "clean": clean.get(r.run_id),
                    "mce": m["mce"],
                    "rel": m["relative_mce"],
                    **{f"ce:{s}": g["ce"].get(s) for s in corr},
                    **{f"rce:{s}": g["relative_ce"].get(s) for s in corr},
                }
            )
        cols = [
            *who,
            Column("baseline", "Baseline"),
            Column("clean", "Clean error %", pct, True),
            Column("mce", "mCE %", pct, True, tip="mean CE over the corruptions"),
            Column("rel", "Rel. mCE %", pct, True, tip="mean relative CE"),
        ]
        cols += [
            Column(f"ce:{s}", s.replace("_", " "), pct, True, note=f"{fam[s]} CE") for s in corr
        ]
        p.table(
            Table(
                "ce-table",
                cols,
                rows,
                caption="Corruption Error (CE, %) and mCE against the baseline",
            )
        )
        cols = [
            *who,
            Column("rel", "Rel. mCE %", pct, True),
        ]
        cols += [
            Column(f"rce:{s}", s.replace("_", " "), pct, True, note=f"{fam[s]} rel. CE")
            for s in corr
        ]
        p.table(
            Table(
                "relative-ce-table",
                cols,
                rows,
                caption="Relative CE (%): degradation from clean, relative to the baseline's",
            )
        )
    missing = [
        r
        for r in d.runs
        if r.run_id not in d.mce
        and not d.corruption_error[d.corruption_error["run_full"] == r.run_id].empty
    ]
    if missing:
        # The reason is said here, once (the Notes section leaves it out: see MCE_NOTE).
        why = [n for n in d.notes if MCE_NOTE in n] or [
            "mCE needs a baseline measured on the same images: pass a model evaluated on "
            "these images with --baseline MODEL"
        ]
        p.add(
            f'<p class="note"><strong>No mCE for {esc(", ".join(r.label for r in missing))}'
            "</strong> (the table above shows the errors themselves):</p>" + notes_list(why)
        )


def _scenario_tables(p: _Page, d: ReportData) -> None:
    if not d.scenarios:
        return
    p.section(
        "scenarios",
        "Background scenarios",
        "Like XIMAGENET-12 Table 1: top-1 accuracy of the original-trained model on each "
        "scenario (EX1). One table per suite, so no row is half empty.",
    )
    by_suite: dict[str, list] = {}
    for r in d.runs:
        if r.run_id in d.scenarios:
            by_suite.setdefault(r.record.get("suite") or "clean", []).append(r)
    for suite, runs in by_suite.items():
        names = list(dict.fromkeys(k for r in runs for k in d.scenarios[r.run_id][1]))
        rows = []
        for r in runs:
            mu, acc = d.scenarios[r.run_id]
            rows.append(
                {
                    "label": r.label,
                    "run": r.short,
                    "mu": mu,
                    **{f"s:{k}": acc.get(k) for k in names},
                }
            )
        cols = [
            Column("label", "Model"),
            Column("run", "Run"),
            Column("mu", "Original %", pct, True),
        ]
        cols += [Column(f"s:{k}", k.replace("_", " "), pct, True) for k in names]
        p.table(
            Table(
                f"scenarios-{_slug(suite)}",
                cols,
                rows,
                caption=f"{suite}: scenario top-1 accuracy (%)",
            )
        )
    rows = []
    for r in d.runs:
        rs = d.robustness.get(r.run_id)
        if rs is None:
            continue
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "mu": rs.mu,
                "s2c": rs.sigma2_cross,
                "s2i": rs.sigma2_inner,
                "partial": rs.s_partial,
                "full": rs.s_robust,
                "n": len(rs.scenarios),
            }
        )
    if rows:
        p.table(
            Table(
                "robustness",
                [
                    Column("label", "Model"),
                    Column("run", "Run"),
                    Column("mu", "mu %", pct, True),
                    Column("n", "Scenarios", integer, True),
                    Column("s2c", "sigma2 cross", num, True),
                    Column("s2i", "sigma2 inner", num, True),
                    Column("partial", "S partial", num, True, tip="1 - sigma2_cross (EX1 only)"),
                    Column("full", "S_robust", num, True, tip="needs EX2 (inner) accuracies too"),
                ],
                rows,
                caption="XIMAGENET-12 robustness score S_robust = 1 - (sigma2_cross + sigma2_inner)",
            )
        )
    if not d.bg_gap.empty:
        labels = d.labels
        rows = [
            {
                "label": labels.get(g.run_id, g.run_id),
                "n": g.n,
                "same": g.acc_same,
                "rand": g.acc_rand,
                "gap": g.bg_gap,
            }
            for g in d.bg_gap.itertuples()
        ]
        p.table(
            Table(
                "bg-gap",
                [
                    Column("label", "Model"),
                    Column("n", "Paired images", integer, True),
                    Column("same", "mixed_same %", pct, True),
                    Column("rand", "mixed_rand %", pct, True),
                    Column("gap", "BG-gap %", pct, True),
                ],
                rows,
                caption="ImageNet-9 BG-gap = acc(mixed_same) - acc(mixed_rand), paired images",
            )
        )


def _surface_variation(p: _Page, d: ReportData) -> None:
    """ICONS-50's protocols (``robustlab holdout``): held-out style, subtypes, versions."""
    t = d.surface
    if t.empty:
        return
    p.section(
        "surface-variation",
        "Surface variation (hold-out protocols)",
        "A network trained from scratch with a style, some subtypes or one version of "
        "each icon held out (ImageNet-C paper, ICONS-50). In-distribution: a seeded share "
        "of the training pool kept aside; held-out: what was held out, scored on the "
        "broad class. The paper's shape: versions stay high, a held-out style drops.",
    )
    labels = d.labels
    rows = [
        {
            "label": labels.get(r.run_id, r.model),
            "run": r.run_id[:8],
            "protocol": r.protocol,
            "held": r.held_out,
            "seed": r.seed,
            "n_train": r.n_train,
            "n_seen": r.n_seen,
            "seen": r.seen_top1,
            "n_held": r.n_held,
            "heldacc": r.held_top1,
            "gap": r.seen_top1 - r.held_top1,
        }
        for r in t.itertuples()
    ]
    p.table(
        Table(
            "surface-variation",
            [
                Column("label", "Model"),
                Column("run", "Run"),
                Column("protocol", "Protocol"),
                Column("held", "Held out"),
                Column("seed", "Seed", integer, True),
                Column("n_train", "Train images", integer, True),
                Column("n_seen", "In-dist. n", integer, True),
                Column("seen", "In-dist. %", pct, True),
                Column("n_held", "Held-out n", integer, True),
                Column("heldacc", "Held-out %", pct, True),
                Column("gap", "Drop %", pct, True, tip="in-distribution minus held-out top-1"),
            ],
            rows,
            caption="Top-1 accuracy (%) under each hold-out protocol",
        )
    )


def _slug(text: str) -> str:
    """A table id fragment: letters, digits and dashes only."""
    import re

    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _imagenet_d(p: _Page, d: ReportData) -> None:
    """ImageNet-D: top-1 per subset for every run on its label space (the paper's table)."""
    t = d.imagenet_d
    if t.empty:
        return
    p.section(
        "imagenet-d",
        "ImageNet-D subsets",
        "Top-1 accuracy (%) per subset for runs on the imagenet-d label space; a "
        "prediction is right when its top-1 ImageNet class is one of the class's ids.",
    )
    order = [s for s in ("background", "texture", "material", "all") if s in set(t["subset"])]
    rows = []
    for r in d.runs:
        g = t[t["run_full"] == r.run_id]
        if g.empty:
            continue
        row = {"label": r.label, "run": r.short}
        for e in g.itertuples():
            row[e.subset] = e.top1
            row[f"n:{e.subset}"] = e.n
        rows.append(row)
    cols = [Column("label", "Model"), Column("run", "Run")]
    cols += [Column(s, f"{s} %", pct, True) for s in order]
    cols += [Column(f"n:{s}", f"n {s}", integer, True) for s in order]
    p.table(Table("imagenet-d-subsets", cols, rows, caption="Top-1 accuracy per ImageNet-D subset"))


def _mining_analysis(p: _Page, d: ReportData, seed: int) -> None:
    """Per mining: the surrogate curve, transfer to held-out models, hard examples."""
    from robustlab.workflows.report.mining import curve_plot, mining_views, thumbnail

    for v in mining_views(d, seed=seed):
        i = v.mining_id
        p.add(f"<h3>Mining {esc(v.mining_id)}: {esc(', '.join(v.surrogates))}</h3>")
        p.figure(
            f"fig-mining-curve-{i}",
            curve_plot(v),
            "ImageNet-D's first claim: with more surrogates that must all be wrong, fewer "
            "candidates are kept, and the kept ones are harder for models that were not "
            "used to mine them (each point averages every subset of that many surrogates).",
            "line plots of the kept fraction and held-out accuracy against the number of "
            "surrogates",
        )
        if v.transfer:
            p.table(
                Table(
                    f"mining-transfer-{i}",
                    [
                        Column("heldout", "Held-out model"),
                        Column("n_mined", "Kept", integer, True),
                        Column("mined_acc", "Top-1 on kept %", pct, True),
                        Column("random_mean", "Random same-size %", pct, True),
                        Column("random_lo", "2.5 %", pct, True),
                        Column("random_hi", "97.5 %", pct, True),
                        Column("p_value", "p (one-sided)", num, True),
                    ],
                    v.transfer,
                    caption="Transfer (the second claim): a held-out model's top-1 on "
                    "the mined set against random subsets of the same candidates and size; p is "
                    "the share of random subsets at or below the mined accuracy",
                )
            )
        elif len(v.curve.columns) == 4:
            v.notes.append(
                "no held-out model: evaluate another model on the same candidates "
                "(robustlab evaluate ... --data <the candidates>) to measure transfer"
            )
        if v.examples:
            cells = []
            for ex in v.examples:
                thumb = thumbnail(ex["path"])
                img = (
                    f'<img src="{data_uri(*thumb)}" alt="hard image {esc(ex["sample_id"])} '
                    f'{esc(ex["cell"])}">'
                    if thumb
                    else f'<p class="note">not readable: {esc(ex["path"])}</p>'
                )
                guesses = "".join(
                    f'<span class="pred bad"><span class="mark" aria-label="wrong">'
                    f"{WRONG_MARK}</span>{esc(s)}: {esc(g)}</span>"
                    for s, g in ex["guesses"]
                )
                cells.append(
                    f'<figure class="thumb">{img}<figcaption><strong>'
                    f"{esc(ex['class_name'])}</strong> {esc(ex['cell'])}{guesses}"
                    "</figcaption></figure>"
                )
            p.add(
                f'<div class="hard-examples" id="mining-examples-{i}">' + "".join(cells) + "</div>"
            )
        if v.notes:
            p.add(notes_list(v.notes))


def _mining_and_review(p: _Page, d: ReportData, seed: int = 0) -> None:
    """ImageNet-D's workflow: what mining kept and what people decided."""
    if d.mining.empty and d.reviews.empty:
        return
    p.section(
        "hard-images",
        "Hard-image mining and human verification",
        "Mining keeps the candidates that k of n surrogate models get wrong; review "
        "decisions are each annotator's current one; an image is kept when at least 2 "
        "annotators accept it (or relabel it to the same class); Fleiss' kappa is over "
        "the images every annotator decided.",
    )
    if not d.mining.empty:
        p.table(
            Table(
                "mining",
                [
                    Column("mining_id", "Mining"),
                    Column("data_root", "Candidates from"),
                    Column("surrogates", "Surrogates"),
                    Column("rule", "Rule"),
                    Column("n_candidates", "Candidates", integer, True),
                    Column("n_kept", "Kept", integer, True),
                    Column("kept", "Kept %", pct, True),
                ],
                d.mining.to_dict("records"),
                caption="robustlab mine records",
            )
        )
        _mining_analysis(p, d, seed)
    if not d.reviews.empty:
        cols = [
            Column("review_set", "Review set"),
            Column("images", "Images decided", integer, True),
            Column("annotators", "Annotators", integer, True),
        ]
        cols += [
            Column(c, c.replace("_", " "), integer, True)
            for c in ("accept", "reject", "not_single", "relabel")
        ]
        cols += [
            Column("kept", "Kept (2 of n)", integer, True),
            Column("kappa", "Fleiss' kappa", num, True),
        ]
        p.table(
            Table(
                "reviews", cols, d.reviews.to_dict("records"), caption="robustlab review decisions"
            )
        )


def _edit_tables(p: _Page, d: ReportData) -> None:
    """ImageNet-E: accuracy and drop per attribute level, and accuracy vs the measured value."""
    if d.edits.empty:
        return
    p.section(
        "attribute-edits",
        "Attribute edits (ImageNet-E)",
        "Like ImageNet-E Table 1: top-1 accuracy on each edited attribute level and its "
        "drop from the clean accuracy of the same run (points; higher drop = more "
        "sensitive to that attribute). The drop is paired: clean accuracy over the same "
        "images as the level, so a level that skipped images is not compared with a "
        "different image set. Every image (clean and edited, the published archive and "
        "robustlab's own folders alike) is seen through ImageNet-E's rule unless the run "
        "says otherwise in its protocol column: shorter side 256, centre crop 224, then "
        "the model's resize.",
    )
    unpaired = d.edits[d.edits["n"] < d.edits["n_clean"]]
    if not unpaired.empty:
        p.add(
            '<p class="note">'
            + esc(
                "Levels with fewer images than clean (drop over their own images): "
                + "; ".join(
                    f"{e.label} {e.shift} {e.level}: {e.n} of {e.n_clean} "
                    f"(clean on all {100 * e.clean:.1f}%, on these {100 * e.clean_paired:.1f}%)"
                    for e in unpaired.itertuples()
                )
            )
            + "</p>"
        )
    keys = list(dict.fromkeys(zip(d.edits["shift"], d.edits["level"])))
    rows = []
    for r in d.runs:
        g = d.edits[d.edits["run_full"] == r.run_id]
        if g.empty:
            continue
        row = {"label": r.label, "run": r.short, "clean": float(g["clean"].iloc[0])}
        for e in g.itertuples():
            row[f"a:{e.shift}:{e.level}"] = e.top1
            row[f"d:{e.shift}:{e.level}"] = e.drop
        rows.append(row)
    cols = [Column("label", "Model"), Column("run", "Run"), Column("clean", "Clean %", pct, True)]
    cols += [Column(f"a:{s}:{lv}", f"{s.replace('_', ' ')} {lv}", pct, True) for s, lv in keys]
    p.table(Table("edit-accuracy", cols, rows, caption="Top-1 accuracy (%) per attribute level"))
    cols = [Column("label", "Model"), Column("run", "Run")]
    cols += [Column(f"d:{s}:{lv}", f"{s.replace('_', ' ')} {lv}", pct, True) for s, lv in keys]
    p.table(
        Table(
            "edit-drop",
            cols,
            rows,
            caption="Drop from clean top-1 (percentage points) per attribute level",
        )
    )
    if not d.edit_curves.empty:
        p.figure(
            "fig-edit-attributes",
            plots.attribute_curves(d.edit_curves, d.labels, EDIT_ATTRIBUTES),
            "Top-1 accuracy of edited images against what the edit achieved (object pixel "
            "rate; mean |FFT| complexity of the edited image), pooled over the edits, "
            "in quantile bins.",
            "line plots of accuracy against measured object rate and image complexity",
        )
    fits = d.edit_effects[d.edit_effects["note"] == ""] if not d.edit_effects.empty else None
    if fits is not None and not fits.empty:
        labels = {r.run_id: (r.label, r.short) for r in d.runs}
        rows = [
            {
                "label": labels.get(f.run_id, (f.run_id, f.run_id))[0],
                "run": labels.get(f.run_id, (f.run_id, f.run_id))[1],
                "edit": f.shift,
                "attribute": f.attribute,
                "n": f"{f.n} ({f.n_images} images)",
                "coef": f"{f.coef:+.3g}",
                "se": f"{f.se_cluster:.3g} (naive {f.se_naive:.3g})",
                "p": f"{f.p_cluster:.3g} {significance_stars(f.p_cluster)}",
            }
            for f in fits.itertuples()
        ]
        cols = [
            Column("label", "Model"),
            Column("run", "Run"),
            Column("edit", "Edit"),
            Column("attribute", "Measured attribute"),
            Column("n", "Rows"),
            Column("coef", "Log-odds per unit"),
            Column("se", "SE, clustered by image"),
            Column("p", "p (clustered)"),
        ]
        p.table(
            Table(
                "edit-effects",
                cols,
                rows,
                caption="Logistic regression of top-1 correctness on what each edit "
                "achieved; an image's rows are correlated, so read the clustered "
                "standard errors (the naive ones are shown for comparison)",
            )
        )


def withheld_inference(result) -> str:
    """Why a fit's standard errors, intervals and p-values are not shown ('' when they are).

    A fit that did not converge has estimates running off towards infinity; a fit with no
    more independent observations than terms has no residual information left to estimate
    an error from. The independent observations are the images: a per-cell table of 6
    photos under 40 shifts has 240 rows but only 6 photos' worth of evidence (and the
    clustered errors of the logistic model are estimated from 6 clusters). p-values and
    stars printed for such a fit look like findings and are not.
    """
    table = result.table
    terms = len(table)
    if not table.attrs.get("converged", True):
        return (
            "the fit did not converge (a level is always right or always wrong, so its "
            "estimate runs off towards infinity): no standard errors, intervals or p-values"
        )
    n_images = table.attrs.get("n_images")
    n_obs = int(result.fit.nobs)
    if n_obs <= terms or (n_images is not None and n_images <= terms):
        have = (
            f"{n_images} images" if n_images is not None and n_images <= terms else f"{n_obs} rows"
        )
        return (
            f"{terms} terms fitted on {have}: fewer independent observations than terms, so "
            "no standard errors, intervals or p-values (the estimates only describe these "
            "images); evaluate more images for inference"
        )
    return ""


def _regression(p: _Page, d: ReportData, tmp: Path) -> None:
    reg = d.regression
    if reg is None:
        return
    p.section(
        "regression",
        "Regression analysis",
        "OLS of per-cell accuracy (model x shift x class, levels pooled) on categorical "
        "factors with treatment coding; an estimate is the difference in accuracy from the "
        "reference level ("
        + ", ".join(f"{k} = {v}" for k, v in reg.reference.items())
        + "), holding the other factors fixed.",
    )
    stars = "signif.: **** p<0.0001, *** <0.001, ** <0.01, * <0.05, ns"
    inference = [
        Column("std_error", "Std. error", num, True),
        Column("ci_low", "95 % CI low", num, True),
        Column("ci_high", "95 % CI high", num, True),
        Column("t", "t", num, True),
        Column("p", "p", num, True),
        Column("stars", "Signif."),
    ]
    withheld = withheld_inference(reg)
    p.table(
        Table(
            "regression",
            [Column("term", "Term"), Column("estimate", "Estimate", num, True)]
            + ([] if withheld else inference),
            reg.table.to_dict("records"),
            caption=f"{r_squared_text(reg.fit)}, {int(reg.fit.nobs)} cells; " + (withheld or stars),
        )
    )
    logit = d.logit
    if logit is not None:
        p.add(
            '<p class="note">'
            + esc(
                "Which to read: the table above is the XIMAGENET-12 paper's analysis, one "
                "observation per (model, shift, class) cell, so its p-values count cells. "
                "The table below models every prediction (right or wrong) with a logistic "
                "regression and clusters the standard errors by image, because one photo's "
                "predictions under many shifts are not independent; read it for per-image "
                "effects. Its naive p-values, which treat every prediction as independent, "
                "are shown for comparison: they are far too small."
            )
            + "</p>"
        )
        withheld = withheld_inference(logit)
        inference = [
            Column("std_error", "SE (clustered)", num, True),
            Column("ci_low", "95 % CI low", num, True),
            Column("ci_high", "95 % CI high", num, True),
            Column("p", "p (clustered)", num, True),
            Column("p_naive", "p (naive)", num, True),
            Column("stars", "Signif."),
        ]
        p.table(
            Table(
                "regression-logit",
                [
                    Column("term", "Term"),
                    Column("estimate", "Log-odds", num, True),
                    Column("odds_ratio", "Odds ratio", num, True),
                ]
                + ([] if withheld else inference),
                logit.table.to_dict("records"),
                caption=f"Logistic model of top-1 correctness, {int(logit.fit.nobs)} predictions"
                + (
                    f"; {withheld}"
                    if withheld
                    else f", standard errors clustered by image; {stars}"
                )
                + (
                    "; perfect separation, see the notes"
                    if logit.table.attrs.get("separated")
                    else ""
                ),
            )
        )
    paths = reg.plots(tmp, "regression")
    p.add('<div class="plots">')
    p.figure(
        "fig-regression-residuals",
        paths["residuals"].read_bytes(),
        "Regression residuals vs fitted values",
        "scatter of residuals against fitted accuracy",
    )
    p.figure(
        "fig-regression-qq",
        paths["qq"].read_bytes(),
        "Normal QQ plot of the regression residuals",
        "QQ plot of residual quantiles against normal quantiles",
    )
    p.add("</div>")


def runs_sharing_cells(cells, shifts) -> tuple[list[str], list[str]]:
    """(runs drawn, runs left out) for a plot that pools ``shifts``: the largest group of runs
    that stored exactly the same (shift, level) cells among them, first-listed group on a tie.

    A family mean over 3 corruptions next to one over 15 is not a comparison, so runs
    outside the group are left out (and named) rather than pooled.
    """
    sub = cells[cells["shift"].isin(list(shifts))]
    groups: dict[frozenset, list[str]] = {}
    for rid in dict.fromkeys(sub["run_full"]):
        g = sub[sub["run_full"] == rid]
        key = frozenset(zip(g["shift"].astype(str), g["level"].astype(str)))
        groups.setdefault(key, []).append(rid)
    if not groups:
        return [], []
    best = max(groups.values(), key=len)
    return best, [r for ids in groups.values() if ids is not best for r in ids]


def _plots(p: _Page, d: ReportData, notes: list[str]) -> None:
    p.section("plots", "Plots", "Shaded bands and whiskers are bootstrap intervals of each cell.")
    labels = d.labels
    corr = list(dict.fromkeys(s for s in d.cells["shift"] if is_corruption(s)))
    numeric = [
        s
        for s in corr
        if any(plots._severity(v) is not None for v in d.cells[d.cells["shift"] == s]["level"])
    ]
    if numeric:
        p.figure(
            "fig-severity-corruption",
            plots.severity_curves(
                d.cells,
                [(s, [s]) for s in numeric],
                labels,
                title="Top-1 accuracy vs severity per corruption",
            ),
            "Top-1 accuracy vs severity for each corruption (severity 0 = clean).",
            "line plots of accuracy against corruption severity, one panel per corruption",
        )
        shared, left_out = runs_sharing_cells(d.cells, numeric)
        fams = d.families[
            d.families["family"].isin(["clean", *{family(s) for s in numeric}])
            & d.families["run_id"].isin(shared)
        ]
        caption = "Top-1 accuracy vs severity pooled over the corruptions of each family."
        if left_out:
            caption += (
                " Pooling compares like with like, so only runs that evaluated the same "
                "corruption cells are drawn; left out (other cells): "
                + ", ".join(labels.get(r, r) for r in left_out)
                + "."
            )
            notes.append(
                "family plot: left out "
                + ", ".join(labels.get(r, r) for r in left_out)
                + " (evaluated other corruption cells than the runs drawn)"
            )
        p.figure(
            "fig-severity-family",
            plots.family_curves(fams, {r: labels[r] for r in shared if r in labels}),
            caption,
            "line plots of accuracy against severity, one panel per corruption family",
        )
    if d.scenarios:
        rows = []
        for rid, (_, acc) in d.scenarios.items():
            cells = d.cells[d.cells["run_full"] == rid]
            for name in acc:
                shift, _, level = name.partition(":")
                c = cells[
                    (cells["shift"] == shift) & ((cells["level"] == level) if level else True)
                ]
                one = len(c) == 1
                rows.append(
                    {
                        "run_full": rid,
                        "scenario": name,
                        "top1": acc[name],
                        "top1_lo": float(c["top1_lo"].iloc[0]) if one else np.nan,
                        "top1_hi": float(c["top1_hi"].iloc[0]) if one else np.nan,
                    }
                )
        clean = {rid: mu for rid, (mu, _) in d.scenarios.items()}
        p.figure(
            "fig-scenarios",
            plots.scenario_bars(pd.DataFrame(rows), labels, clean),
            "Scenario accuracy per run with bootstrap intervals; dashed lines: clean accuracy.",
            "grouped bar chart of accuracy per background scenario",
        )
    if not d.class_drops.empty:
        p.add('<div class="plots">')  # side by side where the window is wide enough
        for i, r in enumerate(d.runs):
            g = d.class_drops[d.class_drops["run_id"] == r.run_id]
            if g.empty:
                continue
            namer = run_namer(r.record)
            png, note = plots.class_drop_heatmap(
                g, namer, f"{r.label}: drop from clean top-1 per class (points)"
            )
            p.figure(
                f"fig-class-drop-{i}",
                png,
                f"{r.label} (run {r.short}): accuracy drop per class and shift, levels pooled"
                + (f"; {note}" if note else "")
                + ".",
                "heatmap of per-class accuracy drops, classes by shifts",
            )
        p.add("</div>")
    rows = [{"label": r.label, **d.pooled.get(r.run_id, {})} for r in d.runs]
    df = pd.DataFrame(rows)
    for c in ("clean", "clean_lo", "clean_hi", "shifted", "shifted_lo", "shifted_hi"):
        if c not in df.columns:
            df[c] = np.nan
    p.figure(
        "fig-intervals",
        plots.interval_plot(df),
        "Clean and pooled shifted top-1 per run with bootstrap intervals (images resampled). "
        "Pooled shifted top-1 counts all of a run's shifted predictions together (a cell with "
        "more images weighs more), so it can differ from the tables' Shifted top-1 %, the "
        "mean over cells.",
        "dot plot with interval whiskers of clean and shifted accuracy per run",
    )


def _grids(p: _Page, d: ReportData, sample_id: str | None, notes: list[str]) -> int:
    from robustlab.workflows.report.grid import PNG_LIMIT, build_grids, encode_thumb

    grids, grid_notes = build_grids(d, sample_id=sample_id)
    notes.extend(grid_notes)
    p.section(
        "examples",
        "Example images",
        "Informative samples of different classes (the cells where models disagree, a "
        "mask covering 10-60 % of the picture when the runs used masks), clean and under "
        "every stored cell, re-rendered from the run's data root and seed with the same "
        "pipeline the model saw. Under each image: each model's top-1 prediction, "
        f"{CORRECT_MARK} correct / {WRONG_MARK} wrong.",
    )
    if not grids:
        p.add(notes_list(grid_notes or ["no image grid: no sample to show"]))
        return 0
    for gi, g in enumerate(grids):
        n_img = sum(len(c) for _, c in g.rows)
        lossless = n_img <= PNG_LIMIT
        head = f"<h3>{esc(g.sample_id)}: true class {esc(g.true_class)}</h3>"
        if gi == 1:
            # the first sample open, the others one click away (each is a screen or more)
            p.add(f'<details class="more"><summary>{len(grids) - 1} more sample(s)</summary>')
        p.add(
            head + f'<p class="note">Runs: {esc(", ".join(g.runs))}; data root {esc(g.data_root)}; '
            f"seed {g.seed}; pictures embedded as {'PNG (exact pixels)' if lossless else 'JPEG q90'}.</p>"
        )
        width = max(len(c) for _, c in g.rows)
        out = [f'<div class="table-wrap"><table class="grid" id="grid-{gi}"><tbody>']
        for row_label, cells in g.rows:
            out.append(f'<tr><th scope="row">{esc(row_label)}</th>')
            for c in cells:
                cap = c.caption or ("clean" if c.shift == CLEAN_SHIFT else f"level {c.level}")
                if c.image is not None:
                    data, mime = encode_thumb(c.image, lossless)
                    img = (
                        f'<img src="{data_uri(data, mime)}" alt="{esc(g.sample_id)} '
                        f'{esc(c.shift)} level {esc(c.level)}">'
                    )
                else:
                    img = f'<p class="note">not rendered: {esc(c.error)}</p>'
                preds = "".join(
                    f'<span class="pred {"ok" if pr.correct else "bad"}"><span class="mark" '
                    f'aria-label="{"correct" if pr.correct else "wrong"}">'
                    f"{CORRECT_MARK if pr.correct else WRONG_MARK}</span>{esc(pr.label)}: "
                    f"{esc(pr.top1)} ({100 * pr.prob:.0f} %)</span>"
                    for pr in c.predictions
                )
                out.append(
                    f'<td><figure class="thumb">{img}<figcaption><strong>{esc(cap)}</strong>'
                    f"{preds}</figcaption></figure></td>"
                )
            out.append("<td></td>" * (width - len(cells)) + "</tr>")
        out.append("</tbody></table></div>")
        p.add("".join(out) + notes_list(g.notes))
    if len(grids) > 1:
        p.add("</details>")
    return len(grids)


def _cells_table(p: _Page, d: ReportData) -> None:
    p.section(
        "cells",
        "All cells",
        "Every stored cell as `robustlab results` prints it (same numbers), with bootstrap "
        "intervals of top-1. CE rows (level 'all') follow each run's cells.",
    )
    res = d.results.merge(
        d.cells[["run_full", "shift", "level", "family", "top1_lo", "top1_hi"]],
        on=["run_full", "shift", "level"],
        how="left",
    )
    rows = res.to_dict("records")
    p.table(
        Table(
            "cells",
            [
                Column("model", "Model"),
                Column("suite", "Suite"),
                Column("run_id", "Run"),
                Column("shift", "Shift"),
                Column("family", "Family"),
                Column("level", "Level"),
                Column("n", "n", integer, True),
                Column("top1", "top1 %", pct, True),
                Column("top1_lo", "top1 low %", pct, True),
                Column("top1_hi", "top1 high %", pct, True),
                Column("top5", "top5 %", pct, True),
                Column("error", "error %", pct, True),
                Column("ce", "ce %", pct, True),
                Column("relative_ce", "relative_ce %", pct, True),
                Column("baseline", "Baseline"),
            ],
            rows,
            row_class=lambda r: "summary" if r.get("level") == "all" else "",
        )
    )


# ---------------------------------------------------------------------------- entry point
def build_report(
    db: str | Path,
    out: str | Path,
    *,
    run_ids=None,
    baseline: str | None = None,
    grid: bool = True,
    grid_sample: str | None = None,
    seed: int = 0,
    n_resamples: int = 1000,
    title: str | None = None,
    progress: bool = False,
    force: bool = False,
) -> ReportResult:
    """Write the HTML report of the runs in ``db`` to ``out``.

    Args:
        db: Results database.
        out: Output HTML path (parent folders are created).
        run_ids: Runs (ids or unique prefixes) to include; default all.
        baseline: CE baseline, as for ``robustlab results --baseline``.
        grid: Include the example image grid (re-renders images from the data root).
        grid_sample: Sample id to show in the grid (default: chosen deterministically).
        seed: Seed of the bootstrap generator (the report is reproducible for a seed).
        n_resamples: Bootstrap resamples per interval.
        title: Page title.
        progress: One stderr line as each stage starts (the CLI's default).
        force: Replace ``out`` even when it is not an HTML page (never the database).

    Raises:
        InputError: missing database, no matching runs, a bad output path.
    """
    import tempfile

    from robustlab.paths import check_outputs, check_replaceable, write_output

    out = Path(out)
    if out.exists() and out.is_dir():
        raise InputError(f"--out {out} is a folder; give a file name such as report.html")
    check_outputs({"--db": db}, {"--out": out})
    check_replaceable(out, kind="html", flag="--out", force=force)
    from robustlab.run.progress import StageLines

    stages = StageLines("report", 5, enabled=progress)
    rng = np.random.default_rng(int(seed))
    d = gather(db, run_ids=run_ids, baseline=baseline, rng=rng, n_resamples=n_resamples)
    # after the reading, so a bad --db or --run prints its one error line and nothing else
    stages.stage(f"read {len(d.runs)} run(s) and their bootstrap intervals")
    notes = list(d.notes)
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = title or "robustlab report"
    p = _Page()
    _summary(p, d, generated)
    if len(d.runs) > 1:
        _leaderboard(p, d)
    _corruption_tables(p, d)
    _scenario_tables(p, d)
    _edit_tables(p, d)
    _imagenet_d(p, d)
    _surface_variation(p, d)
    from robustlab.workflows.report.saliency import add_section as _saliency
    from robustlab.store import Store

    _saliency(p, Store(db), run_ids, rng, n_resamples, notes)
    _mining_and_review(p, d, seed)
    stages.stage("regression models")
    with tempfile.TemporaryDirectory(prefix="robustlab-report-") as tmp:
        _regression(p, d, Path(tmp))
    stages.stage("plots")
    _plots(p, d, notes)
    stages.stage("example images")
    n_grids = 0
    if grid:
        n_grids = _grids(p, d, grid_sample, notes)
    else:
        notes.append("image grid left out (--no-grid)")
    stages.stage("tables and page")
    _cells_table(p, d)
    # said once, where the missing mCE would be (the corruption tables)
    notes = [n for n in notes if MCE_NOTE not in n or "corruption-errors" not in p.tables]
    if notes:
        p.section("notes", "Notes", "What is missing or partial, and why.")
        p.add(notes_list(list(dict.fromkeys(notes))))
    toc = (
        '<nav class="toc" aria-label="Contents"><ul>'
        + "".join(f'<li><a href="#{esc(s)}">{esc(t)}</a></li>' for s, t in p.toc)
        + "</ul></nav>"
    )
    head = (
        f'<header class="top"><h1>{esc(title)}</h1><p class="meta">{len(d.runs)} run(s) from '
        f"{esc(d.db)}; generated {esc(generated)}</p>{toc}</header>"
    )
    document = page(title, head + "".join(p.parts))
    write_output(out, document, kind="html", flag="--out", force=force)
    stages.done()
    return ReportResult(out, p.tables, p.figures, n_grids, list(dict.fromkeys(notes)))


def r_squared_text(fit) -> str:
    """``R^2 = 0.873``, or why there is none: with every cell at the same value the
    total sum of squares is 0 and statsmodels would divide by it (a NaN and a warning)."""
    if not np.ptp(np.asarray(fit.model.endog, dtype=float)) > 0:
        return "R^2 undefined (every cell has the same value)"
    return f"R^2 = {fit.rsquared:.3f}"
