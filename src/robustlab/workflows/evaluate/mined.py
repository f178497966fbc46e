"""Planning a run on a hard subset written by ``robustlab mine`` (a folder with
``mining.json``): exactly the files its labels CSV lists (``labels.csv``, or a review's
export), each read as the cell it was mined from.

A subset mined from a generated folder holds ``<shift>/<level>/<source id>`` files: each is
that shift at that level of its source image, and is evaluated as that cell, with the
suite, protocol and label space the surrogates saw it with (``mining.json`` records them),
never as a clean image nor as a published ImageNet-C folder (whose class folders and cell
names it only looks like). A subset of clean candidates (a synthesised ImageNet-D folder,
plain photos) holds the files under their own ids: :func:`mined_plan` returns None and the
folder is read as a labelled source folder, in the label space the mining recorded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, as_cells, cells_record, level_key
from robustlab.errors import CellSkipped, InputError
from robustlab.execution.tasks import PublishedImages
from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.evaluate.labels import labels_for
from robustlab.workflows.evaluate.record import (
    PlannedRun,
    base_identity,
    describe_model,
    files_fingerprint,
    label_space,
    protocol_record,
)

if TYPE_CHECKING:
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import EvaluateRequest

RECORD = "mining.json"


def read_mining(root: Path) -> dict | None:
    """The record of a hard subset ``mine`` wrote into ``root``, or None."""
    from robustlab.records.manifest import read_record

    record = read_record(root / RECORD)
    return record if record and record.get("mining_id") else None


def cell_of(file_id: str) -> tuple[str, str, Any]:
    """``(source id, shift, level)`` of a subset's file: ``<shift>/<level>/<id>`` when its
    first folders are a registered shift and one of its levels, else the clean cell."""
    from robustlab.shifts.registry import get_shift

    parts = file_id.split("/", 2)
    if len(parts) == 3:
        try:
            levels = {level_key(lv): lv for lv in get_shift(parts[0]).levels}
        except (InputError, KeyError, ValueError):
            levels = {}
        if parts[1] in levels:
            return parts[2], parts[0], levels[parts[1]]
    return file_id, CLEAN_SHIFT, 0


def mined_plan(request: EvaluateRequest, root: Path, mining: dict) -> PlannedRun | None:
    """:func:`~robustlab.workflows.evaluate.plan.make_plan` for a hard subset of shifted
    cells (None: its files are all clean candidates, a labelled folder like any other).

    Raises:
        InputError: the subset was mined by a robustlab that did not record its protocol,
            two of a source image's listed files carry different classes, or the request
            asks for shifts, levels, a suite or masks (the files are the cells).
    """
    from robustlab.data.sources import Sample, SampleList, discover

    listed = discover(root, labels_csv=request.data.labels_csv)
    where = {s.id: cell_of(s.id) for s in listed}
    if all(sh == CLEAN_SHIFT for _, sh, _ in where.values()):
        return None
    want = request.cells
    if want.shifts or want.levels or want.suite is not None or request.data.masks:
        raise InputError(
            f"{root} is a mined subset: its files are the cells it holds",
            hint="leave out --suite, --shift, --level and --masks",
        )
    protocol = _protocol(root, mining)
    csv_name = Path(listed.labels_csv).name if listed.labels_csv else "labels.csv"
    by_source: dict[str, list[Sample]] = {}
    for s in listed:
        by_source.setdefault(where[s.id][0], []).append(s)
    samples = SampleList(
        [_source_sample(root, sid, files, csv_name) for sid, files in sorted(by_source.items())],
        skipped=listed.skipped,
        labels_csv=listed.labels_csv,
    )
    present = {(where[s.id][0], where[s.id][1], str(where[s.id][2])) for s in listed}
    cells = _cells(present, mining)
    space = label_space(request.data.label_space or mining.get("label_space") or "imagenet1k")
    labels = labels_for(samples, space)
    images = MinedImages(root, cells, present, protocol)
    paths = [[images.path(s, sh, lv) for sh, lv in cells] for s in samples]
    fingerprint = files_fingerprint(samples, labels, paths)

    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=cells,
        identity=MinedIdentity(root, mining, fingerprint),
    )


def _protocol(root: Path, mining: dict):
    """The protocol the surrogates saw the files with, their frame left out (the files
    are framed already): the view of the model's input is the same."""
    from robustlab.suites import Protocol

    seen = mining.get("protocol")
    if not isinstance(seen, dict):
        raise InputError(
            f"{root} was mined by an earlier robustlab that did not record how its cells were seen",
            hint="mine again into a new --out (the surrogates' runs resume from the database)",
        )
    fields = {f.name for f in dataclasses.fields(Protocol)}
    base = Protocol(**{k: v for k, v in seen.items() if k in fields})
    return dataclasses.replace(base, resize=None, crop=None, frame="shorter_side")


def _source_sample(root: Path, sid: str, files: list, csv_name: str):
    """The source image of a subset's files: one class, whatever cells it was kept in."""
    from robustlab.data.sources import Sample

    classes = {f.class_name for f in files}
    if len(classes) > 1:
        named = ", ".join(f"{f.id}: {f.class_name}" for f in files)
        raise InputError(
            f"{csv_name} gives the files of {sid} different classes ({named})",
            hint="give every cell of one source image the same class",
        )
    first = files[0]
    return Sample(id=sid, path=root / sid, class_name=first.class_name, label=first.label)


def _cells(present: set[tuple[str, str, str]], mining: dict) -> list[Cell]:
    """The cells the subset holds: clean first (when it holds clean candidates), then the
    shifts in the mined suite's order, each at its own levels in its table's order."""
    from robustlab.shifts.registry import get_shift
    from robustlab.suites import get_suite

    held = {(sh, lv) for _, sh, lv in present}
    try:
        order = list(get_suite(str(mining.get("suite"))).shifts)
    except (InputError, KeyError, ValueError, OSError):
        order = []
    shifts = sorted(
        {sh for sh, _ in held if sh != CLEAN_SHIFT},
        key=lambda n: (order.index(n) if n in order else len(order), n),
    )
    clean = Cell(CLEAN_SHIFT, 0)
    cells: list[Cell] = [clean] if clean.stored in held else []
    for sh in shifts:
        cells += [c for c in (Cell(sh, lv) for lv in get_shift(sh).levels) if c.stored in held]
    return cells


class MinedImages(PublishedImages):
    """The files of a mined subset: a cell's file is ``<shift>/<level>/<id>`` (the clean
    cell's: ``<id>``), read only when the labels CSV lists it (a file the review dropped
    stays on disk and is never read).

    Args:
        root: The subset's folder.
        cells: Its cells.
        present: ``(source id, shift, level as text)`` of every listed file.
        protocol: How the surrogates saw the files (no frame: the files are framed).
    """

    def __init__(self, root, cells, present, protocol):
        folders = {c.stored: c.folder for c in as_cells(cells) if c.shift != CLEAN_SHIFT}
        clean = "." if any(sh == CLEAN_SHIFT for sh, _ in cells) else None
        super().__init__(Path(root).resolve(), folders, clean, None, protocol)
        self.present = set(present)

    def path(self, sample, shift: str, level: Any) -> Path | None:
        if (sample.id, shift, level_key(level)) not in self.present:
            return None
        return super().path(sample, shift, level)

    def cell(self, sample, prepared, shift: str, level: Any, attributes: dict | None = None):
        if (sample.id, shift, level_key(level)) not in self.present:
            raise CellSkipped("not in the mined subset (not kept, or not listed in its labels CSV)")
        return super().cell(sample, prepared, shift, level, attributes)


@dataclasses.dataclass(frozen=True)
class MinedIdentity:
    """What a mined subset run's record is made of besides the plan and the model: the
    subset's folder, its ``mining.json`` and the fingerprint of its listed files."""

    root: Path
    mining: dict
    fingerprint: str

    def record(self, run: PlannedRun, model, defence: dict | None) -> RunRecord:
        """Its identity names the cells and hashes every listed file with its label (a
        relabelled or dropped file is another run)."""
        from robustlab.records.identity import (
            fields_of,
            inference_identity,
            make_record,
            model_precision,
        )

        mining, samples, cells, protocol = self.mining, run.samples, run.cells, run.protocol
        identity = base_identity(
            model,
            suite=mining.get("suite"),
            suite_version=mining.get("suite_version"),
            fingerprint=self.fingerprint,
            space=run.space,
            seed=0,
            preprocessing={
                "model": fields_of(getattr(model, "undefended", model).preprocessing),
                "protocol": protocol.describe(),
            },
            source="mined",
        )
        identity["cells"] = cells_record(cells)
        identity["precision"] = model_precision(model)
        if defence:
            identity["defence"] = defence
        identity.update(inference_identity(model))
        labels_csv = str(samples.labels_csv) if samples.labels_csv else None
        return make_record(
            identity,
            data_root=self.root,
            config={
                "source": "mined",
                "mined": {
                    "mining_id": mining.get("mining_id"),
                    "surrogates": mining.get("surrogates"),
                },
                "labels_csv": labels_csv,
                "model": describe_model(model),
                "cells": cells_record(cells),
                "protocol": protocol_record(protocol, None),
                **({"defence": defence} if defence else {}),
                "precision": identity["precision"],
                **inference_identity(model),
            },
            n_samples=len(samples),
            skipped=samples.skipped,
        )
