"""The report's plots, drawn with matplotlib's Agg canvas and returned as PNG bytes.

No pyplot: figures are built on :class:`matplotlib.figure.Figure` with an Agg canvas, so
the report works headless and never touches the user's backend or global state. Colours
are the Okabe-Ito palette, and every series also differs by marker or hatch, so nothing
depends on telling colours apart.
"""

from __future__ import annotations

import textwrap

import io
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from robustlab.workflows.report.html import OKABE_ITO

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")
DPI = 110
# Smallest text in a plot, in points: 7 pt at 110 dpi is 10.7 px, and the report shows plots
# at their natural size (never shrunk; see MAX_WIDTH_IN for how they fit the page).
MIN_TEXT_PT = 7.0
# Widest figure, in inches: 1,150 px at DPI, so that every plot fits the report's content
# column in a 1280 px window at its natural size (plots are never shrunk: their text would).
MAX_WIDTH_IN = 1150 / DPI


def text_px(points: float) -> float:
    """Height in screen pixels of ``points`` text in a PNG shown at its natural size."""
    return points * DPI / 72.0


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def to_png(fig) -> bytes:
    """The figure as PNG bytes, with no text smaller than :data:`MIN_TEXT_PT`."""
    from matplotlib.text import Text

    for t in fig.findobj(Text):
        if t.get_text() and t.get_fontsize() < MIN_TEXT_PT:
            t.set_fontsize(MIN_TEXT_PT)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _style(i: int) -> dict:
    return {"color": OKABE_ITO[i % len(OKABE_ITO)], "marker": MARKERS[i % len(MARKERS)]}


def _severity(level) -> float | None:
    try:
        return float(level)
    except (TypeError, ValueError):
        return None


def _grid(n: int, cols: int = 4) -> tuple[int, int]:
    cols = max(1, min(cols, n))
    return math.ceil(n / cols), cols


def severity_curves(
    cells: pd.DataFrame,
    groups: Sequence[tuple[str, Sequence[str]]],
    labels: dict[str, str],
    *,
    title: str,
) -> bytes:
    """Small multiples of top-1 accuracy vs severity, one panel per group, a line per run.

    Args:
        cells: Per-cell rows with run_full, shift, level, top1 and optional top1_lo/top1_hi.
        groups: (panel title, shifts pooled in it); for per-corruption panels each group
            holds one shift.
        labels: run id -> legend label.
        title: Figure title.

    Severity 0 is the clean cell, so each line starts at the run's clean accuracy; the
    shaded band is the bootstrap interval of each cell.
    """
    rows, cols = _grid(len(groups))
    fig = _figure(min(MAX_WIDTH_IN, 0.35 + 2.55 * cols), 2.5 * rows + 0.6)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for k, (name, shifts) in enumerate(groups):
        ax = axes[k // cols][k % cols]
        for i, (rid, lab) in enumerate(labels.items()):
            g = cells[(cells["run_full"] == rid) & cells["shift"].isin([*shifts, "clean"])]
            g = (
                g.assign(sev=[_severity(v) for v in g["level"]])
                .dropna(subset=["sev"])
                .sort_values("sev")
            )
            if g.empty or (g["shift"] != "clean").sum() == 0:
                continue
            st = _style(i)
            ax.plot(g["sev"], 100 * g["top1"], label=lab, lw=1.6, ms=5, **st)
            if {"top1_lo", "top1_hi"} <= set(g.columns):
                ax.fill_between(
                    g["sev"],
                    100 * g["top1_lo"],
                    100 * g["top1_hi"],
                    color=st["color"],
                    alpha=0.15,
                    lw=0,
                )
        ax.set_title(name.replace("_", " "), fontsize=10)
        ax.set_ylim(-2, 102)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("severity (0 = clean)", fontsize=8)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        if k % cols == 0:
            ax.set_ylabel("top-1 accuracy (%)", fontsize=9)
    for k in range(len(groups), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    handles, legend_labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            legend_labels,
            loc="upper center",
            ncol=min(4, len(handles)),
            fontsize=9,
            frameon=False,
            bbox_to_anchor=(0.5, 1.0),
        )
    fig.suptitle(title, fontsize=11, y=1.04 if handles else 1.0)
    fig.tight_layout()
    return to_png(fig)


def family_curves(families: pd.DataFrame, labels: dict[str, str]) -> bytes:
    """Accuracy vs severity pooled per family (one panel per family, a line per run)."""
    fam = families[families["family"] != "clean"]
    names = list(dict.fromkeys(fam["family"]))
    cells = families.rename(columns={"run_id": "run_full", "family": "shift"})
    return severity_curves(
        cells,
        [(n, [n]) for n in names],
        labels,
        title="Top-1 accuracy vs severity, pooled per family",
    )


def scenario_bars(scen: pd.DataFrame, labels: dict[str, str], clean: dict[str, float]) -> bytes:
    """Horizontal bars of scenario accuracy (a bar per run that has the scenario, hatched),
    with interval whiskers.

    Scenarios run down the page, so the figure keeps one width however many scenarios and
    runs there are (19 scenarios side by side made a 2,500 px wide plot); each run draws
    bars only for the scenarios it evaluated, so no slot stays empty.

    Args:
        scen: Rows run_full, scenario, top1, top1_lo, top1_hi.
        clean: run id -> clean accuracy (drawn as a dashed reference line).
    """
    names = list(dict.fromkeys(scen["scenario"]))
    runs = [r for r in labels if r in set(scen["run_full"])]
    slots = [
        (name, rid)
        for name in names
        for rid in runs
        if ((scen["run_full"] == rid) & (scen["scenario"] == name)).any()
    ]
    bar_in = 0.24
    fig = _figure(min(MAX_WIDTH_IN, 8.0), 1.4 + bar_in * len(slots) + 0.12 * len(names))
    ax = fig.add_subplot()
    y, ticks, pos = [], [], 0.0
    for name in names:
        mine = [rid for n, rid in slots if n == name]
        ticks.append(pos + (len(mine) - 1) / 2)
        y += [(name, rid, pos + j) for j, rid in enumerate(mine)]
        pos += len(mine) + 0.6
    for i, rid in enumerate(runs):
        g = scen[scen["run_full"] == rid].set_index("scenario")
        at = [(name, yy) for name, r, yy in y if r == rid]
        x = np.array([100 * float(g.loc[name, "top1"]) for name, _ in at])
        err = None
        if {"top1_lo", "top1_hi"} <= set(g.columns):
            lo = np.array([100 * float(g.loc[name, "top1_lo"]) for name, _ in at])
            hi = np.array([100 * float(g.loc[name, "top1_hi"]) for name, _ in at])
            err = np.vstack([x - lo, hi - x])
            err = np.where(np.isfinite(err), np.clip(err, 0, None), 0)
        colour = OKABE_ITO[i % len(OKABE_ITO)]
        ax.barh(
            [yy for _, yy in at],
            x,
            0.85,
            label=labels[rid],
            color=colour,
            edgecolor="black",
            linewidth=0.5,
            hatch=HATCHES[i % len(HATCHES)],
            xerr=err,
            capsize=2,
            error_kw={"elinewidth": 0.8},
        )
        if rid in clean:
            ax.axvline(100 * clean[rid], color=colour, ls="--", lw=1)
    ax.set_yticks(ticks, [n.replace("_", " ") for n in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("top-1 accuracy (%)")
    ax.set_xlim(0, 105)
    ax.set_title("Scenario accuracy (dashed: clean accuracy of the same run)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return to_png(fig)


def class_drop_heatmap(
    drops: pd.DataFrame, class_name, title: str, max_classes: int = 25
) -> tuple[bytes, str]:
    """Heatmap of accuracy drop (clean minus shifted, points) per class and shift.

    Diverging ColorBrewer PuOr (colour-blind safe), centred on zero so gains and losses
    read differently; each cell also prints its value, so colour is never the only cue.

    Returns:
        (PNG, a note saying which classes are shown when there are too many).
    """
    table = drops.pivot_table(index="label", columns="shift", values="drop", aggfunc="mean")
    from robustlab.metrics.accuracy import shift_order

    rank = shift_order()
    # a named variant ("random_bg add") sits with its shift
    table = table[
        sorted(table.columns, key=lambda c: (rank.get(str(c).split(" ")[0], len(rank)), c))
    ]
    note = ""
    if len(table) > max_classes:
        keep = table.mean(axis=1).sort_values(ascending=False).index[:max_classes]
        note = f"showing the {max_classes} classes with the largest mean drop of {len(table)}"
        table = table.loc[keep]
    # Shifts across while they fit the page at a readable cell width; many shifts (44 in
    # the full vocabulary) run down the page instead, where there is room for them.
    if len(table.columns) > 16 and len(table.columns) > len(table):
        table = table.T
        row_name, col_name = (lambda v: str(v).replace("_", " ")), class_name
    else:
        row_name, col_name = class_name, (lambda v: str(v).replace("_", " "))
    values = 100 * table.to_numpy(float)
    n_r, n_c = values.shape
    width = min(MAX_WIDTH_IN, 2.8 + 0.55 * n_c)
    fig = _figure(width, min(30.0, 1.4 + 0.3 * n_r))
    ax = fig.add_subplot()
    lim = max(1.0, float(np.nanmax(np.abs(values))) if values.size else 1.0)
    im = ax.imshow(values, cmap="PuOr_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(
        range(n_c), [col_name(c) for c in table.columns], rotation=40, ha="right", fontsize=8
    )
    ax.set_yticks(range(n_r), [row_name(v) for v in table.index], fontsize=8)
    if n_r * n_c <= 600:
        for r in range(n_r):
            for c in range(n_c):
                v = values[r, c]
                if np.isfinite(v):
                    ax.text(
                        c,
                        r,
                        f"{v:.0f}",
                        ha="center",
                        va="center",
                        fontsize=6.5,
                        color="white" if abs(v) > 0.6 * lim else "black",
                    ).set_in_layout(False)  # inside the axes: the layout need not measure it
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cb.set_label("drop in top-1 (points; > 0 worse than clean)", fontsize=8)
    # over the whole figure, wrapped to its width: over the axes alone a long title ran
    # into the colour bar of a narrow heatmap (ImageNet-E's few edits)
    fig.suptitle(textwrap.fill(title, max(24, int(width * 11))), fontsize=10)
    fig.tight_layout()
    return to_png(fig), note


def interval_plot(rows: pd.DataFrame) -> bytes:
    """Forest plot: clean and pooled shifted top-1 per run with bootstrap intervals.

    Args:
        rows: label, clean, clean_lo, clean_hi, shifted, shifted_lo, shifted_hi.
    """
    n = len(rows)
    fig = _figure(7.0, 1.0 + 0.45 * n)
    ax = fig.add_subplot()
    y = np.arange(n)[::-1]
    for j, (what, name, marker) in enumerate(
        (("clean", "clean", "o"), ("shifted", "all shifts pooled", "s"))
    ):
        if what not in rows.columns:
            continue
        v = 100 * rows[what].to_numpy(float)
        lo = 100 * rows[f"{what}_lo"].to_numpy(float)
        hi = 100 * rows[f"{what}_hi"].to_numpy(float)
        ok = np.isfinite(v)
        ax.errorbar(
            v[ok],
            y[ok] + (0.12 if j == 0 else -0.12),
            xerr=np.vstack([v[ok] - lo[ok], hi[ok] - v[ok]]),
            fmt=marker,
            capsize=3,
            color=OKABE_ITO[j],
            label=name,
            ms=6,
        )
    ax.set_yticks(y, list(rows["label"]), fontsize=8)
    ax.set_xlabel("top-1 accuracy (%)")
    ax.set_xlim(-2, 102)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(
        "Top-1 with bootstrap intervals (per-image resampling for the pooled value)", fontsize=10
    )
    fig.tight_layout()
    return to_png(fig)


def attribute_curves(curves: pd.DataFrame, labels: dict[str, str], names: dict[str, str]) -> bytes:
    """Top-1 accuracy against each measured attribute (one panel per attribute, a line per run).

    Args:
        curves: Rows run_full, attribute, x, n, top1 (``benchmark_data.edit_curves``).
        labels: run id -> label.
        names: attribute -> axis label.
    """
    attrs = [a for a in names if a in set(curves["attribute"])]
    rows, cols = _grid(len(attrs), cols=2)
    fig = _figure(4.2 * cols, 3.2 * rows)
    for k, attr in enumerate(attrs):
        ax = fig.add_subplot(rows, cols, k + 1)
        part = curves[curves["attribute"] == attr]
        for i, rid in enumerate(r for r in labels if r in set(part["run_full"])):
            g = part[part["run_full"] == rid].sort_values("x")
            ax.plot(g["x"], 100 * g["top1"], label=labels[rid], lw=1.5, ms=5, **_style(i))
        ax.set_xlabel(f"measured {names[attr]}", fontsize=9)
        ax.set_ylabel("top-1 accuracy (%)", fontsize=9)
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        if k == 0:
            ax.legend(fontsize=8, frameon=False)
    fig.suptitle("Accuracy vs measured attribute (edited images, quantile bins)", fontsize=10)
    fig.tight_layout()
    return to_png(fig)
