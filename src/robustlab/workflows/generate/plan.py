"""``generate``'s plan: the request checked and resolved into what the run writes.

:func:`plan_generate` picks the suite's cells (``Suite.select``), the protocol, the
sources (``discover``) and the folder's identity (cell parameters, configured tools, the
donor pool and every source's content hash), all before the folder is touched, and
returns a frozen :class:`GeneratePlan`.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell
from robustlab.data.sources import Sample, discover, no_mask_reason
from robustlab.errors import InputError
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.files.safety import Folder, check_outputs
from robustlab.pipeline import DONOR_KEYS, cell_path
from robustlab.records.manifest import jsonable
from robustlab.settings import ToolSettings
from robustlab.shifts.registry import (
    available_shifts,
    describe_resources,
    get_resource,
    get_shift,
)
from robustlab.suites import Protocol, Suite, get_suite, parse_levels
from robustlab.workflows.generate.request import GenerateCells, GenerateInputs

if TYPE_CHECKING:  # a field's type only
    from robustlab.shifts.scenes import DonorPool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GeneratePlan:
    """Everything a ``generate`` run writes, decided before the first file.

    Attributes:
        suite: The suite narrowed to the selected cells.
        names: Selected shift names (those needing an unconfigured tool left out).
        levels: The levels asked for (None: every level), as the run's record states them.
        cells: Every cell, in the suite's order.
        protocol: The files' frame (size, crop, format).
        samples: Sources to generate, in id order.
        skipped: ``(id, reason)`` of sources left out while listing.
        need_mask: Some selected shift reads the sample's mask.
        donors: The background-donor pool (None when no shift draws donors).
        resources: Configured tools the cells' pixels depend on (inpainter, ...).
        identity: The folder's identity (seed, suite, protocol, data, cells, samples).
        settings: The resolved tool settings ``resources`` describe: the workers' job
            carries them.
    """

    suite: Suite
    names: list[str]
    levels: list | None
    cells: tuple[Cell, ...]
    protocol: Protocol
    samples: list[Sample]
    skipped: list[tuple[str, str]]
    need_mask: bool
    donors: DonorPool | None
    resources: dict[str, Any]
    identity: dict[str, Any]
    settings: ToolSettings
    layout: str = "folders"  # or "npy": the release arrays only (GenerateCells.out_layout)
    # With the npy layout: photo id -> its label in labels.npy, for each photo that has one.
    labels: dict[str, int] | None = None


def plan_generate(
    suite: str | Suite,
    data: str | Path,
    folder: LocalFolder | UrlFolder,
    cells: GenerateCells,
    inputs: GenerateInputs,
    tools: ToolSettings | None = None,
) -> GeneratePlan:
    """Check the request against the suite, the sources and the output folder, and
    resolve it (see :class:`GeneratePlan`); raises InputError on anything wrong.
    ``tools``: the resolved tool settings (None: the environment's)."""
    tools = tools if tools is not None else ToolSettings.from_environment()
    suite_obj, names, levels = _select(suite, cells, tools)
    protocol = _protocol(suite_obj.protocol, cells)
    if cells.out_layout == "npy":  # before any source is read
        _check_npy_layout(folder, protocol, cells, tuple(suite_obj.cells()), names)
    shift_objs = {n: get_shift(n, preset=protocol.preset) for n in names}
    data_root = Path(data).expanduser()
    if isinstance(folder, LocalFolder):
        _check_local_out(folder.root, data_root, inputs)
    need_mask = _check_needs(shift_objs, protocol, inputs)
    samples, skipped, donors = _sources(data_root, inputs, shift_objs, need_mask, protocol)
    labels = None
    if cells.out_layout == "npy":
        labels = _npy_labels(samples, suite_obj.label_space, data_root)
    resources = describe_resources(shift_objs.values(), tools)
    cell_list = tuple(suite_obj.cells())
    records = _cell_records(cell_list, shift_objs, resources)
    content = _content_record(samples, donors)
    if donors is not None:  # a donor cell's pixels depend on the whole pool, not one image
        pool = _donor_pool_fingerprint(donors, content)
        for cell in cell_list:
            if _draws_donors(shift_objs[cell.shift]):
                records[cell.folder]["donors"] = pool
    identity = {
        "seed": int(cells.seed),
        "suite": {
            "name": suite_obj.name,
            "version": suite_obj.version,
            "label_space": suite_obj.label_space,
        },
        "protocol": jsonable(protocol.describe(view=False)),  # the files' frame
        "data": {
            "root": str(data_root.resolve()),
            "labels_csv": str(Path(inputs.labels_csv).resolve()) if inputs.labels_csv else None,
            "masks": str(Path(inputs.masks).expanduser().resolve()) if inputs.masks else None,
            "samples": len(samples),
        },
        "cells": records,
        "samples": content,
    }
    if cells.out_layout != "folders":  # a folder of cell files keeps the identity it always had
        identity["cell_layout"] = cells.out_layout
    return GeneratePlan(
        suite_obj,
        names,
        levels,
        cell_list,
        protocol,
        samples,
        skipped,
        need_mask,
        donors,
        resources,
        identity,
        tools,
        cells.out_layout,
        labels,
    )


def _select(
    suite: str | Suite, cells: GenerateCells, tools: ToolSettings
) -> tuple[Suite, list[str], list | None]:
    """The suite narrowed to the cells asked for, the shift names and the level list."""
    suite_obj = suite if isinstance(suite, Suite) else get_suite(str(suite))
    # Shifts needing an unconfigured tool (ai_bg without an inpainter) are skipped, logged.
    names = available_shifts(suite_obj.match(cells.shifts), tools, log=log)
    levels = cells.levels
    # None or an empty list: every level; a blank string is refused as naming none.
    level_list = parse_levels(levels) if isinstance(levels, str) or levels else None
    return suite_obj.select(names, level_list).suite, names, level_list


def _check_npy_layout(folder, protocol: Protocol, cells: GenerateCells, cell_list, names) -> None:
    """``--out-layout npy`` writes the CIFAR-10-C arrays: a preset released as arrays, every
    severity of each shift, one image size, a local folder (the rows are memory maps)."""
    from robustlab.workflows.generate.release import RELEASE_NPY_PRESETS
    from robustlab.workflows.generate.release_rows import release_shape

    if protocol.preset not in RELEASE_NPY_PRESETS:
        raise InputError(
            f"--out-layout npy writes the CIFAR-10-C arrays; suite preset {protocol.preset!r} "
            "is released as folders",
            hint=f"use it with {', '.join(RELEASE_NPY_PRESETS)}, or leave out --out-layout",
        )
    if cells.fmt:
        raise InputError(
            "--image-format does not apply to --out-layout npy (the arrays hold the pixels)",
            hint="leave out --image-format",
        )
    if not isinstance(folder, LocalFolder):
        raise InputError(
            f"--out-layout npy writes to a local folder (memory-mapped arrays), not {folder}",
            hint="generate into a local folder and copy the .npy files",
        )
    release_shape(protocol)  # raises for --keep-size
    for n in names:
        got = sorted(c.key for c in cell_list if c.shift == n)
        if got != ["1", "2", "3", "4", "5"]:
            raise InputError(
                f"--out-layout npy needs all five severities of each shift; {n} has {', '.join(got)}",
                hint="leave out --levels",
            )


def _npy_labels(samples: list[Sample], label_space: str, data_root: Path) -> dict[str, int]:
    """The labels of ``labels.npy``'s rows (photo id -> label); a folder where no photo
    has one is refused before anything is drawn (a photo without is a counted skip)."""
    from robustlab.workflows.generate.release import release_labels

    labels = release_labels(samples, label_space)
    if not labels:
        raise InputError(
            f"no photo of {data_root} has a {label_space} label, and labels.npy needs one per row",
            hint="file the photos under the label space's class folders, or pass --labels "
            "CSV with integer labels (CIFAR-100: 0-99)",
        )
    return labels


def _protocol(protocol: Protocol, cells: GenerateCells) -> Protocol:
    if cells.fmt:
        protocol = dataclasses.replace(protocol, format=str(cells.fmt).lower())
    if cells.keep_size:
        protocol = dataclasses.replace(protocol, resize=None, crop=None)
    if str(protocol.format).lower() not in ("jpeg", "jpg", "png"):
        raise InputError(f"unknown output format {protocol.format!r}; use jpeg or png")
    return protocol


def _check_local_out(out_root: Path, data_root: Path, inputs: GenerateInputs) -> None:
    if out_root.exists() and not out_root.is_dir():
        raise InputError(
            f"--out {out_root} is a file; generate writes a folder of images",
            hint="pass a folder name (created if missing)",
        )
    # Both ways and through links: --data inside --out would be read as its own cells.
    check_outputs(
        {
            "--data": data_root,
            "--labels": inputs.labels_csv,
            "--masks": inputs.masks,
            "--bboxes": inputs.bboxes,
        },
        {"--out": Folder(out_root)},
    )


def _check_needs(shift_objs: dict, protocol: Protocol, inputs: GenerateInputs) -> bool:
    """Refuse shifts whose needs the request cannot meet; whether any reads masks."""
    needs = set().union(*(s.needs for s in shift_objs.values())) if shift_objs else set()
    need_mask = "mask" in needs
    if need_mask and not inputs.masks:
        which = ", ".join(n for n, s in shift_objs.items() if "mask" in s.needs)
        raise InputError(f"{which} need foreground masks; pass --masks DIR")
    for s in shift_objs.values():
        if s.extra.get("channels") == 4 and str(protocol.format).lower() != "png":
            raise InputError(f"{s.name} produces RGBA, which JPEG cannot store; use --format png")
    return need_mask


def _draws_donors(shift) -> bool:
    return bool(shift.extra.get("donor_rule") or (shift.needs & DONOR_KEYS))


def _sources(
    data_root: Path, inputs: GenerateInputs, shift_objs: dict, need_mask: bool, protocol
) -> tuple[list[Sample], list[tuple[str, str]], Any]:
    """(samples to generate, (id, reason) of those left out, the donor pool or None)."""
    found = discover(
        data_root, labels_csv=inputs.labels_csv, masks=inputs.masks, bboxes=inputs.bboxes
    )
    if (
        not inputs.unlabelled
        and found
        and all(s.class_name is None and s.label is None for s in found)
    ):
        raise InputError(
            f"{data_root} holds {len(found)} images without labels (no class folders, no "
            "labels CSV): evaluate cannot score what would be generated",
            hint="put the images in <class>/ folders or pass --labels CSV (file,label); "
            "--unlabelled generates them anyway",
        )
    skipped = list(found.skipped)
    donors = None
    if any(_draws_donors(s) for s in shift_objs.values()):
        from robustlab.shifts.scenes import DonorPool

        # The whole data set, before --limit and the mask filter: the pool every path uses.
        donors = DonorPool(found)
    samples: list[Sample] = list(found)
    if need_mask:
        skipped += [(s.id, no_mask_reason(s)) for s in samples if s.mask_path is None]
        samples = [s for s in samples if s.mask_path is not None]
    if inputs.limit is not None:
        samples = samples[: int(inputs.limit)]
    if not samples:
        raise InputError(f"no usable images in {data_root}")
    # The output names must be unique, or two sources would silently share one file.
    seen: dict[str, str] = {}
    unique: list[Sample] = []
    for sample in samples:
        key = str(cell_path("", sample, "x", "1", protocol))
        if key in seen:
            skipped.append((sample.id, f"its output name collides with {seen[key]}"))
        else:
            seen[key] = sample.id
            unique.append(sample)
    return unique, skipped, donors


def _cell_records(cells: tuple[Cell, ...], shift_objs: dict, resources: dict) -> dict[str, dict]:
    """``"shift/level"`` -> what decides the cell's pixels. A cell drawn by a configured
    tool (ai_bg's inpainter, bg_complexity's diffusion model, the attribute edits'
    hole-fill backend) names the tool, so a folder never mixes two."""
    records = {}
    for cell in cells:
        n, lv = cell
        rec = {
            "shift": n,
            "level": lv,
            "family": shift_objs[n].family,
            "deterministic": shift_objs[n].deterministic,
            "params": jsonable(shift_objs[n].params[lv]),
        }
        for key, described in resources.items():
            res = get_resource(key)
            if res.uses(shift_objs[n]):
                rec[key] = res.cell_value(described)
        records[cell.folder] = rec
    return records


def _content_record(samples: list[Sample], donors) -> dict[str, list]:
    """``id -> [class, image hash, mask hash]`` of every source whose bytes can reach a file:
    the images to generate and, for donor shifts, every background donor."""
    from robustlab.records.content_hash import hash_files

    used = {s.id: s for s in samples}
    if donors is not None:
        used.update((d.id, d) for d in donors.samples if d.id not in used)
    ordered = sorted(used.values(), key=lambda s: s.id)
    digests = hash_files([p for s in ordered for p in (s.path, s.mask_path)])
    return {s.id: [s.class_name, digests[2 * i], digests[2 * i + 1]] for i, s in enumerate(ordered)}


def _donor_pool_fingerprint(donors, content: dict[str, list]) -> str:
    """BLAKE2b of the donor pool (ids, classes, image and mask hashes): an image added to
    or removed from the pool changes which donor every sample draws."""
    from robustlab.records.identity import data_fingerprint

    ids = sorted(d.id for d in donors.samples)
    return data_fingerprint((i, *content[i]) for i in ids)
