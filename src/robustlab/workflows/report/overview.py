"""The report's overview sections: the summary with its run tables, the leaderboard, and
every stored cell."""

from __future__ import annotations

import json

import pandas as pd
from markupsafe import Markup

from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.report.columns import SHIFTED_TOP1, col, column
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.headline import benchmark_key, benchmark_title
from robustlab.workflows.report.runs import RunView
from robustlab.workflows.report.html import Column, Table, is_missing
from robustlab.workflows.report.page import Page
from robustlab.workflows.report.render import render


# ---------------------------------------------------------------------------- summary
def summary(p: Page, d: ReportData, generated: str) -> None:
    """What the report covers, the per-run summary, and each run's full description."""
    from robustlab.workflows.report.headline import headline

    p.section("summary", "Summary")
    p.add(headline(d, p.flagged))
    p.add(_facts(d, generated))
    _run_summary(p, d)
    _runs_table(p, d.runs)
    for r in d.runs:
        p.add(_run_details(r))


def _facts(d: ReportData, generated: str) -> Markup:
    """The key-value list at the top: models, suites, data, seeds, intervals."""
    from robustlab.version import __version__

    runs = d.runs
    models = list(dict.fromkeys(r.record["model_spec"] for r in runs))
    suites = list(dict.fromkeys(benchmark_title(r.record) for r in runs))
    roots = list(dict.fromkeys(str(r.record["data_root"]) for r in runs))
    seeds = list(dict.fromkeys(int(r.record["seed"] or 0) for r in runs))
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
    return render("facts.html", items=items)


RUNS_COLUMNS = [
    col("model"),
    col("run"),
    column("text", "suite", "Suite", tip="benchmark and suite version"),
    column(
        "text",
        "protocol",
        "Protocol",
        tip="how the model saw the images: the benchmark's official protocol "
        "unless marked (override)",
        css="wide",
    ),
    column("text", "data", "Data root", css="path"),
    column("text", "fingerprint", "Data fingerprint"),
    column("text", "label_space", "Label space"),
    column("text", "weights", "Weights hash"),
    col("seed"),
    col("images", key="n_samples"),
    column("count", "n_skipped", "Skipped"),
    column("text", "status", "Status"),
    column(
        "text",
        "time",
        "Ran (UTC)",
        tip="started, then finished (the time alone on the same day)",
        css="date",
    ),
]


def _ran(rec: dict) -> str:
    """``2026-11-28 18:09–18:12``: when the run started and finished (the date, then the
    times on a second line where the column is narrow)."""
    start = str(rec.get("started_at") or "")[:16]
    end = rec.get("finished_at")
    if is_missing(end) or not end:
        return start
    end = str(end)[:16]
    return f"{start}\u2013{end[11:] if end[:10] == start[:10] else end}"


def _runs_table(p: Page, runs: list[RunView]) -> None:
    rows = []
    for r in runs:
        rec = r.record
        version = rec.get("suite_version")
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "model": rec["model_spec"],
                "weights": (rec.get("weights_hash") or "")[:8],
                "suite": benchmark_key(rec)
                + ("" if is_missing(version) or not version else f" v{version}"),
                "protocol": run_protocol(rec),
                "data": rec["data_root"],
                "fingerprint": (rec.get("data_fingerprint") or "")[:8],
                "label_space": rec.get("label_space"),
                "seed": rec.get("seed"),
                "n_samples": rec.get("n_samples"),
                "n_skipped": rec.get("n_skipped"),
                "status": rec.get("status"),
                "time": _ran(rec),
            }
        )
    p.table(
        Table(
            "runs",
            RUNS_COLUMNS,
            rows,
            caption="Runs in this report (library versions, preprocessing and configuration "
            "of each run: below the table)",
        )
    )


def _run_details(r: RunView) -> Markup:
    """A run's preprocessing, versions, configuration and skipped inputs, folded away."""
    rec = r.record
    detail = {
        "preprocessing": rec.get("preprocessing"),
        "versions": rec.get("versions"),
        "config": {k: v for k, v in (rec.get("config") or {}).items() if k != "cells"},
    }
    skipped = rec.get("skipped") or []
    return render(
        "run_details.html",
        label=r.label,
        short=r.short,
        detail=json.dumps(detail, indent=1, sort_keys=True, default=str),
        skipped=[
            (s[0] if isinstance(s, list) else s, s[1] if isinstance(s, list) and len(s) > 1 else "")
            for s in skipped[:20]
        ],
        more=max(0, len(skipped) - 20),
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


def _run_summary(p: Page, d: ReportData) -> None:
    """The first table: ``robustlab results --summary``, one row per run, with the
    intervals of its clean and pooled shifted top-1 and a definition of every number."""
    from robustlab.workflows.report.headline import CLEAN_DEFINED

    rows = []
    for r in d.summary.to_dict("records"):
        entry = d.pooled.get(str(r.get("run_full")), {})
        rows.append(
            {
                **r,
                "suite": benchmark_key(d.run(r["run_full"]).record),
                "clean_ci": _ci(entry, "clean"),
                "shifted_ci": _ci(entry, "shifted"),
            }
        )
    has = {
        k: any(not is_missing(r.get(k)) for r in rows)
        for k in ("mce", "s_robust", "s_partial", "bg_gap", "shifted_top1")
    }
    ci = f"{100 * d.confidence:.0f} % CI"
    cols = [
        col("model"),
        col("suite"),
        col("run", key="run_id"),
        col("images", key="images"),
        col("clean_top1"),
        column("text", "clean_ci", f"Clean {ci}"),
    ]
    defined = [
        "Images: distinct images the run scored",
        f"Clean top-1 %: {CLEAN_DEFINED}",
        f"{ci}: {100 * d.confidence:.0f} % percentile bootstrap interval over images "
        f"({d.n_resamples} resamples)",
    ]
    if has["shifted_top1"]:
        cols += [col("shifted_top1"), column("text", "shifted_ci", f"Pooled shifted {ci}")]
        defined += [
            f"Shifted top-1 %: {SHIFTED_TOP1}",
            f"Pooled shifted {ci}: the interval of the share of all shifted predictions "
            "that are right (images resampled; the same number as Shifted top-1 when every "
            "cell scored the same images)",
        ]
    if has["mce"]:
        cols += [col("mce"), col("rel_mce"), column("text", "baseline", "CE baseline")]
        defined.append(
            "mCE %: ImageNet-C's mean over corruptions of the error summed over severities, "
            "divided by the CE baseline's; Rel. mCE % the same for the drop from clean error"
        )
    if has["s_robust"]:
        cols.append(col("s_robust"))
        defined.append("S_robust: XIMAGENET-12's robustness score")
    if has["s_partial"]:
        cols.append(
            col("s_partial", tip="1 - sigma2_cross: EX2 needs models trained on each scenario")
        )
        defined.append(
            "S partial (EX1): XIMAGENET-12's robustness score as far as stored predictions "
            "allow, 1 - sigma2_cross (variance of top-1 across its scenarios); the full "
            "score also needs models trained on each scenario (EX2)"
        )
    if has["bg_gap"]:
        cols.append(col("bg_gap"))
        defined.append(
            "BG-gap %: ImageNet-9's top-1 on mixed_same minus top-1 on mixed_rand, same images"
        )
    cols += [
        col("seed"),
        column(
            "text",
            "protocol",
            "Protocol",
            tip="how the images were framed and shown to the model: the protocol's name, "
            "(override) when --protocol replaced the suite's own",
        ),
        column(
            "text",
            "path",
            "Path",
            tip="on-the-fly (torch:cuda/cpu: batched torch shifts), or read from a "
            "generated folder",
        ),
        column("text", "precision", "Precision"),
    ]
    if any(not is_missing(r.get("defence")) for r in rows):
        cols.append(
            column(
                "text",
                "defence",
                "Defence",
                tip="test-time defence the model ran behind (--preprocess, --tta)",
            )
        )
    notes = ["; ".join(defined) + "."]
    notes += _clean_differs(d, rows)
    p.table(
        Table(
            "run-summary",
            cols,
            rows,
            caption="One row per run (the same numbers as `robustlab results --summary`, "
            "plus intervals)",
            notes=notes,
        )
    )


def _ci(entry: dict, key: str) -> str:
    lo, hi = entry.get(f"{key}_lo"), entry.get(f"{key}_hi")
    if is_missing(lo) or is_missing(hi):
        return ""
    return f"{100 * lo:.1f}\u2013{100 * hi:.1f}"


def _clean_differs(d: ReportData, rows: list[dict]) -> list[str]:
    """A note for each data root whose runs got different clean top-1 under different
    protocols (ImageNet-E squashes the whole photo where the others crop its centre), so
    that 100 % beside 83 % on the same photos is explained where it is seen."""
    by_root: dict[str, list[dict]] = {}
    for r in rows:
        if not is_missing(r.get("clean_top1")):
            root = str(d.run(r["run_full"]).record.get("data_root"))
            by_root.setdefault(root, []).append(r)
    notes = []
    for group in by_root.values():
        values = {round(float(r["clean_top1"]), 6) for r in group}
        protocols = {str(r.get("protocol")) for r in group}
        if len(values) > 1 and len(protocols) > 1:
            seen = "; ".join(
                f"{r['label']} on {r['suite']}: {100 * float(r['clean_top1']):.1f} % "
                f"({r.get('protocol')})"
                for r in group
            )
            notes.append(
                "Clean top-1 differs between runs on the same photos because each run "
                f"frames them by its benchmark's protocol (column Protocol): {seen}."
            )
    return notes


# ---------------------------------------------------------------------------- leaderboard
def leaderboard(p: Page, d: ReportData) -> None:
    """Runs ranked against runs over exactly the same shifted cells, others listed apart.

    A mean over 20 cells is not comparable with one over 75 (other shifts, other levels),
    even within one suite, so only runs whose stored shifted (shift, level) cells are the
    same set are ranked together; a run that shares its cells with no other run is listed
    apart with its cell count.
    """
    groups = _leaderboard_groups(d)
    ranked = [g for cells, g in groups.items() if cells and len(g) > 1]
    alone = [x for cells, g in groups.items() if not (cells and len(g) > 1) for x in g]
    all_rows = [x for g in groups.values() for x in g]
    p.section(
        "leaderboard",
        "Leaderboard",
        "Runs are ranked only against runs over exactly the same shifted cells (the same "
        f"shifts at the same levels), by shifted top-1: {SHIFTED_TOP1}. Click a header to sort.",
    )
    for i, rows in enumerate(sorted(ranked, key=lambda g: -len(g))):
        _rank(rows)
        suites = ", ".join(dict.fromkeys(x["suite"] for x in rows))
        p.table(
            Table(
                "leaderboard" if i == 0 else f"leaderboard-{i + 1}",
                _leaderboard_columns(all_rows, rank=True),
                rows,
                caption=f"Ranked: {len(rows)} runs over the same {rows[0]['cells']} shifted "
                f"cells ({suites})",
            )
        )
    if alone:
        p.table(
            Table(
                "leaderboard-unranked",
                _leaderboard_columns(all_rows, rank=False),
                alone,
                caption="Not ranked: no other run covers the same shifted cells, so a rank "
                "would compare different cells (the cell counts say how many each covers)",
            )
        )


def _leaderboard_groups(d: ReportData) -> dict[frozenset, list[dict]]:
    """One leaderboard row per run, grouped by the set of shifted cells the run stored."""
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
                "suite": benchmark_key(r.record),
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
    return groups


def _rank(rows: list[dict]) -> None:
    """Sort ``rows`` by shifted top-1, best first, and give each its (shared on a tie) rank."""

    def score(x: dict) -> float:
        return -1.0 if is_missing(x["shifted"]) else float(x["shifted"])

    rows.sort(key=lambda x: -score(x))
    for x in rows:
        x["rank"] = 1 + sum(1 for y in rows if score(y) > score(x))


def _leaderboard_columns(all_rows: list[dict], rank: bool) -> list[Column]:
    cols = [col("model"), col("run"), col("suite")]
    if rank:
        cols.append(column("count", "rank", "Rank"))
    cols += [
        column("count", "cells", "Shifted cells"),
        col("images"),
        col("clean_top1", key="clean"),
        col("shifted_top1", key="shifted"),
    ]
    if any(not is_missing(x["mce"]) for x in all_rows):
        cols += [col("mce"), col("rel_mce", key="rel_mce")]
    if any(not is_missing(x["s_partial"]) for x in all_rows):
        cols.append(col("s_partial"))
    if any(not is_missing(x["bg_gap"]) for x in all_rows):
        cols.append(col("bg_gap"))
    return cols


# ---------------------------------------------------------------------------- all cells
CELLS_COLUMNS = [
    column("text", "model", "Model"),
    col("suite"),
    col("run", key="run_id"),
    column("text", "shift", "Shift"),
    column("text", "family", "Family"),
    column("text", "level", "Level"),
    column("count", "n", "n"),
    column("accuracy", "top1", "top1 %"),
    column("accuracy", "top1_lo", "top1 low %"),
    column("accuracy", "top1_hi", "top1 high %"),
    column("accuracy", "top5", "top5 %"),
    column("error", "error", "error %"),
    column("ce", "ce", "ce %"),
    column("ce", "relative_ce", "relative_ce %"),
    col("baseline"),
]


def cells_table(p: Page, d: ReportData) -> None:
    """Every stored cell, as ``robustlab results`` prints it, with its interval."""
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
    p.table(
        Table(
            "cells",
            CELLS_COLUMNS,
            res.to_dict("records"),
            row_class=lambda r: "summary" if r.get("level") == "all" else "",
        )
    )


__all__ = ["cells_table", "leaderboard", "run_protocol", "summary"]
