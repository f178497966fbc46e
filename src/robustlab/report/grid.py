"""The example image grid: one sample, clean and under every stored cell, with each run's
top prediction.

The pictures are re-rendered, not stored: the run record holds the data root, the seed and
the protocol, and :class:`robustlab.run.tasks.CellImages` (the class the runner itself
uses, built on :mod:`robustlab.pipeline`) turns them back into exactly the pixels the model
saw. When the data root cannot be read any more the grid is skipped with a note.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import InputError, MissingResourceError
from robustlab.report.gather import ReportData, RunView, class_namer, run_namer
from robustlab.store import CLEAN_SHIFT, Store

log = logging.getLogger(__name__)

# Above this many pictures the grid is embedded as JPEG (q90) instead of lossless PNG.
PNG_LIMIT = 24


@dataclass
class Prediction:
    label: str        # run label
    top1: str         # predicted class name
    prob: float
    correct: bool


@dataclass
class GridCell:
    shift: str
    level: str
    image: np.ndarray | None = None
    error: str = ""
    predictions: list[Prediction] = field(default_factory=list)


@dataclass
class Grid:
    """One grid: a sample of one data root / seed / protocol, across the runs that share it."""

    sample_id: str
    true_class: str
    data_root: str
    seed: int
    runs: list[str]
    rows: list[tuple[str, list[GridCell]]]
    notes: list[str] = field(default_factory=list)


def protocol_of(record: dict[str, Any]):
    """The suite protocol stored with a run (``preprocessing["protocol"]``)."""
    from robustlab.suites import Protocol

    stored = (record.get("preprocessing") or {}).get("protocol") or {}
    names = {f.name for f in dataclasses.fields(Protocol)}
    return Protocol(**{k: v for k, v in stored.items() if k in names})


def registry_level(shift: str, level: str):
    """The registry's level object whose text form is the stored ``level``."""
    from robustlab.shifts.registry import get_shift

    for lv in get_shift(shift).levels:
        if str(lv) == str(level):
            return lv
    raise InputError(f"{shift} has no level {level!r} any more")


def _group_key(record: dict[str, Any]) -> str:
    config = record.get("config") or {}
    return json.dumps({
        "root": record.get("data_root"), "seed": int(record.get("seed") or 0),
        "protocol": (record.get("preprocessing") or {}).get("protocol"),
        "generated": config.get("generated_root") or "", "labels_csv": config.get("labels_csv"),
        "masks": config.get("masks"),
    }, sort_keys=True, default=str)


def render_cells(record: dict[str, Any], sample_id: str, cells: list[tuple[str, str]]):
    """The uint8 pixels of ``cells`` of one sample, as the run's model received them.

    Args:
        record: The run's ``runs`` row.
        sample_id: Sample id (path relative to the data root).
        cells: (shift, stored level) pairs; ``("clean", "0")`` is the prepared source.

    Returns:
        (images: {(shift, level): HxWx3 uint8}, errors: {(shift, level): reason}).

    Raises:
        InputError: the data root is not readable or no longer holds the sample.
    """
    from robustlab.data.sources import discover
    from robustlab.run.tasks import CellImages
    from robustlab.shifts.registry import get_shift

    root = Path(str(record.get("data_root") or ""))
    if not record.get("data_root") or not root.is_dir():
        raise InputError(f"data root {root} is not readable")
    config = record.get("config") or {}
    if config.get("source") == "imagenet-e-archive":
        return _render_archive_cells(root, sample_id, cells)
    try:
        samples = discover(root, labels_csv=config.get("labels_csv"), masks=config.get("masks"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot list data root {root}: {exc}") from None
    sample = next((s for s in samples if s.id == sample_id), None)
    if sample is None:
        raise InputError(f"data root {root} no longer holds sample {sample_id}")
    shifts, errors = [], {}
    for s, lv in cells:
        if s != CLEAN_SHIFT:
            try:
                shifts.append(get_shift(s))
            except ValueError:
                errors[(s, lv)] = f"shift {s!r} is not registered in this robustlab"
    needs_donors = any(sh.extra.get("donor_rule") for sh in shifts)
    needs_mask = any("mask" in sh.needs for sh in shifts)
    generated = config.get("generated_root") or None
    images = CellImages(protocol_of(record), int(record.get("seed") or 0), generated_root=generated,
                        donors=samples if needs_donors else None, with_mask=needs_mask)
    try:
        base = images.base(sample)
    except Exception as exc:  # noqa: BLE001 - an unreadable source only costs the grid
        raise InputError(f"cannot read {sample_id}: {getattr(exc, 'reason', exc)}") from None
    out = {}
    for shift, level in cells:
        if (shift, level) in errors:
            continue
        try:
            lv = 0 if shift == CLEAN_SHIFT else registry_level(shift, level)
            out[(shift, level)] = images.cell(sample, base, shift, lv)
        except (OSError, ValueError) as exc:
            why = str(getattr(exc, "reason", exc))
            if needs_mask and sample.mask_path is None and "mask" in why:
                why += " (the run record names no masks folder for this sample)"
            errors[(shift, level)] = why
    return out, errors


def _render_archive_cells(root: Path, sample_id: str, cells: list[tuple[str, str]]):
    """:func:`render_cells` for a run on the published ImageNet-E archive: its files as they are."""
    from robustlab.data.imagenet_e import read_archive
    from robustlab.run.tasks import ArchiveImages

    try:
        archive = read_archive(root)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the ImageNet-E archive {root}: {exc}") from None
    sample = next((s for s in archive.samples if s.id == sample_id), None)
    if sample is None:
        raise ValueError(f"the archive {root} no longer holds sample {sample_id}")
    images = ArchiveImages(root, archive.folders)
    try:
        base = images.base(sample)
    except Exception as exc:  # noqa: BLE001 - an unreadable source only costs the grid
        raise ValueError(f"cannot read {sample_id}: {getattr(exc, 'reason', exc)}") from None
    out, errors = {}, {}
    for shift, level in cells:
        try:
            out[(shift, level)] = images.cell(sample, base, shift, level)
        except (OSError, ValueError) as exc:
            errors[(shift, level)] = str(getattr(exc, "reason", exc))
    return out, errors


def pick_sample(store: Store, run_ids: list[str]) -> str | None:
    """A deterministic, informative sample: stored in the most cells, correct on clean for
    the first run when possible, then the smallest id."""
    with store.connect(read_only=True) as con:
        row = con.execute(
            "SELECT sample_id FROM predictions WHERE run_id = ? GROUP BY sample_id "
            "ORDER BY count(*) DESC, bool_or(shift = 'clean' AND correct) DESC, sample_id LIMIT 1",
            [run_ids[0]]).fetchone()
    return None if row is None else str(row[0])


def _predictions(store: Store, run_ids: list[str], sample_id: str):
    with store.connect(read_only=True) as con:
        return con.execute(
            f"SELECT run_id, shift, level, label, top5_ids, top5_probs, correct FROM predictions "
            f"WHERE sample_id = ? AND run_id IN ({', '.join('?' for _ in run_ids)})",
            [sample_id, *run_ids]).df()


def _namer_for(run: RunView, ids) -> Any:
    """Names for a run's predicted ids: its label space, or ImageNet-1k when the model
    predicts over 1,000 outputs mapped onto a smaller space (ImageNet-9, ImageNet-D)."""
    namer = run_namer(run.record)
    if namer.size and ids and max(ids) >= namer.size:
        return class_namer("imagenet1k")
    return namer


def build_grids(data: ReportData, *, sample_id: str | None = None) -> tuple[list[Grid], list[str]]:
    """One grid per group of runs sharing data root, seed and protocol.

    Args:
        data: The gathered report data.
        sample_id: Show this sample (default: :func:`pick_sample`).

    Returns:
        (grids, notes): a group whose images cannot be rendered gives a note, not a grid.
    """
    from robustlab.metrics.accuracy import sort_cells

    store = Store(data.db)
    groups: dict[str, list[RunView]] = {}
    for r in data.runs:
        groups.setdefault(_group_key(r.record), []).append(r)
    grids, notes = [], []
    for runs in groups.values():
        ids = [r.run_id for r in runs]
        names = ", ".join(r.label for r in runs)
        sid = sample_id or pick_sample(store, ids)
        if sid is None:
            continue
        preds = _predictions(store, ids, sid)
        if preds.empty:
            notes.append(f"image grid for {names}: sample {sid!r} has no predictions in these runs")
            continue
        cells = sort_cells(preds[["shift", "level"]].drop_duplicates())
        keys = [(str(s), str(lv)) for s, lv in zip(cells["shift"], cells["level"])]
        try:
            images, errors = render_cells(runs[0].record, sid, keys)
        except (ValueError, MissingResourceError) as exc:  # e.g. ai_bg without its inpainter
            notes.append(f"image grid for {names} skipped: {exc}")
            continue
        true_label = preds["label"].dropna()
        true_name = run_namer(runs[0].record)(
            true_label.iloc[0] if len(true_label) else None)
        by_key = {}
        for rec in preds.itertuples(index=False):
            run = next(r for r in runs if r.run_id == rec.run_id)
            ids_ = [int(v) for v in rec.top5_ids] if rec.top5_ids is not None else []
            namer = _namer_for(run, ids_)
            probs = list(rec.top5_probs) if rec.top5_probs is not None else []
            by_key.setdefault((rec.shift, str(rec.level)), []).append(Prediction(
                run.label, namer(ids_[0]) if ids_ else "?", float(probs[0]) if probs else float("nan"),
                bool(rec.correct)))
        rows: dict[str, list[GridCell]] = {}
        for key in keys:
            cell = GridCell(key[0], key[1], images.get(key), errors.get(key, ""),
                            sorted(by_key.get(key, []), key=lambda p: [r.label for r in runs].index(p.label)))
            rows.setdefault(key[0], []).append(cell)
        grid_notes = [f"{s}/{lv}: not rendered: {why}" for (s, lv), why in errors.items()]
        grids.append(Grid(sid, true_name, str(runs[0].record.get("data_root")),
                          int(runs[0].record.get("seed") or 0), [r.label for r in runs],
                          list(rows.items()), grid_notes))
    return grids, notes


def encode_thumb(img: np.ndarray, lossless: bool) -> tuple[bytes, str]:
    """PNG (exact pixels) or JPEG q90 bytes and their MIME type."""
    from PIL import Image

    buf = io.BytesIO()
    if lossless:
        Image.fromarray(img).save(buf, format="PNG", optimize=True)
        return buf.getvalue(), "image/png"
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    return buf.getvalue(), "image/jpeg"
