"""The report's view of hard-image mining: the surrogate curve, transfer, and hard examples.

For each stored mining (``robustlab mine``) the surrogates' stored predictions give the
correctness matrix (candidates x surrogates), from which :mod:`robustlab.workflows.imagenet_d.mine.analysis`
computes ImageNet-D's two claims: the kept fraction as the number of surrogates grows
(averaged over every subset of that size, so model order does not matter) and, for every
other selected run on the same candidates (a *held-out* model), its accuracy on the kept
set against random subsets of the same size. Nothing is re-evaluated.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from robustlab.workflows.report.gather import ReportData, class_namer
from robustlab.store import Store

# Hard examples shown per mining (most surrogates wrong first, one per class first).
N_EXAMPLES = 12
THUMB_PX = 160


@dataclass
class MiningView:
    """One mining's curve, transfer rows and examples, ready to render."""

    mining_id: str
    surrogates: list[str]
    curve: pd.DataFrame  # n, subsets, kept_fraction, kept + one column per held-out
    heldout_all: dict[str, float]  # held-out label -> accuracy on every candidate
    transfer: list[dict[str, Any]] = field(default_factory=list)
    examples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _candidate_key(record: dict[str, Any]) -> tuple[str, str]:
    config = record.get("config") or {}
    return str(record.get("data_root")), str(config.get("generated_root") or "")


def mining_views(data: ReportData, *, seed: int = 0) -> list[MiningView]:
    """A :class:`MiningView` per stored mining whose surrogate runs are still stored."""
    from robustlab.workflows.imagenet_d.mine.analysis import (
        stored_correctness,
        surrogate_curve,
        transfer,
    )
    from robustlab.store.mining import mined_images, mining_runs

    store = Store(data.db)
    views = []
    for m in mining_runs(store).to_dict("records"):
        run_ids, names = list(m["run_ids"]), [str(s) for s in m["surrogates"]]
        stored = store.runs(run_ids)
        if len(stored) != len(run_ids) or len(names) != len(run_ids):
            continue  # a surrogate run was deleted since (or a hand-written record)
        cols = [f"s{i}" for i in range(len(names))]
        include_clean = bool((m.get("config") or {}).get("include_clean"))
        table, correct = stored_correctness(store, run_ids, cols, include_clean=include_clean)
        first = stored.set_index("run_id").loc[run_ids[0]].to_dict()
        key = _candidate_key(first)
        heldout = [
            r
            for r in data.runs
            if r.run_id not in run_ids
            and r.record.get("model_spec") not in names
            and _candidate_key(r.record) == key
        ]
        curve = pd.DataFrame(surrogate_curve(correct, None))[
            ["n", "subsets", "kept_fraction", "kept"]
        ]
        view = MiningView(str(m["mining_id"])[:8], names, curve, {})
        kept = correct.sum(axis=1) <= correct.shape[1] - int(m["k"])  # at least k wrong
        idx = pd.MultiIndex.from_frame(table[["sample_id", "shift", "level"]].astype(str))
        for r in heldout:
            p = store.predictions([r.run_id], columns=["sample_id", "shift", "level", "correct"])
            p = p.astype({"sample_id": str, "shift": str, "level": str}).set_index(
                ["sample_id", "shift", "level"]
            )["correct"]
            right = p.reindex(idx)
            if right.isna().any():
                view.notes.append(
                    f"{r.label} lacks {int(right.isna().sum())} of the candidates; "
                    "not used as a held-out model"
                )
                continue
            right = right.to_numpy(bool)
            rows = surrogate_curve(correct, right)
            view.curve[r.label] = [row["heldout_acc"] for row in rows]
            view.heldout_all[r.label] = float(right.mean())
            if 0 < kept.sum() < len(kept):
                view.transfer.append(
                    {"heldout": r.label, **transfer(kept, right, draws=2000, rng=seed)}
                )
        roots = [m.get("data_root"), *_candidate_key(first)]
        view.examples = _examples(mined_images(store, m["mining_id"]), names, first, roots)
        views.append(view)
    return views


def _examples(
    images: pd.DataFrame, names: list[str], first_run: dict[str, Any], roots: list
) -> list[dict]:
    """Up to :data:`N_EXAMPLES` kept images, one per class first, with each guess named.

    ``roots``: the folders the mining read (its candidates, the surrogate runs' data and
    generated folders); an example's ``path`` is kept only when it is a file inside one
    of them (the link rule of :mod:`robustlab.files.safety`), so a database naming any other
    file never puts that file's pixels in a report."""
    if images.empty:
        return []
    namer = class_namer(first_run.get("label_space"))
    wide = class_namer("imagenet1k")
    images = images.sort_values(
        ["n_wrong", "class_name", "sample_id"], ascending=[False, True, True]
    )
    first = images.drop_duplicates("class_name")
    chosen = pd.concat([first, images.drop(first.index)]).head(N_EXAMPLES)
    out = []
    for rec in chosen.to_dict("records"):
        guesses = [int(g) for g in (rec["top1_ids"] if rec["top1_ids"] is not None else [])]
        named = [(wide if namer.size and g >= namer.size else namer)(g) for g in guesses]
        out.append(
            {
                "sample_id": rec["sample_id"],
                "cell": f"{rec['shift']}/{rec['level']}",
                "class_name": namer(rec["label"])
                if rec["label"] is not None
                else str(rec["class_name"]),
                "path": rec["path"],
                "readable": _inside_any(rec["path"], roots),
                "guesses": list(zip(names, named)),
            }
        )
    return out


def _inside_any(path: Any, roots: list) -> bool:
    """Whether ``path`` is an existing regular file inside one of ``roots`` (real paths)."""
    from robustlab.files.safety import outside

    if not path or not os.path.lexists(str(path)):
        return False
    return any(root and not outside(str(root), str(path)) for root in roots)


def thumbnail(path: str | Path) -> tuple[bytes, str] | None:
    """A JPEG thumbnail (longest side :data:`THUMB_PX`) of an image file, None if unreadable.

    Decoded by the one image reader (:func:`robustlab.data.images.read_image`), so a
    decompression bomb or a lying header is refused before any pixel."""
    from PIL import Image

    from robustlab.data.images import ImageError, read_image

    try:
        img = Image.fromarray(read_image(path).rgb)
        img.thumbnail((THUMB_PX, THUMB_PX))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=88)
        return buf.getvalue(), "image/jpeg"
    except (OSError, ImageError):
        return None


def curve_plot(view: MiningView) -> bytes:
    """Kept fraction and held-out accuracy on the kept set against the number of surrogates."""
    from robustlab.workflows.report.plots import _figure, _style, to_png

    held = [c for c in view.curve.columns if c not in ("n", "subsets", "kept_fraction", "kept")]
    fig = _figure(7.2 if held else 3.8, 2.8)
    axes = fig.subplots(1, 2 if held else 1, squeeze=False)[0]
    ax = axes[0]
    ax.plot(view.curve["n"], 100 * view.curve["kept_fraction"], **_style(0), lw=1.6)
    ax.set_xlabel("surrogates (all must be wrong)", fontsize=9)
    ax.set_ylabel("kept (% of candidates)", fontsize=9)
    ax.set_title("kept fraction", fontsize=10)
    for a in axes:
        a.set_xticks(list(view.curve["n"]))
        a.grid(alpha=0.3)
        a.tick_params(labelsize=8)
    if held:
        ax = axes[1]
        for i, name in enumerate(held):
            st = _style(i + 1)
            ax.plot(view.curve["n"], 100 * view.curve[name], label=name, lw=1.6, **st)
            ax.axhline(100 * view.heldout_all[name], color=st["color"], ls="--", lw=1)
        ax.set_ylim(-2, 102)
        ax.set_xlabel("surrogates (all must be wrong)", fontsize=9)
        ax.set_ylabel("held-out top-1 on kept (%)", fontsize=9)
        ax.set_title("held-out models (dashed: on all candidates)", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return to_png(fig)


__all__ = ["MiningView", "mining_views", "curve_plot", "thumbnail"]
