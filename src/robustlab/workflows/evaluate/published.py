"""Planning a run on a published benchmark folder as downloaded
(:mod:`robustlab.data.published`: ImageNet-C, ImageNet-9's bg_challenge, XIMAGENET-12):
each cell folder is a cell, its files are the pixels, the layout names the label space."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, cells_record
from robustlab.errors import InputError
from robustlab.store import CLEAN_CELL, CLEAN_SHIFT
from robustlab.workflows.evaluate.record import (
    PlannedRun,
    base_identity,
    describe_model,
    files_fingerprint,
    label_space,
)

if TYPE_CHECKING:
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import EvaluateRequest


def published_plan(request: EvaluateRequest, root: Path, layout) -> PlannedRun:
    """:func:`~robustlab.workflows.evaluate.plan.make_plan` for a published benchmark folder.

    Samples whose class folder is not a class of the label space are left out with that
    reason (a published set's class list is fixed, so a stray folder is not the user's
    label error); samples missing from a cell folder are counted skips of that cell.
    """
    from robustlab.data.published import read_published
    from robustlab.execution.tasks import PublishedImages
    from robustlab.suites import Protocol, select_cells

    if layout.name == "cifar-10-c":
        return npy_plan(request, root, layout)
    want = request.cells
    pub = read_published(root, layout)
    cells: list[Cell] = list(
        select_cells(
            list(pub.cells),
            want.shifts or None,
            want.levels or None,
            where=f"{root} ({layout.title})",
        )
    )
    if pub.clean is not None:
        cells = [CLEAN_CELL, *cells]
    if not cells:
        raise InputError(f"{root}: no {layout.title} folder matches the requested shifts/levels")
    space = label_space(request.data.label_space or layout.label_space)
    skipped = list(pub.skipped)
    samples, labels = [], []
    for s in pub.samples:
        try:
            labels.append(int(space.index_of(s.class_name)))
        except (KeyError, ValueError):
            skipped.append((s.id, f"class folder {s.class_name!r} is not in {space.name!r}"))
            continue
        samples.append(s)
    if not samples:
        raise InputError(
            f"no image of {root} has a class of label space {space.name!r}",
            hint=f"{layout.title}'s class folders belong to {layout.label_space!r}",
        )
    protocol = Protocol(**{"format": "png", **layout.protocol})
    images = PublishedImages(pub.root.resolve(), pub.folders, pub.clean, pub.names, protocol)
    # The published files are the pixels: every file of every evaluated cell is hashed.
    wanted = [str(pub.clean) if sh == CLEAN_SHIFT else pub.folders[(sh, lv)] for sh, lv in cells]
    paths = [[pub.file(s.id, f) for f in wanted] for s in samples]
    fingerprint = files_fingerprint(samples, labels, paths)

    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=cells,
        identity=PublishedIdentity(root, layout, pub.clean, pub.folders, fingerprint, skipped),
    )


def npy_plan(request: EvaluateRequest, root: Path, layout) -> PlannedRun:
    """The plan of a run on a CIFAR-10-C style release (:mod:`robustlab.data.release_npy`):
    sample ``k`` is the k-th image of every ``<corruption>.npy``, its label the k-th of
    ``labels.npy``; the cells are the corruptions' severities (no clean cell). A label
    outside the label space is a counted skip of that sample."""
    from robustlab.data.release_npy import open_release
    from robustlab.data.sources import Sample
    from robustlab.records.content_hash import hash_files
    from robustlab.records.identity import data_fingerprint
    from robustlab.execution.tasks import NpyImages
    from robustlab.suites import Protocol, select_cells

    want = request.cells
    rel = open_release(root)
    all_cells = [(c, s) for c in rel.files for s in (1, 2, 3, 4, 5)]
    cells: list[Cell] = list(
        select_cells(
            all_cells, want.shifts or None, want.levels or None, where=f"{root} ({layout.title})"
        )
    )
    if not cells:
        raise InputError(f"{root}: no {layout.title} file matches the requested shifts/levels")
    space = label_space(request.data.label_space or layout.label_space)
    skipped = list(rel.skipped)
    samples, labels = [], []
    width = len(str(max(rel.n - 1, 0)))
    for k, lab in enumerate(rel.labels.tolist()):
        sid = f"{k:0{width}d}"
        if not 0 <= lab < len(space):
            skipped.append(
                (sid, f"label {lab} is not a class of {space.name!r} ({len(space)} classes)")
            )
            continue
        samples.append(
            Sample(id=sid, path=root / "labels.npy", class_name=space.folders[lab], label=lab)
        )
        labels.append(int(lab))
    if not samples:
        raise InputError(
            f"no label of {root}/labels.npy is a class of label space {space.name!r}",
            hint="CIFAR-100-C needs a 100-class label space: --label-space FILE.csv",
        )
    protocol = Protocol(**{"format": "png", **layout.protocol})
    files = {c: rel.files[c].file for c in dict.fromkeys(c for c, _ in cells)}
    images = NpyImages(rel.root.resolve(), files, rel.n, protocol)
    # The arrays are the pixels: each evaluated file is hashed whole, with the labels.
    digests = hash_files([root / "labels.npy", *(root / f for f in files.values())])
    fingerprint = data_fingerprint(
        [("labels.npy", digests[0])]
        + [(f, d) for f, d in zip(files.values(), digests[1:])]
        + [(s.id, lab) for s, lab in zip(samples, labels)]
    )
    folders = {(c, lv): f"{files[c]}[{lv}]" for c, lv in cells}
    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=cells,
        identity=PublishedIdentity(root, layout, None, folders, fingerprint, skipped),
    )


@dataclass(frozen=True)
class PublishedIdentity:
    """What a published layout run's record is made of besides the plan and the model.

    Attributes:
        root: The folder as downloaded.
        layout: Its :class:`robustlab.data.published.Layout`.
        clean: The folder of its clean images (None: the layout has none).
        folders: ``(shift, level) -> folder`` (a release file's ``file[severity]``).
        fingerprint: The content of every file of every evaluated cell.
        skipped: Folders and files that are not part of the layout, and samples of
            other classes: the runner adds them to the run's skip record.
    """

    root: Path
    layout: Any
    clean: str | None
    folders: dict[tuple[str, Any], str]
    fingerprint: str
    skipped: list

    def record(self, run: PlannedRun, model, defence: dict | None) -> RunRecord:
        """Its identity names the evaluated cells (their files are hashed into the
        fingerprint) and the precision."""
        from robustlab.records.identity import (
            fields_of,
            inference_identity,
            make_record,
            model_precision,
        )

        layout, cells = self.layout, run.cells
        preprocessing = {
            "model": fields_of(getattr(model, "undefended", model).preprocessing),
            "protocol": run.protocol.describe(),
        }
        identity = base_identity(
            model,
            suite=layout.suite,
            suite_version="1",
            fingerprint=self.fingerprint,
            space=run.space,
            seed=0,
            preprocessing=preprocessing,
            source=layout.suite,
        )
        identity["cells"] = cells_record(cells)
        identity["precision"] = model_precision(model)
        if defence:
            identity["defence"] = defence
        identity.update(inference_identity(model))
        return make_record(
            identity,
            data_root=self.root,
            config={
                "source": "published",
                "published": {
                    "layout": layout.name,
                    "benchmark": layout.title,
                    "benchmark_suite": layout.benchmark_suite,
                    "layout_source": layout.source,
                    "clean": self.clean,
                    "folders": {Cell(*c).folder: f for c, f in self.folders.items()},
                },
                "model": describe_model(model),
                "cells": cells_record(cells),
                **({"defence": defence} if defence else {}),
                "precision": identity["precision"],
                **inference_identity(model),
            },
            n_samples=len(run.samples),
            skipped=self.skipped,
        )


def published_layout(root: Path, suite, shift_path=None):
    """The published benchmark layout of ``root`` (:func:`robustlab.data.published.detect`),
    checked against the ``suite`` and ``shift_path`` the caller asked for; None for a
    source folder.

    ``suite`` may name the benchmark's own suite (``--suite imagenet-c`` on a downloaded
    ImageNet-C); any other suite would mean shifting the published images once more,
    which is refused with the way out.
    """
    from robustlab.data.published import detect

    layout = detect(root)
    if layout is None:
        return None
    if layout.name == "imagenet-d":
        return layout if suite is None else None
    if shift_path:
        raise InputError(
            f"{root} holds the published {layout.title} images; --shift-device applies "
            "shifts on the fly",
            hint="leave out --shift-device",
        )
    name = str(getattr(suite, "name", suite)) if suite is not None else None
    if name is not None and name not in {layout.benchmark_suite, layout.suite}:
        raise InputError(
            f"{root} holds the published {layout.title} layout; its folders are the cells",
            hint=f"leave out --suite {suite} (or name --suite {layout.benchmark_suite})",
        )
    return layout
