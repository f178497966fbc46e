"""The report's plots section: severity curves, scenario bars, per-class drop heat maps and
the clean/shifted interval plot. (The figures come from :mod:`.plots`; this module decides
which runs each one may compare.)"""

from __future__ import annotations

import numpy as np
import pandas as pd

from robustlab.workflows.report import plots
from robustlab.metrics.mce import is_corruption
from robustlab.workflows.report.gather import ReportData, family, run_namer
from robustlab.workflows.report.page import Page, Plot


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


def plots_section(p: Page, d: ReportData, notes: list[str]) -> None:
    """Every plot of the stored cells, each only where the runs give it something to show."""
    p.section("plots", "Plots", "Shaded bands and whiskers are bootstrap intervals of each cell.")
    _severity(p, d, notes)
    if d.scenarios:
        _scenario_bars(p, d)
    if not d.class_drops.empty:
        _class_drops(p, d)
    _intervals(p, d)


def _severity(p: Page, d: ReportData, notes: list[str]) -> None:
    """Accuracy against severity per corruption, then pooled per family over the runs that
    stored the same corruption cells."""
    labels = d.labels
    corr = list(dict.fromkeys(s for s in d.cells["shift"] if is_corruption(s)))
    numeric = [
        s
        for s in corr
        if any(plots._severity(v) is not None for v in d.cells[d.cells["shift"] == s]["level"])
    ]
    if not numeric:
        return
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
        names = ", ".join(labels.get(r, r) for r in left_out)
        caption += (
            " Pooling compares like with like, so only runs that evaluated the same "
            f"corruption cells are drawn; left out (other cells): {names}."
        )
        notes.append(
            f"family plot: left out {names} (evaluated other corruption cells than the runs drawn)"
        )
    p.figure(
        "fig-severity-family",
        plots.family_curves(fams, {r: labels[r] for r in shared if r in labels}),
        caption,
        "line plots of accuracy against severity, one panel per corruption family",
    )


def _scenario_bars(p: Page, d: ReportData) -> None:
    rows = []
    for rid, (_, acc) in d.scenarios.items():
        cells = d.cells[d.cells["run_full"] == rid]
        for name in acc:
            shift, _, level = name.partition(":")
            c = cells[(cells["shift"] == shift) & ((cells["level"] == level) if level else True)]
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
        plots.scenario_bars(pd.DataFrame(rows), d.labels, clean),
        "Scenario accuracy per run with bootstrap intervals; dashed lines: clean accuracy.",
        "grouped bar chart of accuracy per background scenario",
    )


def _class_drops(p: Page, d: ReportData) -> None:
    heatmaps: list[Plot] = []
    for i, r in enumerate(d.runs):
        g = d.class_drops[d.class_drops["run_id"] == r.run_id]
        if g.empty:
            continue
        png, note = plots.class_drop_heatmap(
            g, run_namer(r.record), f"{r.label}: drop from clean top-1 per class (points)"
        )
        heatmaps.append(
            (
                f"fig-class-drop-{i}",
                png,
                f"{r.label} (run {r.short}): accuracy drop per class and shift, levels pooled"
                + _variants(g)
                + (f"; {note}" if note else "")
                + ".",
                "heatmap of per-class accuracy drops, classes by shifts",
            )
        )
    p.plots(heatmaps)


def _variants(drops: pd.DataFrame) -> str:
    """Caption words for the columns that are one variant of a shift (random_bg add and
    paste: gather.variant_columns), shown apart as in the scenario tables."""
    split = sorted({s for s in drops["shift"].astype(str) if " " in s})
    if not split:
        return ""
    return f" (variants apart, as in the tables above: {', '.join(split)})"


def _intervals(p: Page, d: ReportData) -> None:
    df = pd.DataFrame([{"label": r.label, **d.pooled.get(r.run_id, {})} for r in d.runs])
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
