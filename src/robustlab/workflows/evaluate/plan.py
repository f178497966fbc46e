"""Planning an evaluation: :func:`make_plan` turns an
:class:`~robustlab.workflows.evaluate.request.EvaluateRequest` into a
:class:`~robustlab.execution.plan.RunPlan` without touching the database, and plans the runs on
source folders (shifts computed on the fly) and on folders written by ``robustlab
generate``; the ImageNet-E archive and the published layouts have their own modules.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, as_cells, cells_record
from robustlab.data.sources import SampleList
from robustlab.errors import InputError
from robustlab.records.manifest import read_generated
from robustlab.execution.plan import RunPlan
from robustlab.store import CLEAN_CELL, CLEAN_SHIFT
from robustlab.workflows.evaluate.generated import (
    expected_digests,
    generated_files_fingerprint,
    generated_hint,
    generated_inputs,
    generated_skips,
    held_levels,
)
from robustlab.workflows.evaluate.labels import labels_for, subset_classes
from robustlab.workflows.evaluate.mined import mined_plan, read_mining
from robustlab.workflows.evaluate.model import note_trained_preprocess
from robustlab.workflows.evaluate.published import published_layout
from robustlab.workflows.evaluate.record import (
    PlannedRun,
    base_identity,
    build_plan,
    describe_model,
    label_space as get_space,
    preprocessing_record,
    protocol_record,
)

if TYPE_CHECKING:
    from robustlab.data.published import Layout
    from robustlab.files.hashes import Digests
    from robustlab.settings import ToolSettings
    from robustlab.shifts.registry import Shift
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import EvaluateRequest

log = logging.getLogger(__name__)


def make_plan(request: EvaluateRequest) -> RunPlan:
    """Validate everything the request's folder decides and build what the run needs,
    without touching the database: the folder's planner says what will be read, labelled
    and computed (:func:`planned_run`), then the model is loaded and the run's record made
    (:func:`~robustlab.workflows.evaluate.record.build_plan`). On Ray the driver's model
    only names the run and scores the predictions: it is loaded on the CPU, the actors
    load it on the device asked for.
    """
    device = "cpu" if request.execution.backend == "ray" else request.model.device
    planned = planned_run(request)
    plan = build_plan(planned, request.model, device=device)
    if isinstance(planned.identity, SourceIdentity):  # a checkpoint of robustlab train
        note_trained_preprocess(request.model.weights, getattr(plan.model, "defence", None))
    return plan


def planned_run(request: EvaluateRequest) -> PlannedRun:
    """What a run on the request's folder reads, labels and computes, before any model is
    loaded. The folder decides the planner: an exported set
    (:func:`~robustlab.workflows.evaluate.exported.exported_plan`), the ImageNet-E archive
    (:func:`~robustlab.workflows.evaluate.archive.archive_plan`), a mined subset of
    shifted cells (:func:`~robustlab.workflows.evaluate.mined.mined_plan`), a published
    layout (:func:`~robustlab.workflows.evaluate.published.published_plan`), else source
    images on the fly or a generated folder (:func:`source_plan`); each returns a
    :class:`~robustlab.workflows.evaluate.record.PlannedRun`.
    """
    from robustlab.data.imagenet_e import is_archive

    from robustlab.data.exported import open_export

    root, want = request.data.folder, request.cells
    shift_path = request.execution.shift_path
    exported = open_export(root)
    if exported is not None:  # robustlab export's shards (or a save_to_disk copy)
        if shift_path:
            raise InputError(
                f"{root} holds exported images already; --shift-device applies shifts on the fly",
                hint="leave out --shift-device",
            )
        from robustlab.workflows.evaluate.exported import exported_plan

        return exported_plan(request, root, exported)
    if shift_path and (is_archive(root) or read_generated(root) is not None):
        raise InputError(
            f"{root} holds shifted images already; --shift-device applies shifts on the fly",
            hint="leave out --shift-device",
        )
    if is_archive(root):
        if want.suite is not None and want.suite != "imagenet-e":
            raise InputError(
                f"{root} is an ImageNet-E archive; its level folders are the cells "
                f"(leave out --suite {want.suite})"
            )
        if request.data.labels_csv is not None:
            # Its labels.txt labels it; a CSV that the run ignored would score the old labels
            # under the user's belief that theirs were used.
            raise InputError(
                f"{root} is an ImageNet-E archive: its labels.txt gives the labels, "
                f"--labels {request.data.labels_csv} would not be used",
                hint="leave out --labels, or edit a copy of the archive's labels.txt",
            )
        from robustlab.workflows.evaluate.archive import archive_plan

        return archive_plan(request, root)
    manifest = read_generated(root)
    if manifest is not None and manifest.get("cell_layout") == "npy":
        return _generated_arrays(request, root)
    mining = read_mining(root) if manifest is None else None
    if mining is not None:  # a hard subset of shifted cells is read as those cells
        planned = mined_plan(request, root, mining)
        if planned is not None:
            return planned
    # A labels CSV says what the samples are and their classes: the folder is then read as
    # a labelled folder, never as a published layout.
    published = manifest is None and request.data.labels_csv is None
    layout = published_layout(root, want.suite, shift_path) if published else None
    space = request.data.label_space or (mining or {}).get("label_space")
    if layout is not None and layout.name == "imagenet-d":
        # ImageNet-D has no cells of its own: a class tree under subset folders, read with
        # its own label space (the subset is the first folder of each sample id).
        space = space or layout.label_space
    elif layout is not None:
        if request.data.masks:
            raise InputError(
                f"{root} holds the published {layout.title} layout: its files are the "
                "pixels, so --masks does not apply",
                hint="leave out --masks",
            )
        from robustlab.workflows.evaluate.published import published_plan

        return published_plan(request, root, layout)
    source = read_source(root, manifest, request)
    return source_plan(request, source, label_space=space, layout=layout)


def _generated_arrays(request: EvaluateRequest, root: Path) -> PlannedRun:
    """A folder of ``generate cifar-c --layout npy``: its arrays are read as the released
    CIFAR-10-C is (the cells; ``labels.npy`` labels the rows)."""
    from robustlab.workflows.evaluate.published import published_plan

    if request.data.labels_csv is not None:
        raise InputError(
            f"{root} holds CIFAR-10-C arrays: their labels.npy gives the labels, "
            f"--labels {request.data.labels_csv} would not be used",
            hint="leave out --labels",
        )
    layout = published_layout(root, request.cells.suite)
    if layout is None or layout.name != "cifar-10-c":
        raise InputError(
            f"{root} has no finished .npy arrays yet (generate --layout npy was interrupted "
            "or is running)",
            hint="rerun the same generate command: it resumes and writes them",
        )
    return published_plan(request, root, layout)


@dataclass(frozen=True)
class Source:
    """A source folder, or a generated folder read back to its source: what the cells of a
    run on it are and where its images come from."""

    root: Path  # the source images (a generated folder's source)
    suite: Any  # the Suite, or None for a clean run
    protocol: Any
    cells: list[Cell]
    seed: int
    labels_csv: Any
    masks: Any
    manifest: dict | None = None  # a generated folder's manifest
    generated_root: Path | None = None
    available: set[tuple[str, str]] = field(default_factory=set)  # its cells

    @property
    def kind(self) -> str:
        return "generated" if self.manifest is not None else "on-the-fly"


def resolve_suite(suite, shifts, levels, available=None, held=None, tools=None):
    """(suite restricted to the cells asked for, its protocol, the cells with the clean
    one first). ``available``: a generated folder's cells; ``held``: nothing was asked
    for, so every shift the folder holds at its own levels (:func:`held_levels`);
    ``tools``: the run's resolved tool settings (None: the environment's)."""
    from robustlab.shifts.registry import available_shifts, get_shift, needs_resource
    from robustlab.suites import Protocol, get_suite

    if suite is None:
        if shifts:
            raise InputError("--shift needs --suite (which suite's cells to pick from)")
        return None, Protocol(), [CLEAN_CELL]
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    if held is not None:
        s = s.select_levels(held).suite
        return s, s.protocol, [CLEAN_CELL, *s.cells()]
    names = s.match(shifts or None)  # the selection grammar: names, families, globs, groups
    if available is None:  # on the fly: skip shifts whose tool (an inpainter) is not configured
        kept = available_shifts(names, tools, log=log)
    else:  # a generated folder: such shifts count when their files were generated
        kept = [
            n
            for n in names
            if not needs_resource(get_shift(n)) or any(sh == n for sh, _ in available)
        ]
        if not kept:
            raise InputError(f"no generated images for {', '.join(names)} in this folder")
    if shifts or levels or kept != list(s.shifts):
        s = s.select(kept, levels or None).suite
    return s, s.protocol, [CLEAN_CELL, *s.cells()]


def read_source(root: Path, manifest, request: EvaluateRequest) -> Source:
    """The cells of a run on a source folder, or on a generated folder (then checked
    against its manifest: every cell asked for must have been generated)."""
    import dataclasses

    from robustlab.suites import VIEW_FIELDS

    want, data = request.cells, request.data
    suite, seed, shifts, levels = want.suite, want.seed, want.shifts, want.levels
    labels_csv, masks = data.labels_csv, data.masks
    generated_root, available = None, set()
    held = None
    if manifest is not None:
        suite, gen_protocol, seed, source, labels_csv, masks, available = generated_inputs(
            root, manifest, suite, seed, labels_csv, masks
        )
        generated_root = root.resolve()
        if not shifts and not levels and any(s != CLEAN_SHIFT for s, _ in available):
            # Nothing asked for: the cells the folder holds (a folder generated with 4
            # corruptions is evaluated on those 4), each shift at its own levels, never a
            # request for every cell of the suite that the user would have to narrow with
            # flags the manifest could tell.
            held = held_levels(available)
    on_disk = available if manifest is not None else None
    suite_obj, protocol, cells = resolve_suite(
        suite, shifts, levels, on_disk, held, request.tools.settings
    )
    if manifest is not None:
        # The files fix the frame; how a model sees them is the suite's rule.
        protocol = dataclasses.replace(
            gen_protocol, **{k: getattr(protocol, k) for k in VIEW_FIELDS}
        )
        missing = [
            c.folder
            for c in as_cells(cells)
            if c.shift != CLEAN_SHIFT and c.stored not in available
        ]
        if missing:
            raise InputError(
                f"{root} has no generated images for {', '.join(missing[:6])}"
                + (f" and {len(missing) - 6} more" if len(missing) > 6 else ""),
                hint=generated_hint(available),
            )
        root = source
    return Source(
        root=root,
        suite=suite_obj,
        protocol=protocol,
        cells=cells,
        seed=0 if seed is None else int(seed),
        labels_csv=labels_csv,
        masks=masks,
        manifest=manifest,
        generated_root=generated_root,
        available=available,
    )


def _generated_samples(samples: SampleList, manifest: dict, root) -> SampleList:
    """The source images a generated folder was made from: those its manifest lists (each
    image generate read, skipped ones included). A folder made with ``--limit`` holds the
    first N only; the rest of its source folder is no part of it, so it is left out here
    instead of being counted as N missing cells each."""
    made = manifest.get("samples")
    if not made:  # an older manifest without the list: every source image
        return samples
    kept = SampleList(
        [s for s in samples if s.id in made],
        skipped=samples.skipped,
        layout=samples.layout,
        labels_csv=samples.labels_csv,
    )
    if len(kept) < len(samples):
        log.info(
            "%s holds %d of the %d source images (generated with --limit?): the other %d "
            "are left out",
            root,
            len(kept),
            len(samples),
            len(samples) - len(kept),
        )
    return kept


def source_samples(src: Source, shift_objs, label_space):
    """(samples, labels, label space) of a source folder, with the masks its shifts need."""
    from robustlab.data.sources import discover

    root, masks = src.root, src.masks
    needs_mask = any("mask" in sh.needs for sh in shift_objs)
    if needs_mask and src.manifest is None and not masks:
        which = ", ".join(dict.fromkeys(sh.name for sh in shift_objs if "mask" in sh.needs))
        raise InputError(
            f"{which} need foreground masks: pass --masks DIR (make them with "
            f"`robustlab masks --data {root} --out DIR`)"
        )
    samples = discover(root, labels_csv=src.labels_csv, masks=masks)
    if src.manifest is not None:
        samples = _generated_samples(samples, src.manifest, src.generated_root)
    from robustlab.shifts.generative.tiny import warn_if_drawn_by_random

    warn_if_drawn_by_random(root)  # a synth folder drawn by tiny random weights: say so
    if needs_mask and src.manifest is None and not any(s.mask_path is not None for s in samples):
        raise InputError(
            f"none of the {len(samples)} images has a mask in {masks} (make them "
            f"with `robustlab masks --data {root} --out {masks}`)"
        )
    space_name = label_space or (src.suite.label_space if src.suite else "imagenet1k")
    space = get_space(space_name)
    samples = subset_classes(samples, space)
    generated_from = root if src.manifest is not None else None
    return samples, labels_for(samples, space, generated_from), space


def source_plan(request: EvaluateRequest, src: Source, *, label_space, layout) -> PlannedRun:
    """:func:`make_plan` for source images (shifts computed on the fly) or a generated folder
    (shifted cells read from its files, the clean cell from its source); ``label_space``:
    the one asked for, or ImageNet-D's for its recognised tree (``layout``)."""
    from robustlab.execution.tasks import CellImages
    from robustlab.shifts.registry import get_shift

    shift_path, override = request.execution.shift_path, request.cells.protocol
    shift_objs = [get_shift(s) for s, _ in src.cells if s != CLEAN_SHIFT]
    for sh in shift_objs:  # the suite's preset must have a table for each of its shifts
        sh.preset(getattr(src.protocol, "preset", None))
    if shift_path:
        from robustlab.execution.device_shifts import check_shifts

        check_shifts(sh.name for sh in shift_objs)
    samples, labels, space = source_samples(src, shift_objs, label_space)
    protocol = chosen_protocol(src.protocol, override, src.suite, space, src.manifest, src.root)
    for sh in shift_objs:  # a preset without a table for a shift: one line, before any work
        sh.preset(protocol.preset)
    if shift_path and protocol.preset:
        raise InputError(
            f"--shift-device applies ImageNet-C's own constants; the {protocol.preset} "
            "preset's corruptions run on the exact path only",
            hint="leave out --shift-device",
        )
    needs_donors = any(sh.extra.get("donor_rule") for sh in shift_objs)
    digests = None
    if src.generated_root is not None and src.manifest is not None:
        digests = expected_digests(
            src.generated_root, src.manifest, samples, src.available, protocol
        )
    images = CellImages(
        protocol,
        src.seed,
        generated_root=src.generated_root,
        donors=samples if needs_donors else None,
        with_mask=any("mask" in sh.needs for sh in shift_objs),
        generated_skips=generated_skips(src.manifest) if src.manifest is not None else None,
        expected=digests,
        settings=request.tools.settings,
    )

    return PlannedRun(
        samples=samples,
        images=images,
        space=space,
        labels=labels,
        cells=src.cells,
        identity=SourceIdentity(
            src=src,
            shifts=tuple(shift_objs),
            override=override,
            shift_path=shift_path,
            digests=digests,
            layout=layout,
            tools=request.tools.settings,
        ),
        suite=src.suite,
    )


@dataclass(frozen=True)
class SourceIdentity:
    """What the record of a run on a source or generated folder is made of besides the
    plan and the model.

    Attributes:
        src: The folder read back (:class:`Source`).
        shifts: The registered shifts of its cells.
        override: The user's ``--protocol`` (None: the benchmark's own).
        shift_path: The batched shift path's record (None: the exact one).
        digests: A generated folder's expected cell file hashes (None on the fly).
        layout: ImageNet-D's published tree, when recognised (described, not identity).
        tools: The run's tool settings (None: the environment's).
    """

    src: Source
    shifts: tuple[Shift, ...]
    override: Any
    shift_path: dict | None
    digests: Digests | None
    layout: Layout | None
    tools: ToolSettings | None

    def inputs(self, run: PlannedRun, model, defence: dict | None) -> tuple[dict, str]:
        """(the parts of a source run's inputs, kept apart for :func:`note_earlier_runs`;
        the data fingerprint): what decides the pixels and labels, by content, so a
        replaced photo or mask, another masks folder or a regenerated folder is another
        run, never a resumed one."""
        from robustlab.records.manifest import generated_identity
        from robustlab.records.content_hash import hash_files
        from robustlab.records.identity import (
            data_fingerprint,
            inference_identity,
            input_parts,
            model_precision,
            run_id,
        )

        src, samples, labels = self.src, run.samples, run.labels
        digests = hash_files([p for s in samples for p in (s.path, s.mask_path)])
        image_hashes, mask_hashes = digests[0::2], digests[1::2]
        fingerprint = data_fingerprint(
            (s.id, s.class_name, lab, ih, mh)
            for s, lab, ih, mh in zip(samples, labels, image_hashes, mask_hashes)
        )
        manifest = src.manifest
        inputs = input_parts(samples, labels, image_hashes, mask_hashes)
        inputs.update(
            masks_dir=str(Path(src.masks).expanduser().resolve()) if src.masks else None,
            seed=src.seed,
            protocol=run.protocol.describe(),
            preprocessing=preprocessing_record(getattr(model, "undefended", model).preprocessing),
            precision=model_precision(model),
            compile=inference_identity(model).get("compile"),
            source=src.kind,
            defence=defence,
            generated=run_id(generated_identity(manifest)) if manifest is not None else None,
        )
        if self.shift_path:
            from robustlab.store.naming import shift_path_label

            inputs["shift_path"] = shift_path_label(self.shift_path)
        return inputs, fingerprint

    def record(self, run: PlannedRun, model, defence: dict | None) -> RunRecord:
        """The run record of a source or generated folder: its identity (model, the
        content of every image and mask, labels, seed, protocol, source kind, optional
        keys only when used, so runs without them keep their ids) and description."""
        from robustlab.records.identity import inference_identity, make_record

        src, samples, protocol, shift_path = self.src, run.samples, run.protocol, self.shift_path
        inputs, fingerprint = self.inputs(run, model, defence)
        preprocessing = {"model": inputs["preprocessing"], "protocol": inputs["protocol"]}
        masks_dir = inputs["masks_dir"]
        identity = base_identity(
            model,
            suite=src.suite.name if src.suite else None,
            suite_version=src.suite.version if src.suite else None,
            fingerprint=fingerprint,
            space=run.space,
            seed=src.seed,
            preprocessing=preprocessing,
            source=src.kind,
        )
        identity.update(
            masks=masks_dir, precision=inputs["precision"], generated=inputs["generated"]
        )
        if defence:  # absent for a plain model, so plain runs keep the ids they always had
            identity["defence"] = defence
        identity.update(inference_identity(model))  # likewise: only for a compiled model
        if self.digests is not None:  # a generated folder's cells are read from its files
            identity["generated_files"] = inputs["generated_files"] = generated_files_fingerprint(
                samples, src.available, self.digests
            )
        if shift_path:  # only then: exact runs keep the ids they always had
            identity["shift_path"] = shift_path
        labels_csv = str(getattr(samples, "labels_csv", None) or src.labels_csv or "") or None
        record = make_record(
            identity,
            data_root=src.root,
            config={
                "source": src.kind,
                "generated_root": str(src.generated_root or ""),
                "labels_csv": labels_csv,
                "masks": masks_dir,
                "inputs": inputs,
                "model": describe_model(model),
                **({"defence": defence} if defence else {}),
                "cells": cells_record(src.cells),
                "protocol": protocol_record(protocol, self.override),
            },
            n_samples=len(samples),
            # Files left out while listing the folder (stray files, CSV rows without a
            # file, loops, bad names): the runner adds them to the run's skip record.
            skipped=getattr(samples, "skipped", []),
        )
        self.describe(record)
        return record

    def describe(self, record: RunRecord) -> None:
        """Add to ``record`` what describes a source run's pixels but is not its identity."""
        from robustlab.shifts.registry import describe_resources, recorded_resources

        # Pixels drawn by a configured tool (ai_bg's inpainter, bg_complexity's diffusion
        # model, the attribute edits' hole-fill backend) depend on it: on the fly the
        # configured one draws them (described here), from a generated folder the one its
        # manifest names.
        src = self.src
        if src.manifest is not None:
            for key in recorded_resources(self.shifts):
                record.config[key] = src.manifest.get(key)
        else:
            record.config.update(describe_resources(self.shifts, self.tools))
        if self.shift_path:
            record.config["shift_path"] = self.shift_path
        if self.layout is not None:  # ImageNet-D's published tree, recognised (not the id)
            record.config["published"] = {
                "layout": self.layout.name,
                "benchmark": self.layout.title,
            }


# Benchmarks without shifts whose official protocol is not ImageNet-C's, by label space.
CLEAN_PROTOCOLS = {"imagenet-d": "model"}


def chosen_protocol(protocol, override, suite_obj, space, manifest, root):
    """The protocol of a run: the benchmark's (``protocol`` from the suite or the generated
    folder; ImageNet-D's for a clean run on its label space), or the user's override.

    An override of a generated folder may change only the view: its files fix the frame.
    """
    from robustlab.suites import PROTOCOLS, VIEW_FIELDS, parse_protocol

    if suite_obj is None and override is None and space.name in CLEAN_PROTOCOLS:
        return PROTOCOLS[CLEAN_PROTOCOLS[space.name]]
    if override is None:
        return protocol
    new = parse_protocol(override, protocol)
    if manifest is not None:
        frame = ("resize", "crop", "interpolation", "format", "jpeg_quality")
        changed = [k for k in frame if getattr(new, k) != getattr(protocol, k)]
        if changed:
            keep = ",".join(f"{k}={getattr(new, k)}" for k in VIEW_FIELDS)
            raise InputError(
                f"{root}'s files were made with {', '.join(f'{k}={getattr(protocol, k)}' for k in changed)}; "
                "--protocol can change only how the model sees them",
                hint=f"pass --protocol {keep}, or evaluate the source images on the fly",
            )
    return new
