"""The report's saliency section: where each model looks, and whether that tracks robustness.

Drawn from the ``saliency`` table (``robustlab saliency``): a table per run and cell (mean
foreground share with its bootstrap interval, normalised share, pointing game, top-1), the
per-model numbers with their correlation across models (the number of models always
shown, few models labelled descriptive), a scatter plot of clean foreground share against
the robustness score, and an overlay grid: the cell image with the object's outline, then
each model's heat map, for a few images chosen to be informative (a scenario that flips a
model's prediction, the image where models disagree most about where to look).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd

from robustlab.cells import level_key
from robustlab.workflows.report.columns import col, column
from robustlab.workflows.report.html import Table
from robustlab.store.schema import CLEAN_SHIFT, SALIENCY_TASK

log = logging.getLogger(__name__)

GRID_ROWS = 4


def saliency_runs(store, run_ids=None) -> pd.DataFrame:
    """The saliency runs of ``store`` (all, or those among ``run_ids`` / their prefixes)."""
    runs = store.runs()
    keep = [isinstance(c, dict) and c.get("task") == SALIENCY_TASK for c in runs["config"]]
    runs = runs[keep]
    if run_ids is not None:
        wanted = [str(r) for r in run_ids]
        runs = runs[[any(str(r).startswith(w) for w in wanted) for r in runs["run_id"]]]
    return runs.reset_index(drop=True)


def choose_images(rows: pd.DataFrame, k: int = GRID_ROWS) -> list[tuple[str, str, str, str]]:
    """Up to ``k`` (sample, shift, level, why) worth showing: first the scenario cells that
    flip a model's correct clean prediction with the largest fall in foreground share, then
    the cells where the models' foreground shares differ most. Deterministic."""
    chosen: list[tuple[str, str, str, str]] = []
    key = ["sample_id", "shift", "level"]
    clean = rows[rows["shift"] == CLEAN_SHIFT].set_index(["run_id", "sample_id"])
    scen = rows[rows["shift"] != CLEAN_SHIFT]
    flips = []
    for r in scen.itertuples():
        c = clean.loc[(r.run_id, r.sample_id)] if (r.run_id, r.sample_id) in clean.index else None
        if c is not None and bool(c["correct"]) and not bool(r.correct):
            fall = float(c["fg_share"]) - float(r.fg_share) if pd.notna(r.fg_share) else 0.0
            flips.append((-fall, r.sample_id, r.shift, level_key(r.level)))
    for _, sid, sh, lv in sorted(flips):
        if len(chosen) >= (k + 1) // 2:
            break
        if all(c[0] != sid for c in chosen):
            chosen.append((sid, sh, lv, "flips a prediction"))
    if rows["run_id"].nunique() > 1:
        spread = (
            rows.dropna(subset=["fg_share"])
            .groupby(key)["fg_share"]
            .agg(lambda v: float(v.max() - v.min()) if len(v) > 1 else -1.0)
            .sort_values(ascending=False, kind="stable")
        )
        for (sid, sh, lv), val in spread.items():
            if len(chosen) >= k or val <= 0:
                break
            if all(c[0] != sid for c in chosen):
                chosen.append((sid, sh, level_key(lv), "models disagree"))
    if not chosen and not rows.empty:
        first = rows.sort_values(key).iloc[0]
        chosen.append((first.sample_id, first["shift"], level_key(first.level), "first image"))
    return chosen[:k]


def _cell_view(run: dict, sample_id: str, shift: str, level: str):
    """(image at the model's input, its object mask) of one cell, rebuilt from the data the
    run recorded; None when the data is not there any more."""
    from robustlab.data.sources import discover
    from robustlab.models.preprocess import Preprocessing
    from robustlab.workflows._masked import target_mask
    from robustlab.execution.tasks import CellImages
    from robustlab.saliency.maps import input_mask
    from robustlab.suites import Protocol

    cfg = run["config"]
    samples = discover(run["data_root"], labels_csv=cfg.get("labels_csv"), masks=cfg["masks"])
    sample = next((s for s in samples if s.id == sample_id), None)
    if sample is None:
        return None
    proto = run["preprocessing"]["protocol"]
    fields = Protocol.__dataclass_fields__
    protocol = Protocol(**{k: v for k, v in proto.items() if k in fields})
    prep_d = dict(run["preprocessing"]["model"])
    if isinstance(prep_d.get("input_size"), list):
        prep_d["input_size"] = tuple(prep_d["input_size"])
    prep_d["mean"], prep_d["std"] = tuple(prep_d["mean"]), tuple(prep_d["std"])
    prep = Preprocessing(**prep_d)
    from robustlab.shifts.registry import get_shift

    rule = shift != CLEAN_SHIFT and get_shift(shift).extra.get("donor_rule")
    donors = list(samples) if rule else None
    images = CellImages(protocol, int(run["seed"]), donors=donors, with_mask=True)
    base = images.base(sample)
    img = images.cell(sample, base, shift, level)
    truth = target_mask(sample, base, shift, level, int(run["seed"]))
    return prep.resize_crop(img), input_mask(truth, prep)


def _two_lines(label: str) -> str:
    """``lite0 (57934424) gradcam`` -> model and hash, then the method, on two lines."""
    return label.replace(") ", ")\n", 1)


def overlay_grid(runs: pd.DataFrame, rows: pd.DataFrame, chosen, labels: dict) -> bytes:
    """PNG: one row per chosen cell; the image with the mask outline, then each run's map."""
    import cv2

    from robustlab.workflows.report.plots import _figure, to_png
    from robustlab.saliency.maps import read_thumbnail

    records = {r["run_id"]: r for r in runs.to_dict("records")}
    ids = list(records)
    n_cols = 1 + len(ids)
    fig = _figure(2.1 * n_cols, 2.4 * len(chosen))
    fig.subplots_adjust(wspace=0.08, hspace=0.45)
    indexed = rows.set_index(["run_id", "sample_id", "shift", "level"])
    for i, (sid, shift, level, why) in enumerate(chosen):
        view = _cell_view(records[ids[0]], sid, shift, level)
        if view is None:
            continue
        img, mask = view
        ax = fig.add_subplot(len(chosen), n_cols, i * n_cols + 1)
        ax.imshow(img)
        ax.contour(mask.astype(float), levels=[0.5], colors=["#FFFFFF"], linewidths=1.2)
        ax.set_title(f"{sid.rsplit('/', 1)[-1][:24]}\n{shift}/{level}\n({why})", fontsize=7)
        ax.axis("off")
        for j, rid in enumerate(ids):
            ax = fig.add_subplot(len(chosen), n_cols, i * n_cols + 2 + j)
            ax.axis("off")
            key = (rid, sid, shift, level)
            if key not in indexed.index:
                ax.set_title(f"{_two_lines(labels[rid])}\n(not computed)", fontsize=7)
                continue
            r = indexed.loc[key]
            heat = read_thumbnail(r["map"]).astype(np.float32) / 255.0
            heat = cv2.resize(heat, (img.shape[1], img.shape[0]), interpolation=cv2.INTER_LINEAR)
            ax.imshow(img)
            ax.imshow(heat, cmap="inferno", alpha=0.55, vmin=0, vmax=1)
            ax.contour(mask.astype(float), levels=[0.5], colors=["#56B4E9"], linewidths=1.0)
            share = "n/a" if pd.isna(r["fg_share"]) else f"{float(r['fg_share']):.2f}"
            mark = "right" if bool(r["correct"]) else "wrong"
            ax.set_title(f"{_two_lines(labels[rid])}\nfg share {share}, {mark}", fontsize=7)
    return to_png(fig)


def scatter(models: pd.DataFrame, y: str, ylabel: str) -> bytes:
    """Clean foreground share (x) against a robustness number (y), one labelled point per run."""
    from robustlab.workflows.report.plots import _figure, _style, to_png

    fig = _figure(5.2, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    pts = models.dropna(subset=["fg_clean", y])
    for i, r in enumerate(pts.itertuples()):
        st = _style(i)
        ax.scatter([r.fg_clean], [getattr(r, y)], color=st["color"], marker=st["marker"], s=40)
        ax.annotate(
            str(r.model),
            (r.fg_clean, getattr(r, y)),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xlabel("clean foreground share (relevance mass)")
    ax.set_ylabel(ylabel)
    ax.set_title(f"{len(pts)} model(s)", fontsize=9)
    ax.grid(alpha=0.3)
    return to_png(fig)


CELL_COLUMNS = [
    col("model"),
    column("text", "cell", "Cell"),
    column("count", "n", "n"),
    column("score", "fg", "FG share", digits=3, tip="mean relevance mass"),
    column("text", "ci", "95 % interval"),
    column("score", "norm", "Normalised", digits=2, tip="share / mask area"),
    column("share", "pg", "Pointing", tip="map maximum on the object"),
    column("accuracy", "top1", "Top-1 %"),
]
MODEL_COLUMNS = [
    column("text", "model", "Model"),
    col("images", key="n_images"),
    column("score", "fg_clean", "FG share (clean)", digits=3),
    column("score", "fg_scenes", "FG share (scenarios)", digits=3),
    col("clean_top1", key="top1_clean"),
    column(
        "score",
        "s_robust",
        "Robustness score",
        digits=4,
        tip="1 - sigma2_cross from this run's own predictions (cross protocol)",
    ),
    col("bg_gap", tip="mixed_same minus mixed_rand"),
]
CORRELATION_COLUMNS = [
    column("text", "y", "Against"),
    column("count", "n", "Models"),
    column("score", "pearson", "Pearson r", digits=3),
    column("score", "spearman", "Spearman rho", digits=3),
    column("text", "note", "Note"),
]


def report_saliency_runs(store, run_ids, models) -> pd.DataFrame:
    """The saliency runs a report shows: those ``run_ids`` name; when it names none (a
    selection of evaluation runs, as the demo's report makes), the saliency runs of the
    report's ``models`` (specs), or every stored one if none is of those models. So the
    section is there whenever saliency runs are stored."""
    every = saliency_runs(store)
    if run_ids is None or every.empty:
        return every
    named = saliency_runs(store, run_ids)
    if not named.empty:
        return named
    mine = every[every["model_spec"].isin(list(models))].reset_index(drop=True)
    return mine if not mine.empty else every


def add_section(
    p,
    store,
    run_ids,
    rng: np.random.Generator,
    n_resamples: int,
    notes: list,
    models: Sequence[str] = (),
) -> None:
    """Append the saliency section to the report page ``p`` when ``store`` has saliency
    runs (:func:`report_saliency_runs`: which)."""
    from robustlab.saliency.analysis import model_table, run_label

    runs = report_saliency_runs(store, run_ids, models)
    if runs.empty:
        return
    rows = store.saliency(list(runs["run_id"]), maps=True)
    if rows.empty:
        notes.append("saliency runs without stored rows yet: no saliency section")
        return
    rows["level"] = rows["level"].astype(str)
    labels = {r["run_id"]: run_label(r) for r in runs.to_dict("records")}
    p.section(
        "saliency",
        "Saliency and foreground reliance",
        "Share of each model's positive saliency that falls on the object mask (relevance "
        "mass; 95 % bootstrap interval over images), the same share divided by the object's "
        "area (1: no preference for the object), and how often the map's maximum lies on "
        "the object (pointing game). XIMAGENET-12 (its Figure 4) reports that more robust "
        "models look more at the object; the correlations below test that on these models.",
    )
    _cells_table(p, rows, labels, rng, n_resamples)
    models = model_table(rows.drop(columns=["map"]), runs)
    p.table(
        Table(
            "saliency-models",
            MODEL_COLUMNS,
            models.to_dict("records"),
            caption="Per model: foreground share and robustness from the same images",
        )
    )
    _correlations(p, models)
    _overlays(p, runs, rows, labels, notes)


def _cells_table(p, rows: pd.DataFrame, labels: dict, rng, n_resamples: int) -> None:
    from robustlab.saliency.analysis import cell_summary

    summ = cell_summary(rows.drop(columns=["map"]), rng, n_resamples=n_resamples)
    p.table(
        Table(
            "saliency-cells",
            CELL_COLUMNS,
            [
                {
                    "label": labels[r.run_id],
                    "cell": r.shift if r.shift == CLEAN_SHIFT else f"{r.shift}/{r.level}",
                    "n": r.n,
                    "fg": r.fg_share,
                    "ci": ""
                    if pd.isna(r.fg_share_lo)
                    else f"{r.fg_share_lo:.3f}-{r.fg_share_hi:.3f}",
                    "norm": r.fg_share_norm,
                    "pg": r.pointing,
                    "top1": r.top1,
                }
                for r in summ.itertuples()
            ],
            caption="Foreground reliance per model and cell",
        )
    )


def _correlations(p, models: pd.DataFrame) -> None:
    """Foreground share against robustness across models: the table and the scatters."""
    from robustlab.saliency.analysis import FEW_MODELS, correlations

    corr = correlations(models)
    if not corr.empty:
        p.table(
            Table(
                "saliency-correlation",
                CORRELATION_COLUMNS,
                corr.to_dict("records"),
                caption="Clean foreground share vs robustness across models "
                f"(fewer than {FEW_MODELS} models: descriptive only)",
            )
        )
    for y, ylabel in (("s_robust", "robustness score (cross)"), ("bg_gap", "BG-gap")):
        if models[y].notna().sum() >= 1:
            n = int(models[["fg_clean", y]].dropna().shape[0])
            small = " (too few models for a trend)" if n < FEW_MODELS else ""
            p.figure(
                f"saliency-scatter-{y}",
                scatter(models, y, ylabel),
                f"Clean foreground share against {ylabel}: {n} model(s){small}",
                f"scatter plot of foreground share against {ylabel}",
            )


def _overlays(p, runs: pd.DataFrame, rows: pd.DataFrame, labels: dict, notes: list) -> None:
    chosen = choose_images(rows.drop(columns=["map"]))
    try:
        png = overlay_grid(runs, rows, chosen, labels)
    except Exception as exc:  # noqa: BLE001 - the data may be gone: the tables still stand
        notes.append(f"saliency overlay grid left out: cannot rebuild the images ({exc})")
        return
    p.figure(
        "saliency-overlays",
        png,
        "Image with the object outline (white), then each model's saliency (bright: high) "
        "with the outline (blue), for cells chosen because a scenario flips a prediction "
        "or the models disagree where to look",
        "grid of images with saliency heat maps per model",
    )


__all__ = [
    "add_section",
    "choose_images",
    "overlay_grid",
    "report_saliency_runs",
    "saliency_runs",
    "scatter",
]
