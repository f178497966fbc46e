"""Planning a run on the published ImageNet-E archive (:mod:`robustlab.data.imagenet_e`):
each level folder is a cell, its files are the pixels."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, cells_record
from robustlab.errors import InputError
from robustlab.store import CLEAN_CELL, CLEAN_SHIFT
from robustlab.workflows.evaluate.labels import labels_for
from robustlab.workflows.evaluate.record import (
    PlannedRun,
    base_identity,
    describe_model,
    files_fingerprint,
    label_space,
    preprocessing_record,
    protocol_record,
)

if TYPE_CHECKING:
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import EvaluateRequest

ARCHIVE_SUITE = "imagenet-e-archive"


def archive_plan(request: EvaluateRequest, root: Path) -> PlannedRun:
    """:func:`~robustlab.workflows.evaluate.plan.make_plan` for the published ImageNet-E archive.

    The request's ``protocol`` may override only the view (the archive's files are the
    frame); its suite and seed do not apply."""
    from robustlab.data.imagenet_e import read_archive
    from robustlab.execution.tasks import ArchiveImages
    from robustlab.suites import select_cells

    want, override = request.cells, request.cells.protocol
    archive = read_archive(root)
    cells: list[Cell] = list(
        select_cells(
            list(archive.cells), want.shifts or None, want.levels or None, where="the archive"
        )
    )
    if not cells:
        raise InputError(f"{root}: no level folder matches the requested shifts/levels")
    cells = [CLEAN_CELL, *cells]
    samples = archive.samples
    space = label_space(request.data.label_space or "imagenet1k")
    labels = labels_for(samples, space)
    images = ArchiveImages(archive.root.resolve(), archive.folders, _view(override))
    # The archive's files are the pixels: hash the original and every level file per sample.
    shifted = [c for c in cells if c[0] != CLEAN_SHIFT]
    paths = [[s.path, *(images.path(s, sh, lv) for sh, lv in shifted)] for s in samples]
    fingerprint = files_fingerprint(samples, labels, paths)

    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=cells,
        identity=ArchiveIdentity(root, archive, override, fingerprint),
    )


def _view(override):
    """The archive protocol with the user's view override (None: the archive's own)."""
    if override is None:
        return None
    from robustlab.suites import ARCHIVE_PROTOCOL, parse_protocol

    chosen = parse_protocol(override, ARCHIVE_PROTOCOL)
    if chosen.resize or chosen.crop:
        raise InputError(
            "the ImageNet-E archive's files are used as they are; --protocol can "
            "change only how the model sees them (view, view_resize, view_crop)",
            hint="e.g. --protocol view=model or --protocol view_resize=none,view_crop=none",
        )
    return chosen


@dataclass(frozen=True)
class ArchiveIdentity:
    """What an archive run's record is made of besides the plan and the model: the
    archive, the user's view override and the fingerprint of its files."""

    root: Path
    archive: Any
    override: Any
    fingerprint: str

    def record(self, run: PlannedRun, model, defence: dict | None) -> RunRecord:
        """The archive run's record; its identity never held a precision unless autocast
        is on, nor cells (they extend the run), so ids of earlier archive runs stay."""
        from robustlab.records.identity import inference_identity, make_record, model_precision

        root, archive, override = self.root, self.archive, self.override
        protocol, space, cells = run.protocol, run.space, run.cells
        preprocessing = {
            "model": preprocessing_record(getattr(model, "undefended", model).preprocessing),
            "protocol": protocol.describe(),
        }
        identity = base_identity(
            model,
            suite=ARCHIVE_SUITE,
            suite_version="1",
            fingerprint=self.fingerprint,
            space=space,
            seed=0,
            preprocessing=preprocessing,
            source=ARCHIVE_SUITE,
        )
        if defence:
            identity["defence"] = defence
        # This identity never held a precision: only autocast adds one (fp32 ids unchanged).
        precision = model_precision(model)
        if getattr(getattr(model, "inference", None), "dtype", None) is not None:
            identity["precision"] = precision
        identity.update(inference_identity(model))
        return make_record(
            identity,
            data_root=root,
            config={
                "source": ARCHIVE_SUITE,
                "archive_root": str(root.resolve()),
                "folders": {Cell(*c).folder: f for c, f in archive.folders.items()},
                "model": describe_model(model),
                "cells": cells_record(cells),
                **({"defence": defence} if defence else {}),
                "protocol": protocol_record(protocol, override),
                "precision": precision,
                **inference_identity(model),
                "discover_skipped": [list(x) for x in archive.skipped],
            },
            n_samples=len(archive.samples),
            skipped=archive.skipped,  # counted like a source folder's
        )
