"""The example image grid: one sample, clean and under every stored cell, with each run's
top prediction.

The pictures are re-rendered, not stored: the run record holds the data root, the seed and
the protocol, and :class:`robustlab.execution.tasks.CellImages` (the class the runner itself
uses, built on :mod:`robustlab.pipeline`) turns them back into exactly the pixels the model
saw. When the data root cannot be read any more the grid is skipped with a note.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.cells import Cell, level_key, level_named
from robustlab.errors import InputError, MissingResourceError
from robustlab.workflows.report.gather import ReportData, class_namer, run_namer
from robustlab.workflows.report.runs import RunView
from robustlab.store import CLEAN_SHIFT, Store

log = logging.getLogger(__name__)

# Above this many pictures the grid is embedded as JPEG (q90) instead of lossless PNG.
PNG_LIMIT = 24
# Example samples per group of runs: as many as fit in about this many pictures, at most
# MAX_SAMPLES (an ImageNet-C run's 76 cells give one sample, a scene suite's 15 give three).
PICTURE_BUDGET = 80
MAX_SAMPLES = 3
# Pictures on the whole page, at most: each group of runs (data root, seed, protocol) has
# grids of its own, and ten full ImageNet-C runs over four seeds drew four grids of 76
# pictures (6.5 MB of the 10.6 MB page). A group whose PICTURE_BUDGET would take the page
# past this is named in a note instead (selecting its runs with --run draws it).
PAGE_PICTURES = 2 * PICTURE_BUDGET
# A mask covering this share of the image makes background and object changes both visible.
MASK_SHARE = (0.10, 0.60)
# Shifts with a single stored level share rows (per family) of at most this many pictures.
ROW_WIDTH = 6
# Candidates whose masks are read when choosing examples (the best-covered by cells first).
MASK_CANDIDATES = 60
# Samples scored when choosing examples, at most: spread evenly over the sorted ids, so
# that scoring ten full ImageNet-C runs (38 M predictions, 50,000 images) reads only the
# rows of these (a pass over every image's cells took 29 s and 0.8 GB for three runs).
SCORED_SAMPLES = 2_000


@dataclass
class Prediction:
    label: str  # run label
    top1: str  # predicted class name
    prob: float
    correct: bool


@dataclass
class GridCell:
    shift: str
    level: str
    image: np.ndarray | None = None
    error: str = ""
    predictions: list[Prediction] = field(default_factory=list)
    caption: str = ""


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

    found = level_named(level_key(level), get_shift(shift).levels)
    if found is not None:
        return found
    raise InputError(f"{shift} has no level {level!r} any more")


def _group_key(record: dict[str, Any]) -> str:
    config = record.get("config") or {}
    return json.dumps(
        {
            "root": record.get("data_root"),
            "seed": int(record.get("seed") or 0),
            "protocol": (record.get("preprocessing") or {}).get("protocol"),
            "generated": config.get("generated_root") or "",
            "labels_csv": config.get("labels_csv"),
            "masks": config.get("masks"),
        },
        sort_keys=True,
        default=str,
    )


def unreadable_root(record: dict[str, Any]) -> str | None:
    """Why a run's images cannot be re-rendered (its data root is gone), or None."""
    root = Path(str(record.get("data_root") or ""))
    if not record.get("data_root") or not root.is_dir():
        return f"data root {root} is not readable"
    return None


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
    from robustlab.execution.tasks import CellImages
    from robustlab.shifts.registry import get_shift

    root = Path(str(record.get("data_root") or ""))
    why = unreadable_root(record)
    if why:
        raise InputError(why)
    config = record.get("config") or {}
    if config.get("source") == "imagenet-e-archive":
        return _render_archive_cells(root, sample_id, cells)
    if config.get("source") == "published":
        return _render_published_cells(root, config, sample_id, cells)
    if config.get("source") == "mined":
        return _render_mined_cells(root, config, sample_id, cells)
    if config.get("source") == "exported":
        return _render_exported_cells(root, config, sample_id, cells)
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
    images = CellImages(
        protocol_of(record),
        int(record.get("seed") or 0),
        generated_root=generated,
        donors=samples if needs_donors else None,
        with_mask=needs_mask,
        expected=_generated_digests(generated) if generated else None,
    )
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


@functools.lru_cache(maxsize=4)
def _published_listing(root: Path, name: str):
    """A published folder's listing, once per report: a grid renders several samples of
    one run, and listing ImageNet-C's 3.75 million files takes about a minute."""
    from robustlab.data.published import LAYOUTS, read_published

    return read_published(root, LAYOUTS[name])


def _cells(images, sample, base, cells) -> tuple[dict, dict]:
    """Each ``(shift, level)`` cell of ``sample`` read back by ``images`` (a stored
    layout's reader), and the reason for each that cannot be."""
    out, errors = {}, {}
    for shift, level in cells:
        try:
            out[(shift, level)] = images.cell(sample, base, shift, level)
        except (OSError, ValueError) as exc:
            errors[(shift, level)] = str(getattr(exc, "reason", exc))
    return out, errors


def _render_exported_cells(root: Path, config: dict, sample_id: str, cells):
    """The report grid's pixels of one sample of a run on an exported set."""
    from robustlab.data.exported import ShardReader, open_export
    from robustlab.data.sources import Sample
    from robustlab.suites import Protocol
    from robustlab.workflows.evaluate.exported import ExportImages

    export = open_export(root)
    if export is None:
        raise InputError(f"{root} no longer holds an exported set")
    index = {
        (r.source_id, r.shift, r.level): (shard, where, r.content_hash, r.read)
        for r, (shard, where) in zip(export.rows, export.where)
    }
    row = next((r for r in export.rows if r.source_id == sample_id), None)
    if row is None:
        raise InputError(f"{root} no longer holds sample {sample_id}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    stored = config.get("protocol") or {}
    protocol = Protocol(**{k: v for k, v in stored.items() if k in fields})
    images = ExportImages(ShardReader(root, export.kind, export.shards), index, protocol)
    sample = Sample(id=sample_id, path=root / sample_id, class_name=row.class_name)
    try:
        base = images.base(sample)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {sample_id}: {getattr(exc, 'reason', exc)}") from None
    return _cells(images, sample, base, cells)


def _render_published_cells(root: Path, config: dict, sample_id: str, cells):
    """:func:`render_cells` for a run on a published benchmark folder: its files as read."""
    from robustlab.data.published import LAYOUTS
    from robustlab.execution.tasks import PublishedImages
    from robustlab.suites import Protocol

    layout = LAYOUTS.get(str((config.get("published") or {}).get("layout")))
    if layout is None:
        raise InputError(f"the run record of {root} names no published layout robustlab knows")
    if layout.name == "cifar-10-c":
        return _render_npy_cells(root, layout, sample_id, cells)
    try:
        pub = _published_listing(root, layout.name)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the {layout.title} folder {root}: {exc}") from None
    sample = next((s for s in pub.samples if s.id == sample_id), None)
    if sample is None:
        raise InputError(f"data root {root} no longer holds sample {sample_id}")
    protocol = Protocol(**{"format": "png", **layout.protocol})
    images = PublishedImages(root, pub.folders, pub.clean, pub.names, protocol)
    base = images.base(sample)
    return _cells(images, sample, base, cells)


def _render_npy_cells(root: Path, layout, sample_id: str, cells):
    """:func:`render_cells` for a run on a CIFAR-10-C style release: its arrays' rows."""
    from robustlab.data.release_npy import open_release
    from robustlab.data.sources import Sample
    from robustlab.execution.tasks import NpyImages
    from robustlab.suites import Protocol

    try:
        rel = open_release(root)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the {layout.title} folder {root}: {exc}") from None
    if not sample_id.isdigit() or int(sample_id) >= rel.n:
        raise InputError(f"data root {root} no longer holds sample {sample_id}")
    protocol = Protocol(**{"format": "png", **layout.protocol})
    images = NpyImages(root, {c: f.file for c, f in rel.files.items()}, rel.n, protocol)
    sample = Sample(id=sample_id, path=root / "labels.npy", class_name=None)
    return _cells(images, sample, None, cells)


def _generated_digests(root: str):
    """The hashes generate recorded for a generated folder's files (the grid shows a file
    only when it is what generate wrote, as the run scored it); None for a folder from
    before hashes were recorded (its files are shown as they are)."""
    from robustlab.files.hashes import records_hashes
    from robustlab.records.manifest import read_generated

    manifest = read_generated(Path(root))
    if manifest is None or not records_hashes(manifest):
        return None
    return _recorded(root, str(manifest.get("updated_at")))


@functools.lru_cache(maxsize=4)
def _recorded(root: str, updated_at: str):
    """Read once per report and state of the folder: a grid renders several samples."""
    from robustlab.files.hashes import recorded_digests
    from robustlab.records.manifest import read_generated

    manifest = read_generated(Path(root)) or {}
    cells = [(c.get("shift"), level_key(c.get("level"))) for c in manifest.get("cells") or []]
    return recorded_digests(Path(root), manifest, cells)


def _render_mined_cells(root: Path, config: dict, sample_id: str, cells):
    """:func:`render_cells` for a run on a mined subset: each listed file as its cell."""
    from robustlab.data.sources import discover
    from robustlab.suites import Protocol
    from robustlab.workflows.evaluate.mined import MinedImages, cell_of

    try:
        listed = discover(root, labels_csv=config.get("labels_csv"))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot list the mined subset {root}: {exc}") from None
    present = {(sid, sh, level_key(lv)) for sid, sh, lv in (cell_of(s.id) for s in listed)}
    if not any(sid == sample_id for sid, _, _ in present):
        raise InputError(f"data root {root} no longer holds sample {sample_id}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(**{k: v for k, v in (config.get("protocol") or {}).items() if k in fields})
    images = MinedImages(root, [(sh, lv) for sh, lv in cells], present, protocol)
    sample = next(s for s in listed if cell_of(s.id)[0] == sample_id)
    sample = dataclasses.replace(sample, id=sample_id, path=root / sample_id)
    base = images.base(sample)
    return _cells(images, sample, base, cells)


def _render_archive_cells(root: Path, sample_id: str, cells: list[tuple[str, str]]):
    """:func:`render_cells` for a run on the published ImageNet-E archive: its files as they are."""
    from robustlab.data.imagenet_e import read_archive
    from robustlab.execution.tasks import ArchiveImages

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
    return _cells(images, sample, base, cells)


def pick_sample(store: Store, run_ids: list[str]) -> str | None:
    """The first of :func:`pick_samples` (no mask information)."""
    picked = pick_samples(store, run_ids, k=1)
    return picked[0] if picked else None


def _sample_scores(store: Store, run_ids: list[str]):
    """Per sample: cells stored, cells where the runs disagree, wrong cells, clean correct;
    for at most :data:`SCORED_SAMPLES` samples, every k-th of the sorted ids when the runs
    hold more."""
    import pyarrow as pa

    marks = ", ".join("?" for _ in run_ids)
    with store.connect(read_only=True) as con:
        ids = con.execute(
            f"SELECT DISTINCT sample_id FROM predictions WHERE run_id IN ({marks}) "
            "ORDER BY sample_id",
            list(run_ids),
        ).fetchnumpy()["sample_id"]
        step = -(-len(ids) // SCORED_SAMPLES)
        join = ""
        if step > 1:
            con.register(
                "scored", pa.table({"sample_id": pa.array(list(ids[::step]), pa.string())})
            )
            join = "JOIN scored USING (sample_id)"
        return con.execute(
            f"""WITH cell AS (
                  SELECT sample_id, shift, level, any_value(label) AS label,
                         bool_or(correct) AND NOT bool_and(correct) AS disagree,
                         bool_or(NOT correct) AS wrong, bool_and(correct) AS all_right
                  FROM predictions {join} WHERE run_id IN ({marks})
                  GROUP BY sample_id, shift, level)
                SELECT sample_id, any_value(label) AS label, count(*) AS n_cells,
                       count(*) FILTER (WHERE disagree) AS n_disagree,
                       count(*) FILTER (WHERE wrong AND shift <> 'clean') AS n_wrong,
                       bool_or(shift = 'clean' AND all_right) AS clean_ok
                FROM cell GROUP BY sample_id""",
            list(run_ids),
        ).df()


def mask_shares(record: dict[str, Any], sample_ids: list[str]) -> dict[str, float]:
    """Foreground share of each sample's mask, for runs that used masks ({} otherwise, or
    for samples whose mask cannot be read)."""
    from robustlab.data.sources import discover
    from robustlab.masks.io import load_mask

    config = record.get("config") or {}
    root = record.get("data_root")
    if not config.get("masks") or not root or not Path(str(root)).is_dir():
        return {}
    try:
        samples = discover(
            Path(str(root)), labels_csv=config.get("labels_csv"), masks=config.get("masks")
        )
    except (OSError, ValueError):
        return {}
    by_id = {s.id: s for s in samples}
    out = {}
    for sid in sample_ids:
        s = by_id.get(sid)
        if s is None or s.mask_path is None:
            continue
        try:
            out[sid] = float(load_mask(s.mask_path).mean())
        except ValueError:
            continue
    return out


def pick_samples(
    store: Store,
    run_ids: list[str],
    *,
    k: int = MAX_SAMPLES,
    budget: int | None = None,
    record: dict[str, Any] | None = None,
) -> list[str]:
    """Up to ``k`` informative example samples, deterministic, of different classes
    (fewer when ``budget`` pictures cannot hold ``k`` samples' cells; at least one).

    Among the samples stored in the most cells: a mask covering 10-60 % of the picture
    (when the runs used masks: background and object changes are both visible); then the
    cells where the runs disagree (several runs) or a balanced mix of right and wrong
    shifted cells that starts from a correct clean prediction (one run); then the
    smallest id. Each pick must show a class not picked yet, unless no other is left.
    """
    scores = _sample_scores(store, run_ids)
    if scores.empty:
        return []
    n_cells = int(scores["n_cells"].max())
    scores = scores[scores["n_cells"] == n_cells].copy()
    if budget is not None:
        k = max(1, min(k, budget // max(1, n_cells)))
    scores["balance"] = np.minimum(scores["n_wrong"], scores["n_cells"] - 1 - scores["n_wrong"])
    scores = scores.sort_values(
        ["n_disagree", "clean_ok", "balance", "sample_id"], ascending=[False, False, False, True]
    )
    if record is not None:
        shares = mask_shares(record, list(scores["sample_id"][:MASK_CANDIDATES]))
        lo, hi = MASK_SHARE
        scores["mask_ok"] = [lo <= shares.get(s, -1.0) <= hi for s in scores["sample_id"]]
        scores = scores.sort_values("mask_ok", ascending=False, kind="stable")
    picked, classes = [], set()
    for rec in scores.itertuples(index=False):
        if len(picked) == k:
            break
        if rec.label not in classes:
            picked.append(str(rec.sample_id))
            classes.add(rec.label)
    for sid in scores["sample_id"]:  # fewer classes than k: fill with the next best
        if len(picked) == k:
            break
        if str(sid) not in picked:
            picked.append(str(sid))
    return picked


def _predictions(store: Store, run_ids: list[str], sample_id: str):
    with store.connect(read_only=True) as con:
        return con.execute(
            f"SELECT run_id, shift, level, label, top5_ids, top5_probs, correct FROM predictions "
            f"WHERE sample_id = ? AND run_id IN ({', '.join('?' for _ in run_ids)})",
            [sample_id, *run_ids],
        ).df()


def _namer_for(run: RunView, ids) -> Any:
    """Names for a run's predicted ids: its label space, or ImageNet-1k when the model
    predicts over 1,000 outputs mapped onto a smaller space (ImageNet-9, ImageNet-D)."""
    namer = run_namer(run.record)
    if namer.size and ids and max(ids) >= namer.size:
        return class_namer("imagenet1k")
    return namer


def layout_rows(keys: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """Rows of the grid: ``[(row label, [(shift, level, caption), ...]), ...]``.

    A shift with several levels gets a row of its own (captions ``level N``); shifts with a
    single level (background scenarios, ImageNet-E edits at one strength, the clean picture)
    share rows per family, at most :data:`ROW_WIDTH` pictures each, captioned by name, so
    that a scene suite is a compact block instead of one picture per row.
    """
    from robustlab.shifts.registry import get_shift

    levels: dict[str, list[str]] = {}
    for s, lv in keys:
        levels.setdefault(s, []).append(lv)
    rows: list[tuple[str, list[tuple[str, str, str]]]] = []
    singles: dict[str, list[tuple[str, str, str]]] = {}
    for s, lvs in levels.items():
        if s != CLEAN_SHIFT and len(lvs) > 1:
            rows.append((s.replace("_", " "), [(s, lv, f"level {lv}") for lv in lvs]))
            continue
        try:
            fam = "clean" if s == CLEAN_SHIFT else get_shift(s).family
        except ValueError:
            fam = "other"
        name = s.replace("_", " ")
        cap = name if lvs[0] in ("0", "default") else f"{name} {lvs[0]}"
        singles.setdefault(fam, []).append((s, lvs[0], cap))
    clean = singles.pop("clean", [])
    if singles and clean:  # the reference picture opens the first block of single cells
        first = next(iter(singles))
        singles = {f"clean, {first}": clean + singles.pop(first), **singles}
    elif clean:
        rows.insert(0, ("clean", clean))
    for fam, cells in singles.items():
        for i in range(0, len(cells), ROW_WIDTH):
            rows.append((fam, cells[i : i + ROW_WIDTH]))
    return rows


def build_grids(data: ReportData, *, sample_id: str | None = None) -> tuple[list[Grid], list[str]]:
    """Grids of informative samples (:func:`pick_samples`) per group of runs sharing data
    root, seed and protocol.

    Args:
        data: The gathered report data.
        sample_id: Show only this sample (default: up to :data:`MAX_SAMPLES` per group,
            fewer when the runs have many cells; see :data:`PICTURE_BUDGET`).

    Returns:
        (grids, notes): a group whose images cannot be rendered gives a note, not a grid.
    """
    from robustlab.metrics.accuracy import sort_cells

    store = Store(data.db)
    groups: dict[str, list[RunView]] = {}
    for r in data.runs:
        groups.setdefault(_group_key(r.record), []).append(r)
    grids: list[Grid] = []
    notes: list[str] = []
    for runs in groups.values():
        ids = [r.run_id for r in runs]
        names = ", ".join(r.label for r in runs)
        why = unreadable_root(runs[0].record)
        if why:  # said before the samples are scored: a pass over every run's predictions
            notes.append(f"image grid for {names} skipped: {why}")
            continue
        shown = sum(len(cells) for g in grids for _, cells in g.rows)
        if shown + PICTURE_BUDGET > PAGE_PICTURES:
            notes.append(
                f"image grid for {names} left out: the page shows {shown} pictures already "
                f"(at most {PAGE_PICTURES}); `robustlab report --run` with these runs draws it"
            )
            continue
        if sample_id is not None:
            sids = [sample_id]
        else:
            sids = pick_samples(store, ids, budget=PICTURE_BUDGET, record=runs[0].record)
        for sid in sids:
            grid, note = _grid_for(store, runs, sid, names, sort_cells)
            if grid is not None:
                grids.append(grid)
            if note:
                notes.append(note)
                if grid is None and "skipped" in note:
                    break  # the same reason holds for every sample of this group
    return grids, notes


def _grid_for(store: Store, runs: list[RunView], sid: str, names: str, sort_cells):
    """(grid or None, note or "") for one sample of one group of runs."""
    ids = [r.run_id for r in runs]
    preds = _predictions(store, ids, sid)
    if preds.empty:
        return None, f"image grid for {names}: sample {sid!r} has no predictions in these runs"
    cells = sort_cells(preds[["shift", "level"]].drop_duplicates())
    keys = [(str(s), level_key(lv)) for s, lv in zip(cells["shift"], cells["level"])]
    try:
        images, errors = render_cells(runs[0].record, sid, keys)
    except (ValueError, MissingResourceError) as exc:  # e.g. ai_bg without its inpainter
        return None, f"image grid for {names} skipped: {exc}"
    true_label = preds["label"].dropna()
    true_name = run_namer(runs[0].record)(true_label.iloc[0] if len(true_label) else None)
    order = [r.label for r in runs]
    by_key: dict[tuple[str, str], list[Prediction]] = {}
    for rec in preds.itertuples(index=False):
        run = next(r for r in runs if r.run_id == rec.run_id)
        ids_ = [int(v) for v in rec.top5_ids] if rec.top5_ids is not None else []
        namer = _namer_for(run, ids_)
        probs = list(rec.top5_probs) if rec.top5_probs is not None else []
        by_key.setdefault((rec.shift, level_key(rec.level)), []).append(
            Prediction(
                run.label,
                namer(ids_[0]) if ids_ else "?",
                float(probs[0]) if probs else float("nan"),
                bool(rec.correct),
            )
        )
    rows = [
        (
            label,
            [
                GridCell(
                    s,
                    lv,
                    images.get((s, lv)),
                    errors.get((s, lv), ""),
                    sorted(by_key.get((s, lv), []), key=lambda p: order.index(p.label)),
                    cap,
                )
                for s, lv, cap in cells_
            ],
        )
        for label, cells_ in layout_rows(keys)
    ]
    grid_notes = [f"{Cell(*c).folder}: not rendered: {why}" for c, why in errors.items()]
    return Grid(
        sid,
        true_name,
        str(runs[0].record.get("data_root")),
        int(runs[0].record.get("seed") or 0),
        order,
        rows,
        grid_notes,
    ), ""


def encode_thumb(img: np.ndarray, lossless: bool) -> tuple[bytes, str]:
    """PNG (exact pixels) or JPEG q90 bytes and their MIME type.

    PNG at zlib level 3, not ``optimize=True``: the pixels are the same, the file about 7 %
    larger and the encode about 3x faster (the report's grids were the largest share of the
    demo's report step)."""
    from PIL import Image

    buf = io.BytesIO()
    if lossless:
        Image.fromarray(img).save(buf, format="PNG", compress_level=3)
        return buf.getvalue(), "image/png"
    Image.fromarray(img).save(buf, format="JPEG", quality=90)
    return buf.getvalue(), "image/jpeg"
