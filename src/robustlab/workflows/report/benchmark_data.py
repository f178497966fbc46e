"""The numbers of the benchmark-specific sections: ImageNet-E's per-level accuracy, paired
drop and attribute curves, ImageNet-D's subsets, the surface-variation runs, and the
mining and review records."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from robustlab.cells import level_key
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.store.schema import HOLDOUT_SHIFT, HOLDOUT_SUITE
from robustlab.workflows.report.runs import RunView

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
    cells: pd.DataFrame, runs: Sequence[RunView], paired: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Accuracy and drop from clean per edit level (ImageNet-E Table 1 shape).

    The drop is paired: with ``paired`` (per shifted cell, its images' clean predictions:
    ``run_id``, ``shift``, ``level``, ``n_paired``, ``n_clean_correct``, as
    :meth:`robustlab.store.Store.clean_of_cells` counts them), ``clean_paired`` is the
    clean accuracy over exactly the images the level holds, so a level that skipped images
    (an object that could not move, a file missing from an archive folder) is compared with
    the clean accuracy of the same images, never of a different set. ``clean`` is the
    clean accuracy over all images; ``n_clean`` how many; ``drop`` = ``clean_paired`` -
    ``top1`` (= ``clean`` - ``top1`` when nothing was skipped).
    """
    pairs = (
        {}
        if paired is None
        else {
            (r.run_id, r.shift, level_key(r.level)): (int(r.n_paired), int(r.n_clean_correct))
            for r in paired.itertuples(index=False)
        }
    )
    rows = []
    for r in runs:
        suite = r.record.get("suite")
        c = cells[cells["run_full"] == r.run_id]
        clean = c[c["shift"] == CLEAN_SHIFT]
        base = float(clean["top1"].iloc[0]) if len(clean) else np.nan
        n_clean = int(clean["n"].iloc[0]) if len(clean) else 0
        for row in c.itertuples():
            if is_edit(row.shift, suite):
                same = base
                if paired is not None:
                    n, k = pairs.get((r.run_id, row.shift, level_key(row.level)), (0, 0))
                    same = k / n if n else np.nan
                rows.append(
                    {
                        "run_full": r.run_id,
                        "label": r.label,
                        "shift": row.shift,
                        "level": level_key(row.level),
                        "n": int(row.n),
                        "top1": float(row.top1),
                        "top1_lo": getattr(row, "top1_lo", np.nan),
                        "top1_hi": getattr(row, "top1_hi", np.nan),
                        "clean": base,
                        "n_clean": n_clean,
                        "clean_paired": same,
                        "drop": same - float(row.top1),
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


def imagenet_d_subsets(folders: pd.DataFrame, runs: list[RunView]) -> pd.DataFrame:
    """Top-1 accuracy per ImageNet-D subset (background, texture, material, and all) of
    each run on the ``imagenet-d`` label space, like the paper's main table.

    Args:
        folders: Clean predictions counted per run and first folder of the sample id
            (:meth:`robustlab.store.Store.clean_by_folder`: ``run_id``, ``folder``, ``n``,
            ``n_correct``).
        runs: The runs; those on the ``imagenet-d`` label space get rows.

    The subset is the first folder of the sample id (the published ``<subset>/<class>/<file>``
    layout, or ``robustlab synth``'s); other samples count under "all" only.
    """
    cols = ["run_full", "label", "subset", "n", "top1"]
    ids = [r.run_id for r in runs if r.record.get("label_space") == "imagenet-d"]
    clean = folders[folders["run_id"].isin(ids)]
    if clean.empty:
        return pd.DataFrame(columns=cols)
    labels = {r.run_id: r.label for r in runs}
    rows = []
    for rid, g in clean.groupby("run_id", sort=True):
        parts = [(name, g[g["folder"] == name]) for name in ("background", "texture", "material")]
        for name, part in [*parts, ("all", g)]:
            n = int(part["n"].sum())
            if n:
                rows.append(
                    {
                        "run_full": rid,
                        "label": labels.get(rid, rid),
                        "subset": name,
                        "n": n,
                        "top1": int(part["n_correct"].sum()) / n,
                    }
                )
    return pd.DataFrame(rows, columns=cols)


def holdout_table(runs: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """One row per surface-variation run: protocol, what was held out, sizes and accuracies.

    Args:
        runs: ``Store.runs()`` rows (others than surface-variation runs are ignored).
        cells: Their per-cell counts (``run_id``, ``shift``, ``n``, ``n_correct``), as
            ``Store.cell_table`` gives them.
    """
    rows = []
    for r in runs.itertuples():
        cfg = r.config if isinstance(r.config, dict) else json.loads(r.config or "{}")
        if r.suite != HOLDOUT_SUITE or "holdout" not in cfg:
            continue
        g = cells[cells["run_id"] == r.run_id]
        seen, held = g[g["shift"] == CLEAN_SHIFT], g[g["shift"] == HOLDOUT_SHIFT]
        n_seen, n_held = int(seen["n"].sum()), int(held["n"].sum())
        h = cfg["holdout"]
        rows.append(
            {
                "run_id": r.run_id,
                "model": r.model_spec,
                "protocol": h.get("protocol"),
                "held_out": h.get("held_out"),
                "seed": h.get("seed"),
                "n_train": h.get("n_train"),
                "n_seen": n_seen,
                "seen_top1": int(seen["n_correct"].sum()) / n_seen if n_seen else np.nan,
                "n_held": n_held,
                "held_top1": int(held["n_correct"].sum()) / n_held if n_held else np.nan,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "model",
            "protocol",
            "held_out",
            "seed",
            "n_train",
            "n_seen",
            "seen_top1",
            "n_held",
            "held_top1",
        ],
    )


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
