"""What an export holds: every image ``evaluate`` would score in a folder robustlab wrote,
with the metadata that says what it is.

Three kinds of folder, each read the way ``evaluate`` reads it, so the export is scored
with the same cells and the same numbers:

- a ``generate`` folder (any suite: ImageNet-C and its presets, the scene suites,
  ImageNet-E): per source image its clean photo (the source file, as evaluate reads the
  clean cell from it) and each cell file the manifest lists, with the cell's recorded
  parameters and, for ImageNet-E's edits, its ``attributes.csv`` row;
- a ``synth`` folder (ImageNet-D): each synthesised image as a clean sample of the
  ``imagenet-d`` label space, with its prompt;
- a ``mine`` subset: each file its labels CSV lists (a review's export: with its verdict),
  as the cell it was mined as.

A cell file is checked against the hash ``generate`` recorded as the export reads it
(:mod:`robustlab.workflows.export.write`); a cell the folder has no file for is a skip
with the folder's own reason, as in an evaluation.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, level_key
from robustlab.errors import InputError
from robustlab.files.safety import LinkRule
from robustlab.store import CLEAN_SHIFT

if TYPE_CHECKING:
    from robustlab.data.labels import LabelSpace
    from robustlab.suites import Protocol

log = logging.getLogger(__name__)

# Columns of a review's export (robustlab review --export) that make a row's verdict.
REVIEW_COLUMNS = (
    "original_class",
    "relabelled",
    "support",
    "n_annotators",
    "n_accept",
    "n_reject",
    "n_not_single",
    "n_relabel",
)


@dataclass(frozen=True)
class Item:
    """One image to export: where its bytes are and what it is.

    Attributes:
        source_id, class_name, label: The sample (label -1: none in the label space).
        shift, level: Its cell (``clean``/``0``: the source photo).
        path: The file to read.
        rel: Its path relative to the folder (or the source folder, for a source photo).
        expected: The content hash the file must have (generate's record, the manifest's
            source hash), None where the folder records none (it is hashed as read).
        params, attributes, review: See :class:`robustlab.data.exported.Row`.
        read: How ``evaluate`` reads it back (``source``, ``stored``, ``file``).
    """

    source_id: str
    class_name: str | None
    label: int
    shift: str
    level: str
    path: Path
    rel: str
    expected: str | None
    params: Any = None
    attributes: dict | None = None
    review: dict | None = None
    read: str = "stored"


@dataclass
class ExportPlan:
    """A folder's export, planned: its items in sample order (a sample's cells together,
    so a reader reads one sample from one place) and what describes the whole set."""

    root: Path
    origin: str  # "generated", "synth" or "mined"
    suite: str | None
    suite_version: str | None
    label_space: LabelSpace
    seed: int | None
    protocol: Protocol  # how evaluate sees the files (frame and view)
    items: list[Item] = field(default_factory=list)
    skipped: list[tuple[str, str, str, str]] = field(default_factory=list)  # id, shift, level, why
    provenance: dict = field(default_factory=dict)  # for the card and the record

    @functools.cached_property
    def protocol_values(self) -> dict:
        """The protocol as JSON values (every row carries it)."""
        return dataclasses.asdict(self.protocol)


def plan_export(root: Path, labels_csv: Path | None = None) -> ExportPlan:
    """The export of folder ``root`` (a ``generate``, ``synth`` or ``mine`` output).

    Raises:
        InputError: the folder is none of those, or cannot be read as evaluate reads it.
    """
    from robustlab.records.manifest import read_generated, read_synth
    from robustlab.workflows.evaluate.mined import read_mining

    root = Path(root).expanduser()
    if not root.is_dir():
        raise InputError(f"--data {root} is not a folder")
    manifest = read_generated(root)
    if manifest is not None and manifest.get("cell_layout") == "npy":
        raise InputError(
            f"{root} holds CIFAR-10-C's .npy arrays (generate --layout npy), not image files",
            hint="the arrays are the release format already; export a --layout folders "
            "generate for Parquet or WebDataset shards",
        )
    if manifest is not None:
        return _generated(root, manifest, labels_csv)
    mining = read_mining(root)
    if mining is not None:
        return _mined(root, mining, labels_csv)
    synth = read_synth(root)
    if synth is not None:
        return _synth(root, synth, labels_csv)
    raise InputError(
        f"{root} is not a folder robustlab wrote (no generate or synth manifest.json, no "
        "mining.json)",
        hint="export the --out folder of robustlab generate, synth or mine",
    )


def _label(sample, space) -> int:
    from robustlab.workflows.evaluate.labels import labels_for

    try:
        return labels_for([sample], space)[0]
    except InputError:
        return -1


def _generated(root: Path, manifest: dict, labels_csv) -> ExportPlan:
    """A ``generate`` folder: sources as evaluate lists them, then each listed cell file."""
    from robustlab.data.labels import get_label_space
    from robustlab.data.sources import discover
    from robustlab.files.hashes import recorded_digests, records_hashes
    from robustlab.pipeline import relative_output
    from robustlab.suites import VIEW_FIELDS
    from robustlab.workflows.evaluate.generated import generated_inputs, generated_skips
    from robustlab.workflows.generate import ATTRIBUTES_CSV, read_attributes_csv

    suite, gen_protocol, seed, source, labels, masks, available = generated_inputs(
        root, manifest, None, None, labels_csv, None
    )
    # The files fix the frame; the suite says how a model sees them (as evaluate does).
    protocol = dataclasses.replace(
        gen_protocol, **{k: getattr(suite.protocol, k) for k in VIEW_FIELDS}
    )
    space = get_label_space(suite.label_space)
    made = manifest.get("samples") or {}
    samples = list(discover(source, labels_csv=labels, masks=masks))
    if made:  # a folder made with --limit holds its first N sources only
        samples = [s for s in samples if s.id in made]
    cells = [
        (*Cell(str(c.get("shift")), c.get("level")).stored, c.get("params"))
        for c in manifest.get("cells") or []
    ]
    digests = None
    if records_hashes(manifest):
        digests = recorded_digests(root, manifest, [(sh, lv) for sh, lv, _ in cells])
    skips = generated_skips(manifest)
    attributes = {
        (r.get("sample_id"), r.get("shift"), level_key(r.get("level"))): {
            k: v for k, v in r.items() if k not in ("file", "sample_id", "shift", "level")
        }
        for r in read_attributes_csv(root / ATTRIBUTES_CSV)
    }
    plan = ExportPlan(
        root=root,
        origin="generated",
        suite=suite.name,
        suite_version=str((manifest.get("suite") or {}).get("version") or suite.version),
        label_space=space,
        seed=seed,
        protocol=protocol,
        provenance=_provenance(manifest, "generate"),
    )
    links = LinkRule(root)
    base = str(root)
    for s in samples:
        label = _label(s, space)
        tail = relative_output(s, gen_protocol).as_posix()
        recorded = made.get(s.id) or [None, None, None]
        plan.items.append(
            Item(
                s.id,
                s.class_name,
                label,
                CLEAN_SHIFT,
                "0",
                Path(s.path),
                s.id,
                recorded[1],
                read="source",
            )  # fmt: skip
        )
        for sh, lv, params in cells:
            rel = f"{sh}/{lv}/{tail}"  # pipeline.cell_path, as a string: one Path per file
            path = Path(os.path.join(base, rel))
            why = None
            if links.outside(path):
                why = "the generated file is a link out of the generated folder"
            elif not path.is_file():
                why = skips.get((s.id, sh, lv)) or skips.get((s.id, None, None))
                why = why or "generated file missing (rerun generate to draw it)"
            expected = digests.get(s.id, sh, lv) if digests is not None else None
            if why is None and digests is not None and expected is None:
                why = (
                    "generate recorded no content hash for this file (written by a killed "
                    "run, or not by generate): rerun generate to check it"
                )
            if why is not None:
                plan.skipped.append((s.id, sh, lv, why))
                continue
            plan.items.append(
                Item(
                    s.id,
                    s.class_name,
                    label,
                    sh,
                    lv,
                    path,
                    rel,
                    expected,
                    params,
                    attributes.get((s.id, sh, lv)),
                    read="stored",
                )  # fmt: skip
            )
    return plan


def _provenance(manifest: dict, command: str) -> dict:
    """What the card and the record say of where the set came from: the folder's
    manifest, less its per-image lists."""
    keep = {
        k: v
        for k, v in manifest.items()
        if k not in ("samples", "runs", "failures", "skipped_inputs", "converted")
    }
    keep["command"] = command
    keep["runs"] = [
        {k: r.get(k) for k in ("id", "started_at", "finished_at", "status", "backend")}
        for r in manifest.get("runs") or []
        if isinstance(r, dict)
    ]
    return keep


def _clean_protocol(space):
    """The protocol of a clean run in ``space`` (ImageNet-D's own; else the default)."""
    from robustlab.suites import PROTOCOLS, Protocol
    from robustlab.workflows.evaluate.plan import CLEAN_PROTOCOLS

    name = CLEAN_PROTOCOLS.get(space.name)
    return PROTOCOLS[name] if name else Protocol()


def _clean_set(root: Path, space, labels_csv, plan: ExportPlan, extra=None) -> ExportPlan:
    """Every image of a labelled folder as a clean sample (a synth folder, a mined subset
    of clean candidates), as evaluate lists them."""
    from robustlab.data.sources import discover
    from robustlab.workflows.evaluate.labels import subset_classes

    samples = subset_classes(discover(root, labels_csv=labels_csv), space)
    reviews = _reviews(samples)
    for s in samples:
        plan.items.append(
            Item(
                s.id,
                s.class_name,
                _label(s, space),
                CLEAN_SHIFT,
                "0",
                Path(s.path),
                s.id,
                None,
                None,
                (extra or {}).get(s.id),
                reviews.get(s.id),
                read="source",
            )  # fmt: skip
        )
    return plan


def _synth(root: Path, manifest: dict, labels_csv) -> ExportPlan:
    """A ``synth`` folder: ImageNet-D's images with each one's prompt and draw seed."""
    import csv

    from robustlab.data.labels import get_label_space

    identity = manifest.get("identity") or {}
    space = get_label_space(identity.get("label_space") or "imagenet-d")
    prompts: dict[str, dict] = {}
    found = root / str(manifest.get("prompts_file") or "prompts.csv")
    if found.is_file():
        with open(found, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                if r.get("file"):
                    prompts[r["file"]] = {k: v for k, v in r.items() if k not in ("file", "class")}
    plan = ExportPlan(
        root=root,
        origin="synth",
        suite=None,
        suite_version=None,
        label_space=space,
        seed=identity.get("seed"),
        protocol=_clean_protocol(space),
        provenance=_provenance(manifest, "synth"),
    )
    return _clean_set(root, space, labels_csv, plan, prompts)


def _reviews(samples) -> dict[str, dict]:
    """The review verdict of each listed file when the labels CSV is a review's export."""
    import csv

    path = getattr(samples, "labels_csv", None)
    if path is None:
        return {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if not set(REVIEW_COLUMNS) <= set(reader.fieldnames or ()):
            return {}
        return {
            r["file"]: {"class": r.get("class"), **{k: r.get(k) for k in REVIEW_COLUMNS}}
            for r in reader
            if r.get("file")
        }


def _mined(root: Path, mining: dict, labels_csv) -> ExportPlan:
    """A ``mine`` subset: its listed files, each the cell it was mined as."""
    from robustlab.data.labels import get_label_space
    from robustlab.data.sources import discover
    from robustlab.shifts.registry import get_shift
    from robustlab.workflows.evaluate.mined import _protocol, cell_of

    space = get_label_space(mining.get("label_space") or "imagenet1k")
    listed = discover(root, labels_csv=labels_csv)
    where = {s.id: cell_of(s.id) for s in listed}
    provenance = {k: v for k, v in mining.items() if k not in ("kept", "candidates", "table")} | {
        "command": "mine"
    }
    if all(sh == CLEAN_SHIFT for _, sh, _ in where.values()):
        plan = ExportPlan(
            root=root,
            origin="mined",
            suite=None,
            suite_version=None,
            label_space=space,
            seed=None,
            protocol=_clean_protocol(space),
            provenance=provenance,
        )
        return _clean_set(root, space, labels_csv, plan)
    protocol = _protocol(root, mining)  # as the surrogates saw the files
    plan = ExportPlan(
        root=root,
        origin="mined",
        suite=mining.get("suite"),
        suite_version=str(mining.get("suite_version") or "") or None,
        label_space=space,
        seed=0,
        protocol=protocol,
        provenance=provenance,
    )
    reviews = _reviews(listed)
    by_source: dict[str, list] = {}
    for s in listed:
        by_source.setdefault(where[s.id][0], []).append(s)
    for sid in sorted(by_source):
        files = by_source[sid]
        classes = {f.class_name for f in files}
        if len(classes) > 1:
            raise InputError(
                f"the labels CSV gives the files of {sid} different classes "
                f"({', '.join(f'{f.id}: {f.class_name}' for f in files)})",
                hint="give every cell of one source image the same class",
            )
        label = _label(files[0], space)
        for f in sorted(files, key=lambda f: (where[f.id][1] != CLEAN_SHIFT, f.id)):
            _, sh, lv = where[f.id]
            params = None
            if sh != CLEAN_SHIFT:
                params = get_shift(sh).preset(getattr(protocol, "preset", None)).params.get(lv)
            plan.items.append(
                Item(
                    sid,
                    f.class_name,
                    label,
                    sh,
                    level_key(lv),
                    Path(f.path),
                    f.id,
                    None,
                    params,
                    None,
                    reviews.get(f.id),
                    read="file",
                )  # fmt: skip
            )
    return plan


__all__ = ["ExportPlan", "Item", "plan_export"]
