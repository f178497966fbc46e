"""Planning a run on an exported set (``robustlab export``'s Hugging Face dataset or
WebDataset shards, or a Hugging Face copy saved with ``save_to_disk``): the same samples,
labels, cells and pixels as a run on the folder it came from, read from the shards.

Each row says how it is read (:mod:`robustlab.data.exported`): a source photo is prepared
by the protocol exactly as a source file is (``pipeline.load_prepared`` on its bytes), a
generated file is decoded as it is (``pipeline.decode``), a mined file is read as a
published cell file. The rows' protocol is the one the folder's own run uses, its view
included, so a model sees the same tensors; the suite picks the cells as it does for the
folder (each shift at its own levels, or those asked for). Every image's bytes are checked
against the row's content hash as they are read.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, as_cells, cells_record, level_key
from robustlab.errors import CellSkipped, InputError
from robustlab.execution.plan import RunPlan
from robustlab.execution.tasks import CellImages
from robustlab.store import CLEAN_CELL, CLEAN_SHIFT
from robustlab.workflows.evaluate.generated import generated_hint, held_levels
from robustlab.workflows.evaluate.labels import labels_for
from robustlab.workflows.evaluate.record import (
    PlannedRun,
    base_identity,
    describe_model,
    label_space,
    protocol_record,
)

if TYPE_CHECKING:
    from robustlab.data.exported import ExportedSet
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import EvaluateRequest

SOURCE = "exported"


def _one(rows, what: str, get) -> Any:
    values = {json.dumps(get(r), sort_keys=True) for r in rows}
    if len(values) > 1:
        raise InputError(
            f"the exported rows name more than one {what} ({', '.join(sorted(values)[:3])})",
            hint="evaluate each export on its own",
        )
    return get(rows[0])


def _protocol(rows, override, root):
    """The rows' protocol, or the user's override of its view (the files fix the frame
    of every row that is not a source photo)."""
    from robustlab.suites import VIEW_FIELDS, Protocol, parse_protocol

    stored = _one(rows, "protocol", lambda r: r.robustlab.get("protocol") or {})
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(**{k: v for k, v in stored.items() if k in fields})
    if override is None:
        return protocol
    new = parse_protocol(override, protocol)
    framed = any(r.read != "source" for r in rows)
    frame = ("resize", "crop", "interpolation", "frame", "format", "jpeg_quality")
    changed = [k for k in frame if getattr(new, k) != getattr(protocol, k)]
    if framed and changed:
        keep = ",".join(f"{k}={getattr(new, k)}" for k in VIEW_FIELDS)
        raise InputError(
            f"{root}'s images were made with "
            f"{', '.join(f'{k}={getattr(protocol, k)}' for k in changed)}; --protocol can "
            "change only how the model sees them",
            hint=f"pass --protocol {keep}",
        )
    return new


def _cells(rows, request: EvaluateRequest, root):
    """(suite or None, the run's cells): the clean cell when the set has its photos, then
    the suite's cells the rows hold (each shift at its own levels), or those asked for."""
    want = request.cells
    suite_name = _one(rows, "suite", lambda r: r.suite)
    available = {(r.shift, r.level) for r in rows if r.shift != CLEAN_SHIFT}
    clean = [CLEAN_CELL] if any(r.shift == CLEAN_SHIFT for r in rows) else []
    if want.suite is not None and str(getattr(want.suite, "name", want.suite)) != suite_name:
        raise InputError(
            f"{root} is an export of suite {suite_name!r}: its rows are the cells",
            hint="leave out --suite",
        )
    if suite_name is None or not available:
        if want.shifts or want.levels:
            raise InputError(f"{root} holds no shifted images", hint="leave out --shift/--level")
        return None, clean
    from robustlab.suites import get_suite

    suite = get_suite(suite_name)
    if want.shifts or want.levels:
        suite = suite.select(want.shifts or None, want.levels or None).suite
        missing = [c.folder for c in suite.cells() if c.stored not in available]
        if missing:
            raise InputError(
                f"{root} holds no images for {', '.join(missing[:6])}"
                + (f" and {len(missing) - 6} more" if len(missing) > 6 else ""),
                hint=generated_hint(available),
            )
    else:
        held: dict[str, Sequence[Any]] = dict(held_levels(available))
        suite = suite.select_levels(held).suite
    return suite, [*clean, *suite.cells()]


def exported_plan(request: EvaluateRequest, root: Path, export: ExportedSet) -> PlannedRun:
    """:func:`~robustlab.workflows.evaluate.plan.make_plan` for an exported set.

    Raises:
        InputError: the set is empty, mixes exports, gives one source image two classes or
            a row twice, or the request asks for cells it does not hold.
    """
    from robustlab.data.exported import ShardReader
    from robustlab.data.sources import Sample, SampleList

    rows = export.rows
    if not rows:
        raise InputError(f"{root} holds an exported set without rows")
    if request.data.masks or request.data.labels_csv:
        raise InputError(
            f"{root} is an exported set: its rows carry the labels and the pixels",
            hint="leave out --labels and --masks",
        )
    space = label_space(
        request.data.label_space or _one(rows, "label space", lambda r: r.label_space)
    )
    protocol = _protocol(rows, request.cells.protocol, root)
    suite, cells = _cells(rows, request, root)
    index: dict[tuple[str, str, str], tuple] = {}
    classes: dict[str, str | None] = {}
    for r, (shard, where) in zip(rows, export.where):
        key = (r.source_id, r.shift, r.level)
        if key in index:
            raise InputError(f"{root} holds {r.source_id} at {r.shift}/{r.level} twice")
        index[key] = (shard, where, r.content_hash, r.read)
        if classes.setdefault(r.source_id, r.class_name) != r.class_name:
            raise InputError(
                f"{root} gives the rows of {r.source_id} different classes "
                f"({classes[r.source_id]}, {r.class_name})"
            )
    samples = SampleList(
        [Sample(id=sid, path=root / sid, class_name=classes[sid]) for sid in sorted(classes)],
        skipped=export.skipped,
    )
    labels = labels_for(samples, space)
    skips = {
        (str(d.get("id")), str(d.get("shift")), level_key(d.get("level"))): str(d.get("reason"))
        for d in (export.record or {}).get("skipped") or []
        if isinstance(d, dict)
    }
    images = ExportImages(ShardReader(root, export.kind, export.shards), index, protocol, skips)
    fingerprint = _fingerprint(samples, labels, index)
    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=cells,
        identity=ExportedIdentity(root, export, rows[0], fingerprint, request.cells.protocol),
        suite=suite,
    )


def _fingerprint(samples, labels, index) -> str:
    """Every row of the set by content (its recorded hash), per sample: a re-export of
    other images is another run; asking for more of its cells extends the same one."""
    from robustlab.records.identity import data_fingerprint

    by_sample: dict[str, list] = {}
    for (sid, sh, lv), (_, _, digest, read) in sorted(index.items()):
        by_sample.setdefault(sid, []).append(f"{Cell(sh, lv).folder}:{read}:{digest}")
    return data_fingerprint(
        (s.id, s.class_name, lab, *by_sample.get(s.id, ())) for s, lab in zip(samples, labels)
    )


@dataclasses.dataclass(frozen=True)
class ExportedIdentity:
    """What an exported set's run record is made of besides the plan and the model.

    Attributes:
        root: The set's folder.
        export: The :class:`robustlab.data.exported.ExportedSet` read from it.
        first: Its first row (every row names the same suite, seed and origin).
        fingerprint: Every row by its recorded content hash (:func:`_fingerprint`).
        override: The user's ``--protocol`` (None: the rows' own).
    """

    root: Path
    export: ExportedSet
    first: Any
    fingerprint: str
    override: Any

    def record(self, run: PlannedRun, model, defence: dict | None) -> RunRecord:
        from robustlab.records.identity import (
            fields_of,
            inference_identity,
            make_record,
            model_precision,
        )

        first, suite, protocol = self.first, run.suite, run.protocol
        identity = base_identity(
            model,
            suite=suite.name if suite is not None else first.suite,
            suite_version=first.robustlab.get("suite_version"),
            fingerprint=self.fingerprint,
            space=run.space,
            seed=int(first.seed or 0),
            preprocessing={
                "model": fields_of(getattr(model, "undefended", model).preprocessing),
                "protocol": protocol.describe(),
            },
            source=SOURCE,
        )
        identity["precision"] = model_precision(model)
        if defence:
            identity["defence"] = defence
        identity.update(inference_identity(model))
        rec = self.export.record or {}
        return make_record(
            identity,
            data_root=self.root,
            config={
                "source": SOURCE,
                "exported": {
                    "kind": self.export.kind,
                    "export_id": rec.get("export_id"),
                    "origin": first.robustlab.get("origin"),
                    "data": rec.get("data"),
                },
                "model": describe_model(model),
                "cells": cells_record(run.cells),
                "protocol": protocol_record(protocol, self.override),
                **({"defence": defence} if defence else {}),
                "precision": identity["precision"],
                **inference_identity(model),
            },
            n_samples=len(run.samples),
            skipped=run.samples.skipped,
        )


class ExportImages(CellImages):
    """The cells of an exported set, read from its shards.

    Args:
        reader: The set's :class:`robustlab.data.exported.ShardReader`.
        index: ``(source id, shift, level) -> (shard, locator, content hash, read rule)``.
        protocol: The rows' protocol (frame for source photos and mined files; the view).
        skips: Why the export has no image for a cell (its record's ``skipped``).
    """

    def __init__(self, reader, index: dict, protocol, skips: dict | None = None):
        super().__init__(protocol, 0)
        self.reader = reader
        self.index = index
        self.skips = dict(skips or {})

    def _missing(self, sample, shift: str, level: Any) -> CellSkipped:
        why = self.skips.get((sample.id, shift, level_key(level)))
        return CellSkipped(why or "no image for this cell in the exported set")

    def _bytes(self, entry) -> bytes:
        from robustlab.files.hashes import digest

        shard, where, want, _ = entry
        try:
            data = self.reader.read(shard, where)
        except OSError as exc:
            raise CellSkipped(f"cannot read the exported image: {exc}") from None
        got = digest(data)
        if got != want:
            raise CellSkipped(
                f"the exported image's content is not what export wrote (BLAKE2b "
                f"{got[:12]}..., recorded {want[:12]}...): export the folder again"
            )
        return data

    def _file(self, data: bytes):
        """A mined file's pixels, as a published cell file is read."""
        from robustlab.data.images import read_image
        from robustlab.pipeline import prepare

        return prepare(read_image(io.BytesIO(data)).rgb, self.protocol)

    def base(self, sample):
        """The clean photo: a source photo prepared as ``load_prepared`` prepares a source
        file (an unreadable one fails the sample, as it does there); a mined clean file as
        published files are (an unreadable one costs only the clean cell); None without one."""
        from robustlab.data.images import ImageError
        from robustlab.pipeline import Prepared, load_prepared

        entry = self.index.get((sample.id, CLEAN_SHIFT, "0"))
        if entry is None:
            return None
        data = self._bytes(entry)
        if entry[3] == "source":
            # load_prepared reads sample.path with read_image, which takes a stream too.
            stream = dataclasses.replace(sample, path=io.BytesIO(data), mask_path=None, bbox=None)
            return load_prepared(stream, self.protocol)
        try:
            return Prepared(self._file(data))
        except ImageError as exc:
            return exc

    def cell(self, sample, prepared, shift: str, level: Any, attributes: dict | None = None):
        from robustlab import pipeline

        if shift == CLEAN_SHIFT:
            if prepared is None:
                raise self._missing(sample, shift, level)
            if isinstance(prepared, Exception):
                raise prepared
            return prepared.rgb
        entry = self.index.get((sample.id, shift, level_key(level)))
        if entry is None:
            raise self._missing(sample, shift, level)
        data = self._bytes(entry)
        img = pipeline.decode(data) if entry[3] == "stored" else self._file(data)
        return img[..., :3] if img.shape[2] == 4 else img


def store_exported_attributes(store, plan: RunPlan) -> None:
    """What each exported edit achieved (its rows' ``attributes``) into the store, as a
    generated folder's ``attributes.csv`` is: the cells of this run only."""
    from robustlab.data.exported import open_export

    root = plan.record.data_root
    export = open_export(Path(root)) if root else None
    if export is None:
        return
    cells = {c.stored for c in as_cells(plan.cells) if c.shift != CLEAN_SHIFT}
    ids = {s.id for s in plan.samples}
    rows = [
        {"sample_id": r.source_id, "shift": r.shift, "level": r.level, **r.attributes}
        for r in export.rows
        if r.attributes and (r.shift, r.level) in cells and r.source_id in ids
    ]
    if rows:
        store.write_attributes(plan.record.run_id, rows)


__all__ = ["ExportImages", "exported_plan", "store_exported_attributes"]
