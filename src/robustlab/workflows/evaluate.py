"""``robustlab.workflows.evaluate``: :func:`robustlab.evaluate` measures a model on clean images and
on every cell of a suite.

This is the Python face of ``robustlab evaluate``. Everything a user can get wrong is
checked before the database is touched (unknown model or suite, missing weights, empty
folder, a label outside the label space), so a run that fails to start writes nothing.

Example:
    >>> import robustlab
    >>> df = robustlab.evaluate("lite0", "photos/", suite="imagenet-c",
    ...                         shifts=["gaussian_noise"], levels=[1, 3])  # doctest: +SKIP
    >>> df[["shift", "level", "n", "top1"]]  # top1 is a fraction in [0, 1]  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustlab.errors import InputChangedError, InputError, MissingResourceError, StoreError
from robustlab.run.plan import RunPlan
from robustlab.store import CLEAN_SHIFT, DEFAULT_DB, Store

log = logging.getLogger(__name__)


def default_workers() -> int:
    """One worker per spare core (at least one): the main process runs the forward pass
    (:func:`robustlab.run.lifeline.default_workers`, the default of every command)."""
    from robustlab.run.lifeline import default_workers as default

    return default()


def _resolve_suite(suite, shifts, levels, available=None):
    from robustlab.shifts.registry import available_shifts, get_shift, needs_resource
    from robustlab.suites import Protocol, get_suite

    if suite is None:
        if shifts:
            raise InputError("--shift needs --suite (which suite's cells to pick from)")
        return None, Protocol(), [(CLEAN_SHIFT, 0)]
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    names = s.match(shifts or None)  # the selection grammar: names, families, globs, groups
    if available is None:  # on the fly: skip shifts whose tool (an inpainter) is not configured
        kept = available_shifts(names, log=log)
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
    return s, s.protocol, [(CLEAN_SHIFT, 0), *s.cells()]


def _index_agrees(class_name: str, index: int, label: int) -> bool:
    """Whether a CSV row's ``index`` may mean its class: the label space's index of the
    class, or its ImageNet-1k index (the usual meaning of an ImageNet CSV's index column)."""
    if index == label:
        return True
    from robustlab.data.labels import get_label_space

    try:
        return int(get_label_space("imagenet1k").index_of(class_name)) == index
    except (KeyError, ValueError):
        return False


# ImageNet-D's published layout: <subset>/<class>/<file>, the class one folder down.
IMAGENET_D_SUBSETS = frozenset({"background", "texture", "material"})


def _subset_classes(samples, space):
    """Samples of ImageNet-D's ``<subset>/<class>/<file>`` tree with the class taken from the
    folder inside the subset (an ImageFolder reading would call every image "background").

    Only for the ``imagenet-d`` label space, and only when every sample sits two folders deep
    under a subset folder; anything else is returned as it is.
    """
    import dataclasses
    from pathlib import PurePosixPath

    if getattr(space, "name", None) != "imagenet-d" or not samples:
        return samples
    parts = [PurePosixPath(s.id).parts for s in samples]
    if not all(len(p) == 3 and p[0] in IMAGENET_D_SUBSETS for p in parts):
        return samples
    out = type(samples)([dataclasses.replace(s, class_name=p[1]) for s, p in zip(samples, parts)])
    for attr in ("skipped", "layout", "labels_csv"):
        if hasattr(samples, attr):
            setattr(out, attr, getattr(samples, attr))
    return out


def _label_space_hint(class_name: str, space_name: str) -> str | None:
    """``--label-space imagenet1k`` when the class is an ImageNet-1k class (ImageNet photos
    evaluated with a suite whose own label space is another, such as imagenet9)."""
    if space_name == "imagenet1k":
        return None
    from robustlab.data.labels import get_label_space

    try:
        get_label_space("imagenet1k").index_of(class_name)
    except (KeyError, ValueError):
        return None
    return (
        f"{class_name!r} is an ImageNet-1k class: pass --label-space imagenet1k "
        "(label_space='imagenet1k' in Python)"
    )


def _labels_for(samples, space, generated_from: Path | None = None) -> list[int]:
    """Label index per sample in ``space``; one-line ValueError for the first bad one.

    ``generated_from``: the source folder when the samples are a generated folder's (made
    with ``generate --unlabelled``), so an image without a label names what to pass."""
    n_classes = len(space.classes)
    out = []
    for s in samples:
        # The class name (a wnid, a readable name) is looked up in the label space; a bare
        # CSV index is used only when no class is given, since it may index another space.
        if s.class_name is not None:
            try:
                label = int(space.index_of(s.class_name))
            except (KeyError, ValueError):
                raise InputError(
                    f"{s.id}: class {s.class_name!r} is not in label space {space.name!r}",
                    hint=_label_space_hint(s.class_name, space.name),
                ) from None
            if s.label is not None and not _index_agrees(s.class_name, int(s.label), label):
                raise InputError(
                    f"labels CSV row {s.id!r}: index {s.label} contradicts class "
                    f"{s.class_name!r} (index {label} in label space {space.name!r})",
                    hint="fix the row, or drop the index column",
                )
        elif s.label is not None:
            label = int(s.label)
            if not 0 <= label < n_classes:
                raise InputError(
                    f"{s.id}: label {label} is outside label space {space.name!r} "
                    f"(0..{n_classes - 1})"
                )
        elif generated_from is not None:
            raise InputError(
                f"{s.id} has no label: the folder was generated from unlabelled images "
                f"({generated_from})",
                hint="pass --labels CSV (file,label) naming their classes",
            )
        else:
            raise InputError(
                f"{s.id} has no label",
                hint="use a class-folder tree (<class>/<file>) or pass --labels CSV (file,label)",
            )
        out.append(label)
    return out


GENERATE_MANIFEST = "manifest.json"


def read_generated(root: Path) -> dict | None:
    """The manifest of a folder written by ``robustlab generate``, or None for a source folder."""
    import json

    path = root / GENERATE_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if not str(manifest.get("format", "")).startswith("robustlab-generate/"):
        return None
    return manifest


@dataclass(frozen=True)
class ModelRequest:
    """The model of a run as asked for; each planner loads it once it knows the label space.

    Attributes:
        model: A model spec (``"lite0"``, ``"timm:resnet50"``) or a loaded Model.
        weights, device, batch_size: Passed to :func:`robustlab.models.load_model`.
        inference: How the forward pass computes (:func:`_parse_inference`); None keeps a
            loaded model's own setting.
        defences: ``preprocess`` and ``tta`` objects (:func:`_parse_defences`).
    """

    model: Any
    weights: Any = None
    device: str | None = None
    batch_size: int | None = None
    inference: Any = None
    defences: dict[str, Any] = field(default_factory=dict)

    def load(self, space) -> tuple[Any, dict | None]:
        """(the model behind its defences, the defence record or None)."""
        model = self.model
        if isinstance(model, str):
            from robustlab.models import load_model

            model = load_model(
                model,
                weights=self.weights,
                device=self.device,
                label_space=space,
                batch_size=self.batch_size,
            )
        _set_inference(model, self.inference)
        return _defended(model, self.defences)


@dataclass
class _Source:
    """A source folder, or a generated folder read back to its source: what the cells of a
    run on it are and where its images come from."""

    root: Path  # the source images (a generated folder's source)
    suite: Any  # the Suite, or None for a clean run
    protocol: Any
    cells: list[tuple[str, Any]]
    seed: int
    labels_csv: Any
    masks: Any
    manifest: dict | None = None  # a generated folder's manifest
    generated_root: Path | None = None
    available: set[tuple[str, str]] = field(default_factory=set)  # its cells

    @property
    def kind(self) -> str:
        return "generated" if self.manifest is not None else "on-the-fly"


def _generated_plan(root: Path, manifest: dict, suite, seed, labels_csv, masks):
    """Suite, protocol, seed, source folder and CSV/masks of a generated folder, checked
    against what the caller asked for."""
    import dataclasses

    from robustlab.suites import Protocol, get_suite

    m_suite = (manifest.get("suite") or {}).get("name")
    if suite is None and not m_suite:
        raise InputError(f"{root}'s manifest names no suite", hint="pass --suite")
    if suite is not None and isinstance(suite, str) and suite != m_suite:
        raise InputChangedError(f"{root} was generated for suite {m_suite!r}, not {suite!r}")
    m_seed = int(manifest.get("seed", 0))
    if seed is not None and int(seed) != m_seed:
        raise InputChangedError(f"{root} was generated with seed {m_seed}, not {seed}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(
        **{k: v for k, v in (manifest.get("protocol") or {}).items() if k in fields}
    )
    data = manifest.get("data") or {}
    source = Path(data.get("root") or "")
    if not source.is_dir():
        raise InputError(
            f"the source images of {root} ({source}) are not there; the clean "
            "cell is read from them"
        )
    available = {(c["shift"], str(c["level"])) for c in manifest.get("cells", [])}
    return (
        (suite if suite is not None else get_suite(str(m_suite))),
        protocol,
        m_seed,
        source,
        labels_csv or data.get("labels_csv"),
        masks or data.get("masks"),
        available,
    )


def _check_seed(seed) -> None:
    if seed is not None and (
        isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
    ):
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}")


def _data_folder(data) -> Path:
    root = Path(data).expanduser()
    if not root.is_dir():
        raise MissingResourceError(
            f"data folder {root} does not exist"
            if not root.exists()
            else f"data folder {root} is not a folder"
        )
    return root


def plan_run(
    model,
    data,
    *,
    suite=None,
    seed: int | None = None,
    shifts=None,
    levels=None,
    labels_csv=None,
    masks=None,
    label_space=None,
    weights=None,
    device=None,
    batch_size=None,
    preprocess=None,
    tta=None,
    shift_path: dict | None = None,
    precision: str | None = None,
    compile: bool = False,
    protocol=None,
) -> RunPlan:
    """Validate everything and build what a run needs, without touching the database.

    ``protocol``: how the model sees the images, replacing the benchmark's own
    (:func:`robustlab.suites.parse_protocol`: a name such as ``model`` or ``imagenet-c``, or
    ``key=value`` pairs); part of the run identity, so an override is a run of its own.
    Without it each benchmark uses its official protocol: the suite's, ImageNet-D's (the
    model's own eval transform) for clean runs on the ``imagenet-d`` label space, ImageNet-E's
    rule for the published archive.

    ``preprocess`` and ``tta`` name test-time defences (:mod:`robustlab.defences`); the
    model is wrapped in them and their record joins the run identity. ``shift_path``:
    :meth:`robustlab.run.device_shifts.ShiftDevice.describe` when the shifts run batched on
    a device (part of the run id: its pixels are not the exact path's), None for the exact
    path. ``precision`` and ``compile``: how the forward pass computes
    (:mod:`robustlab.models.inference`); a non-default one joins the run identity. None
    and False keep a loaded model's own setting (fp32 and not compiled unless it was
    given another with ``set_inference``).

    The folder decides the planner: the ImageNet-E archive (:func:`_archive_plan`), a
    published layout (:func:`_published_plan`), else source images on the fly or a
    generated folder (:func:`_source_plan`); each returns the same :class:`RunPlan`.
    """
    from robustlab.data.imagenet_e import is_archive

    _check_seed(seed)
    request = ModelRequest(
        model,
        weights=weights,
        device=device,
        batch_size=batch_size,
        inference=_parse_inference(precision, compile),
        defences=_parse_defences(model, preprocess, tta),
    )
    root = _data_folder(data)
    if shift_path and (is_archive(root) or read_generated(root) is not None):
        raise InputError(
            f"{root} holds shifted images already; --shift-device applies shifts on the fly",
            hint="leave out --shift-device",
        )
    if is_archive(root):
        if suite is not None and suite != "imagenet-e":
            raise InputError(
                f"{root} is an ImageNet-E archive; its level folders are the cells "
                f"(leave out --suite {suite})"
            )
        return _archive_plan(
            request, root, shifts=shifts, levels=levels, label_space=label_space, protocol=protocol
        )
    manifest = read_generated(root)
    # A labels CSV says what the samples are and their classes: the folder is then read as
    # a labelled folder (mine's hard subset keeps the <shift>/<level>/ folders of a
    # published ImageNet-C, and its hard.csv names the files), never as a published layout.
    published = manifest is None and labels_csv is None
    layout = published_layout(root, suite, shift_path) if published else None
    if layout is not None and layout.name == "imagenet-d":
        # ImageNet-D has no cells of its own: a class tree under subset folders, read with
        # its own label space (the subset is the first folder of each sample id).
        label_space = label_space or layout.label_space
    elif layout is not None:
        if masks:
            raise InputError(
                f"{root} holds the published {layout.title} layout: its files are the "
                "pixels, so --masks does not apply",
                hint="leave out --masks",
            )
        return _published_plan(
            request, root, layout, shifts=shifts, levels=levels, label_space=label_space
        )
    source = _read_source(root, manifest, suite, seed, shifts, levels, labels_csv, masks)
    return _source_plan(request, source, label_space, shift_path, protocol, layout)


def _read_source(root: Path, manifest, suite, seed, shifts, levels, labels_csv, masks) -> _Source:
    """The cells of a run on a source folder, or on a generated folder (then checked
    against its manifest: every cell asked for must have been generated)."""
    import dataclasses

    from robustlab.suites import VIEW_FIELDS

    generated_root, available = None, set()
    held_only = False
    if manifest is not None:
        suite, gen_protocol, seed, source, labels_csv, masks, available = _generated_plan(
            root, manifest, suite, seed, labels_csv, masks
        )
        generated_root = root.resolve()
        if not shifts and not levels and any(s != CLEAN_SHIFT for s, _ in available):
            # Nothing asked for: the cells the folder holds (a folder generated with 4
            # corruptions is evaluated on those 4), never a request for every cell of the
            # suite that the user would have to narrow with flags the manifest could tell.
            shifts, levels, held_only = _held_selection(available)
    on_disk = available if manifest is not None else None
    suite_obj, protocol, cells = _resolve_suite(suite, shifts, levels, on_disk)
    if held_only:  # shifts generated at different levels: only the pairs that exist
        cells = [(s, lv) for s, lv in cells if s == CLEAN_SHIFT or (s, str(lv)) in available]
    if manifest is not None:
        # The files fix the frame; how a model sees them is the suite's rule.
        protocol = dataclasses.replace(
            gen_protocol, **{k: getattr(protocol, k) for k in VIEW_FIELDS}
        )
        missing = [
            f"{s}/{lv}" for s, lv in cells if s != CLEAN_SHIFT and (s, str(lv)) not in available
        ]
        if missing:
            raise InputError(
                f"{root} has no generated images for {', '.join(missing[:6])}"
                + (f" and {len(missing) - 6} more" if len(missing) > 6 else ""),
                hint=_generated_hint(available),
            )
        root = source
    return _Source(
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


def _source_samples(src: _Source, shift_objs, label_space):
    """(samples, labels, label space) of a source folder, with the masks its shifts need."""
    from robustlab.data.labels import get_label_space
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
    from robustlab.shifts.generative.tiny import warn_if_drawn_by_random

    warn_if_drawn_by_random(root)  # a synth folder drawn by tiny random weights: say so
    if needs_mask and src.manifest is None and not any(s.mask_path is not None for s in samples):
        raise InputError(
            f"none of the {len(samples)} images has a mask in {masks} (make them "
            f"with `robustlab masks --data {root} --out {masks}`)"
        )
    space_name = label_space or (src.suite.label_space if src.suite else "imagenet1k")
    space = get_label_space(space_name) if isinstance(space_name, str) else space_name
    samples = _subset_classes(samples, space)
    generated_from = root if src.manifest is not None else None
    return samples, _labels_for(samples, space, generated_from), space


def _source_plan(request: ModelRequest, src: _Source, label_space, shift_path, override, layout):
    """:func:`plan_run` for source images (shifts computed on the fly) or a generated
    folder (shifted cells read from its files, the clean cell from its source)."""
    from robustlab.run.tasks import CellImages
    from robustlab.shifts.registry import describe_resources, get_shift, recorded_resources

    shift_objs = [get_shift(s) for s, _ in src.cells if s != CLEAN_SHIFT]
    if shift_path:
        from robustlab.run.device_shifts import check_shifts

        check_shifts(sh.name for sh in shift_objs)
    samples, labels, space = _source_samples(src, shift_objs, label_space)
    protocol = _chosen_protocol(src.protocol, override, src.suite, space, src.manifest, src.root)
    model, defence = request.load(space)
    note_trained_preprocess(request.weights, defence)
    record = _source_record(
        model, defence, src, samples, labels, space, protocol, override, shift_path
    )
    # Pixels drawn by a configured tool (ai_bg's inpainter, bg_complexity's diffusion model,
    # the attribute edits' hole-fill backend) depend on it: on the fly the configured one
    # draws them (described here), from a generated folder the one its manifest names.
    if src.manifest is not None:
        for key in recorded_resources(shift_objs):
            record.config[key] = src.manifest.get(key)
    else:
        record.config.update(describe_resources(shift_objs))
    if shift_path:
        record.config["shift_path"] = shift_path
    if layout is not None:  # ImageNet-D's published tree, recognised (not part of the id)
        record.config["published"] = {"layout": layout.name, "benchmark": layout.title}
    needs_donors = any(sh.extra.get("donor_rule") for sh in shift_objs)
    images = CellImages(
        protocol,
        src.seed,
        generated_root=src.generated_root,
        donors=samples if needs_donors else None,
        with_mask=any("mask" in sh.needs for sh in shift_objs),
        generated_skips=_generated_skips(src.manifest) if src.manifest is not None else None,
    )
    return RunPlan(
        model=model,
        samples=samples,
        labels=labels,
        cells=src.cells,
        protocol=protocol,
        suite=src.suite,
        record=record,
        images=images,
        label_space=space,
    )


def _source_inputs(model, defence, src: _Source, samples, labels, protocol, shift_path):
    """(the parts of a source run's inputs, kept apart for :func:`note_earlier_runs`; the
    data fingerprint): what decides the pixels and labels, by content, so a replaced photo
    or mask, another masks folder or a regenerated folder is another run, never a resumed
    one."""
    from robustlab.manifest import generated_identity
    from robustlab.run.content_hash import hash_files
    from robustlab.run.identity import (
        data_fingerprint,
        inference_identity,
        input_parts,
        model_precision,
        run_id,
    )

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
        protocol=protocol.describe(),
        preprocessing=preprocessing_record(getattr(model, "undefended", model).preprocessing),
        precision=model_precision(model),
        compile=inference_identity(model).get("compile"),
        source=src.kind,
        defence=defence,
        generated=run_id(generated_identity(manifest)) if manifest is not None else None,
    )
    if shift_path:
        from robustlab.store.naming import shift_path_label

        inputs["shift_path"] = shift_path_label(shift_path)
    return inputs, fingerprint


def _source_record(
    model, defence, src: _Source, samples, labels, space, protocol, override, shift_path
):
    """The run record of a source or generated folder: its identity (model, the content of
    every image and mask, labels, seed, protocol, source kind, optional keys only when
    used, so runs without them keep their ids) and description."""
    from robustlab import __version__
    from robustlab.run.identity import inference_identity, make_record

    inputs, fingerprint = _source_inputs(model, defence, src, samples, labels, protocol, shift_path)
    preprocessing = {"model": inputs["preprocessing"], "protocol": inputs["protocol"]}
    masks_dir = inputs["masks_dir"]
    identity = {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "suite": src.suite.name if src.suite else None,
        "suite_version": src.suite.version if src.suite else None,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "label_space": space.name,
        "seed": src.seed,
        "preprocessing": preprocessing,
        "source": src.kind,
        "masks": masks_dir,
        "precision": inputs["precision"],
        "generated": inputs["generated"],
    }
    if defence:  # absent for a plain model, so plain runs keep the ids they always had
        identity["defence"] = defence
    identity.update(inference_identity(model))  # likewise: only for a compiled model
    if src.generated_root is not None:  # a generated folder's cells are read from its files
        identity["generated_files"] = inputs["generated_files"] = _generated_files_fingerprint(
            src.generated_root, samples, src.available, protocol
        )
    if shift_path:  # only then: exact runs keep the ids they always had
        identity["shift_path"] = shift_path
    labels_csv = str(getattr(samples, "labels_csv", None) or src.labels_csv or "") or None
    return make_record(
        identity,
        data_root=src.root,
        config={
            "source": src.kind,
            "generated_root": str(src.generated_root or ""),
            "labels_csv": labels_csv,
            "masks": masks_dir,
            "inputs": inputs,
            "model": _describe(model),
            **({"defence": defence} if defence else {}),
            "cells": [[s, str(lv)] for s, lv in src.cells],
            "protocol": protocol_record(protocol, override),
        },
        n_samples=len(samples),
        # Files left out while listing the folder (stray files, CSV rows without a file,
        # loops, bad names): the runner adds them to the run's skip record.
        skipped=getattr(samples, "skipped", []),
    )


# Benchmarks without shifts whose official protocol is not ImageNet-C's, by label space.
CLEAN_PROTOCOLS = {"imagenet-d": "model"}


def _chosen_protocol(protocol, override, suite_obj, space, manifest, root):
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


def preprocessing_record(pre) -> dict:
    """The model's preprocessing in the run identity: its ``describe()`` (which leaves
    fields added later out at their defaults), else its fields."""
    from robustlab.run.identity import fields_of

    return pre.describe() if hasattr(pre, "describe") else fields_of(pre)


def protocol_record(protocol, override) -> dict:
    """``runs.config["protocol"]``: the protocol's name, one-line label, whether the user
    overrode the benchmark's own, and its fields (the identity has them too)."""
    return {
        "name": protocol.name,
        "label": protocol.label(),
        "override": None if override is None else str(override),
        **protocol.describe(),
    }


def _generated_skips(manifest: dict) -> dict[tuple[str, str | None, str | None], str]:
    """Why the generate runs of a folder wrote no file for a cell (its manifest's
    ``failures``) or for a whole source (``skipped_inputs``): the reasons a run on the
    folder records for those cells (:class:`robustlab.run.tasks.CellImages`)."""
    out: dict[tuple[str, str | None, str | None], str] = {}
    for d in manifest.get("skipped_inputs") or []:
        if isinstance(d, dict) and d.get("id") is not None and d.get("reason"):
            out[(str(d["id"]), None, None)] = str(d["reason"])
    for d in manifest.get("failures") or []:
        if isinstance(d, dict) and d.get("id") is not None and d.get("reason"):
            out[(str(d["id"]), str(d.get("shift")), str(d.get("level")))] = str(d["reason"])
    return out


def _held_selection(available) -> tuple[list[str], list, bool]:
    """``(shifts, levels, True)``: the selection of every shift and level a generated folder
    holds, each level as its shift's table names it (``1``, ``"90"``; the manifest writes
    text)."""
    from robustlab.shifts.registry import get_shift

    held = [(s, str(lv)) for s, lv in available if s != CLEAN_SHIFT]
    shifts = sorted(dict.fromkeys(s for s, _ in held))
    levels: dict[str, Any] = {}
    for s, lv in held:
        own = {str(x): x for x in get_shift(s).levels}
        levels.setdefault(lv, own.get(lv, lv))
    return shifts, [levels[k] for k in sorted(levels, key=_level_order)], True


def _generated_hint(available) -> str:
    """A request the folder can answer: ``--shift A,B --level 1,3`` naming shifts that were
    generated at the same levels (the largest such group), so the hint runs as printed."""
    levels: dict[str, set[str]] = {}
    for sh, lv in available:
        if sh != CLEAN_SHIFT:
            levels.setdefault(sh, set()).add(str(lv))
    groups: dict[tuple[str, ...], list[str]] = {}
    for sh in sorted(levels):
        groups.setdefault(tuple(sorted(levels[sh], key=_level_order)), []).append(sh)
    lvs, shifts = max(groups.items(), key=lambda g: (len(g[0]) * len(g[1]), -len(g[0])))
    more = " (other shifts were generated at other levels)" if len(groups) > 1 else ""
    return (
        f"evaluate what was generated: --shift {','.join(shifts)} --level {','.join(lvs)}"
        f" (shifts={shifts}, levels={[int(v) if v.isdigit() else v for v in lvs]} in Python)"
        f"{more}"
    )


def _level_order(level: str):
    """Numeric levels in numeric order, then any others by name."""
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


def _generated_files_fingerprint(root: Path, samples, available, protocol) -> str:
    """Fingerprint of the *content* of every file of a generated folder that this run may
    read: each cell its manifest lists, for each sample evaluated.

    Why: the manifest says how the files were made, not what they hold now. A cell file
    overwritten with another image (by hand, by a tool, by a second generate into a copy)
    must give another run id, never a resumed run that keeps the old file's predictions,
    exactly as a changed source photo does. Every listed cell counts, not only the cells
    asked for, so that asking for more cells later still extends the same run; a missing
    file counts as ``missing``. The hashes are cached like the sources'
    (:mod:`robustlab.run.content_hash`), so a rerun reads no file again.
    """
    from robustlab.pipeline import cell_path
    from robustlab.run.content_hash import hash_files
    from robustlab.run.identity import data_fingerprint

    cells = sorted(c for c in available if c[0] != CLEAN_SHIFT)
    keys = [(s, sh, lv) for s in samples for sh, lv in cells]
    digests = hash_files([cell_path(root, s, sh, lv, protocol) for s, sh, lv in keys])
    return data_fingerprint((s.id, sh, lv, d) for (s, sh, lv), d in zip(keys, digests))


def _parse_defences(model, preprocess, tta) -> dict:
    """The defence objects named by ``preprocess`` / ``tta``, checked before any work."""
    from robustlab.defences import DefendedModel, get_preprocess, get_tta

    pixels, views = get_preprocess(preprocess), get_tta(tta)
    if isinstance(model, DefendedModel) and (pixels is not None or views is not None):
        raise InputError(
            "the model is already defended; pass the plain model with "
            "preprocess=/tta=, or the defended model alone"
        )
    return {"preprocess": pixels, "tta": views}


def _parse_inference(precision, compile):
    """The :class:`~robustlab.models.inference.Inference` asked for, or None when neither
    argument was given (a loaded model then keeps its own)."""
    from robustlab.models.inference import get_inference

    if precision is None and not compile:
        return None
    return get_inference(precision, compile)


def _set_inference(model, inference) -> None:
    """Give ``model`` its precision and compile setting (None: leave it as it is)."""
    if inference is None:
        return
    if not hasattr(model, "set_inference"):
        if inference.default:
            return
        raise InputError(
            f"{getattr(model, 'spec', type(model).__name__)} cannot take a precision or "
            "compile setting: it is not a robustlab Model",
            hint="leave precision and compile out",
        )
    model.set_inference(inference)


def _defended(model, defences: dict):
    """(model behind its defences, the defence record or None)."""
    from robustlab.defences import defend

    model = defend(model, **defences)
    return model, getattr(model, "defence", None)


def note_trained_preprocess(weights, defence: dict | None) -> str | None:
    """Warn, in one line, when a checkpoint of ``robustlab train`` was fine-tuned behind
    another pixel defence than the one it is evaluated behind (a CLAHE-trained model
    evaluated on plain images, or the reverse): both are valid runs, but rarely the one
    meant. Reads the training record written beside the checkpoint; returns the line."""
    import json

    if not weights:
        return None
    path = Path(weights).expanduser().with_suffix(".json")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "base_model" not in record or "preprocess" not in record:
        return None
    from robustlab.defences import defence_label
    from robustlab.run.identity import canonical_json

    trained = record.get("preprocess")
    used = (defence or {}).get("preprocess")
    if canonical_json(trained) == canonical_json(used):
        return None
    name = defence_label({"preprocess": trained})
    used_name = defence_label({"preprocess": used})
    line = (
        f"{weights} was fine-tuned on {name or 'plain'} images (its training record "
        f"{path.name}) but is evaluated "
        f"{'with --preprocess ' + used_name if used_name else 'without --preprocess'}"
        f"; {'pass --preprocess ' + name if name else 'leave --preprocess out'} to measure it "
        "as it was trained"
    )
    log.warning(line)
    return line


ARCHIVE_SUITE = "imagenet-e-archive"


def _files_fingerprint(samples, labels, paths) -> str:
    """Fingerprint of a layout whose files are the pixels: per sample its id, class, label
    and the content hash of each of its files (``paths``: one row of files per sample)."""
    from robustlab.run.content_hash import hash_files
    from robustlab.run.identity import data_fingerprint

    digests = iter(hash_files([p for row in paths for p in row]))
    return data_fingerprint(
        (s.id, s.class_name, lab, *(next(digests) for _ in row))
        for s, lab, row in zip(samples, labels, paths)
    )


def _archive_plan(
    request: ModelRequest, root: Path, *, shifts=None, levels=None, label_space=None, protocol=None
) -> RunPlan:
    """:func:`plan_run` for the published ImageNet-E archive: each level folder is a cell.

    ``protocol``: an override of the view (the archive's files are the frame)."""
    from robustlab.data.imagenet_e import read_archive
    from robustlab.data.labels import get_label_space
    from robustlab.run.tasks import ArchiveImages
    from robustlab.suites import select_cells

    archive = read_archive(root)
    cells: list[tuple[str, Any]] = list(
        select_cells(list(archive.cells), shifts or None, levels or None, where="the archive")
    )
    if not cells:
        raise InputError(f"{root}: no level folder matches the requested shifts/levels")
    cells = [(CLEAN_SHIFT, 0), *cells]
    samples = archive.samples
    space_name = label_space or "imagenet1k"
    space = get_label_space(space_name) if isinstance(space_name, str) else space_name
    labels = _labels_for(samples, space)
    model, defence = request.load(space)
    chosen = None
    if protocol is not None:
        from robustlab.suites import ARCHIVE_PROTOCOL, parse_protocol

        chosen = parse_protocol(protocol, ARCHIVE_PROTOCOL)
        if chosen.resize or chosen.crop:
            raise InputError(
                "the ImageNet-E archive's files are used as they are; --protocol can "
                "change only how the model sees them (view, view_resize, view_crop)",
                hint="e.g. --protocol view=model or --protocol view_resize=none,view_crop=none",
            )
    images = ArchiveImages(archive.root.resolve(), archive.folders, chosen)
    # The archive's files are the pixels: hash the original and every level file per sample.
    shifted = [c for c in cells if c[0] != CLEAN_SHIFT]
    paths = [[s.path, *(images.path(s, sh, lv) for sh, lv in shifted)] for s in samples]
    record = _archive_record(
        model,
        defence,
        root,
        archive,
        cells,
        space,
        images.protocol,
        protocol,
        _files_fingerprint(samples, labels, paths),
    )
    return RunPlan(
        model=model,
        samples=samples,
        labels=labels,
        cells=cells,
        protocol=images.protocol,
        suite=None,
        record=record,
        images=images,
        label_space=space,
    )


def _archive_record(model, defence, root, archive, cells, space, protocol, override, fingerprint):
    """The archive run's record; its identity never held a precision unless autocast is on,
    nor cells (they extend the run), so ids of earlier archive runs stay."""
    from robustlab import __version__
    from robustlab.run.identity import inference_identity, make_record, model_precision

    preprocessing = {
        "model": preprocessing_record(getattr(model, "undefended", model).preprocessing),
        "protocol": protocol.describe(),
    }
    identity = {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "suite": ARCHIVE_SUITE,
        "suite_version": "1",
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "label_space": space.name,
        "seed": 0,
        "preprocessing": preprocessing,
        "source": ARCHIVE_SUITE,
    }
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
            "folders": {f"{s}/{lv}": f for (s, lv), f in archive.folders.items()},
            "model": _describe(model),
            "cells": [[s, str(lv)] for s, lv in cells],
            **({"defence": defence} if defence else {}),
            "protocol": protocol_record(protocol, override),
            "precision": precision,
            **inference_identity(model),
            "discover_skipped": [list(x) for x in archive.skipped],
        },
        n_samples=len(archive.samples),
        skipped=archive.skipped,  # counted like a source folder's
    )


def _published_plan(
    request: ModelRequest, root: Path, layout, *, shifts=None, levels=None, label_space=None
) -> RunPlan:
    """:func:`plan_run` for a published benchmark folder (:mod:`robustlab.data.published`):
    each cell folder is a cell, its files are the pixels, the layout names the label space.

    Samples whose class folder is not a class of the label space are left out with that
    reason (a published set's class list is fixed, so a stray folder is not the user's
    label error); samples missing from a cell folder are counted skips of that cell.
    """
    from robustlab.data.labels import get_label_space
    from robustlab.data.published import read_published
    from robustlab.run.tasks import PublishedImages
    from robustlab.suites import Protocol, select_cells

    pub = read_published(root, layout)
    cells: list[tuple[str, Any]] = list(
        select_cells(
            list(pub.cells), shifts or None, levels or None, where=f"{root} ({layout.title})"
        )
    )
    if pub.clean is not None:
        cells = [(CLEAN_SHIFT, 0), *cells]
    if not cells:
        raise InputError(f"{root}: no {layout.title} folder matches the requested shifts/levels")
    space_name = label_space or layout.label_space
    space = get_label_space(space_name) if isinstance(space_name, str) else space_name
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
    model, defence = request.load(space)
    protocol = Protocol(**{"format": "png", **layout.protocol})
    images = PublishedImages(pub.root.resolve(), pub.folders, pub.clean, pub.names, protocol)
    # The published files are the pixels: every file of every evaluated cell is hashed.
    wanted = [str(pub.clean) if sh == CLEAN_SHIFT else pub.folders[(sh, lv)] for sh, lv in cells]
    paths = [[pub.file(s.id, f) for f in wanted] for s in samples]
    record = _published_record(
        model,
        defence,
        root,
        layout,
        pub,
        cells,
        space,
        images.protocol,
        _files_fingerprint(samples, labels, paths),
        len(samples),
        skipped,
    )
    return RunPlan(
        model=model,
        samples=samples,
        labels=labels,
        cells=cells,
        protocol=images.protocol,
        suite=None,
        record=record,
        images=images,
        label_space=space,
    )


def _published_record(
    model, defence, root, layout, pub, cells, space, protocol, fingerprint, n_samples, skipped
):
    """A published layout run's record: its identity names the evaluated cells (their
    files are hashed into the fingerprint) and the precision."""
    from robustlab import __version__
    from robustlab.run.identity import (
        fields_of,
        inference_identity,
        make_record,
        model_precision,
    )

    preprocessing = {
        "model": fields_of(getattr(model, "undefended", model).preprocessing),
        "protocol": protocol.describe(),
    }
    identity = {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "suite": layout.suite,
        "suite_version": "1",
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "label_space": space.name,
        "seed": 0,
        "preprocessing": preprocessing,
        "source": layout.suite,
        "cells": [[s, str(lv)] for s, lv in cells],
        "precision": model_precision(model),
    }
    if defence:
        identity["defence"] = defence
    identity.update(inference_identity(model))
    return make_record(
        identity,
        data_root=root,
        config={
            "source": "published",
            "published": {
                "layout": layout.name,
                "benchmark": layout.title,
                "benchmark_suite": layout.benchmark_suite,
                "layout_source": layout.source,
                "clean": pub.clean,
                "folders": {f"{s}/{lv}": f for (s, lv), f in pub.folders.items()},
            },
            "model": _describe(model),
            "cells": [[s, str(lv)] for s, lv in cells],
            **({"defence": defence} if defence else {}),
            "precision": identity["precision"],
            **inference_identity(model),
        },
        n_samples=n_samples,
        # Folders and files that are not part of the layout, and samples of other classes:
        # the runner adds them to the run's skip record.
        skipped=skipped,
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


def _describe(model) -> dict[str, Any]:
    try:
        return model.describe()
    except Exception:  # a description is nice to have, never a reason to fail
        return {"spec": model.spec}


def evaluate(
    model,
    data,
    *,
    suite=None,
    db=DEFAULT_DB,
    seed: int | None = None,
    shifts=None,
    levels=None,
    labels_csv=None,
    masks=None,
    label_space=None,
    weights=None,
    device=None,
    batch_size: int | None = None,
    workers: int | None = None,
    prefetch: int = 2,
    cells_per_task: int = 0,
    backend: str = "local",
    address: str | None = None,
    progress: bool | None = None,
    preprocess=None,
    tta=None,
    shift_device: str | None = None,
    shift_jpeg: str = "device",
    precision: str | None = None,
    compile: bool = False,
    protocol=None,
):
    """Evaluate ``model`` on the clean images in ``data`` and on every cell of ``suite``.

    Shifts are applied on the fly with :mod:`robustlab.pipeline` (nothing is written to
    disk), giving the same pixels, hence the same predictions, as reading back a folder
    made by ``robustlab generate`` with the same seed. Predictions are streamed to the
    DuckDB file ``db``; rerunning the same call resumes where an interrupted one stopped.

    Args:
        model: A model spec (``"lite0"``, ``"timm:resnet50"``, ...) or a loaded Model.
        data: Folder of source images (ImageFolder tree, or flat plus labels CSV), or a
            folder written by ``robustlab generate`` (its ``manifest.json`` names the suite,
            seed, protocol and source folder; shifted cells are read from its files and the
            clean cell from the source), or the published ImageNet-E archive (``ori/``,
            level folders and ``labels.txt``: each level folder is a cell, see
            :mod:`robustlab.data.imagenet_e`; suite and seed do not apply), or another
            published set as downloaded (ImageNet-C, ImageNet-9's bg_challenge,
            XIMAGENET-12: each cell folder a cell, with the benchmark's label space; an
            ImageNet-D tree gets the ``imagenet-d`` label space), see
            :mod:`robustlab.data.published`.
        suite: Suite name or YAML path; None evaluates the clean images only (for a
            generated folder: the suite it was generated for).
        db: Results database file (created on the first write).
        seed: Global seed of the seed rule (default 0; a generated folder's own seed).
        shifts, levels: Restrict the suite to some shifts / levels.
        labels_csv, masks: Passed to :func:`robustlab.data.sources.discover`.
        label_space: Label space name (default: the suite's, else ``imagenet1k``).
        weights, device, batch_size: Passed to :func:`robustlab.models.load_model`.
        workers: DataLoader worker processes (default: CPU cores - 1, at least 1); with
            ``backend="ray"`` and no ``address``, the CPUs of the Ray instance started on
            this machine (default: all).
        prefetch, cells_per_task: Execution details (never change results).
        backend: ``"local"`` (worker processes on this machine) or ``"ray"`` (a Ray
            cluster, :mod:`robustlab.run.ray_backend`): the same predictions and the same
            run id, so a run started on one may be finished on the other.
        address: The Ray cluster's ``HOST:PORT`` (``ray start --head`` prints it; None: a
            Ray instance on this machine). Only with ``backend="ray"``.
        progress: Show progress (default True): per-cell bars when stderr is a terminal,
            else a line every few seconds with done/total, rate and ETA.
        preprocess: Pixel defence applied to every image before the model: ``"clahe"``,
            ``"nlmeans"`` or ``"NAME:key=value,..."`` (:mod:`robustlab.defences`).
        tta: Test-time augmentation: ``"ten-crop"`` (softmax averaged over ten views).
            Either defence makes a run of its own (never mixed with the plain model's).
        shift_device: None (default): the exact path, shifts applied image by image in
            the workers, byte for byte the reference's. ``"cuda"`` or ``"cpu"``: workers
            only decode; the corruptions and mask scenes run batched as torch tensor
            operations on that device (:mod:`robustlab.shifts.batched`). Different pixels, the same
            statistics (benchmarks/README.md): such a run has its own run id and is
            labelled ``torch:<device>``. With ``backend="ray"`` the model actors apply them
            on their own device (``cuda``: their GPUs), with the same rows and run id.
        shift_jpeg: With ``shift_device``: ``"device"`` (nvJPEG on CUDA, libjpeg on the
            CPU) or ``"cpu"`` (libjpeg always) for the protocol's JPEG round trip.
        precision: ``"fp32"`` (default: the comparable number), ``"bf16"`` or ``"fp16"``:
            the forward pass under ``torch.autocast`` on the model's device, softmax and
            top-k in float32 (:mod:`robustlab.models.inference`). Torch models only; a
            run of its own, labelled ``@bf16`` in tables.
        compile: Run the forward pass through ``torch.compile`` (compiled before any
            work; a run of its own, labelled ``@compiled``).
        protocol: How the model sees the images, instead of the benchmark's official
            protocol (:mod:`robustlab.suites`: ImageNet-C's 256/224 frame and the model's
            resize; ImageNet-D's model's own eval transform; ImageNet-E's 256/224 view of
            the stored image): a name (``imagenet-c``, ``model``, ``imagenet-e``) or
            ``key=value`` pairs (``view=model``). A run of its own (another run id).

    Returns:
        A DataFrame with one row per cell of this run: model, suite, shift, level, n,
        top1, top5, error, as fractions in [0, 1] (``robustlab evaluate`` and
        ``robustlab results`` print them as percentages, in columns headed ``top1 %``;
        ``results --format csv/json`` keep the fractions) (``.attrs`` holds ``run_id``, ``skipped``, ``db``, and
        ``throughput``: this call's predictions, wall and predict seconds, rate and the
        share of the wall time the model was busy, see :func:`robustlab.run.progress.
        throughput_line`).
    """
    from robustlab.run.executors import check_backend

    check_backend(backend, address)
    settings = _shift_device(shift_device, shift_jpeg, preprocess, tta, backend)
    session: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if backend == "ray":
        from robustlab.run.ray_backend import plan_placement, ray_session

        # Connected, and the cluster's resources checked, before the images are hashed and
        # the model loaded: a cluster that cannot run the job says so at once.
        session = ray_session(address, int(workers) if workers else None)
    with session as resources:
        if resources is not None:
            plan_placement(
                resources, device, shift_device=None if settings is None else settings.device
            )
        # On Ray the driver's model only names the run and scores the predictions: it stays
        # on the CPU, the actors load it on the device asked for.
        plan = plan_run(
            model,
            data,
            suite=suite,
            seed=seed,
            shifts=shifts,
            levels=levels,
            labels_csv=labels_csv,
            masks=masks,
            label_space=label_space,
            weights=weights,
            device="cpu" if backend == "ray" else device,
            batch_size=batch_size,
            preprocess=preprocess,
            tta=tta,
            shift_path=settings.describe() if settings else None,
            precision=precision,
            compile=compile,
            protocol=protocol,
        )
        if settings is not None:
            _check_device_view(plan.protocol)
        if compile and backend != "ray":  # compiled now: a failure writes nothing
            plan.model.warm_up()
        options = _run_options(
            plan.model,
            batch_size=batch_size,
            workers=workers,
            prefetch=prefetch,
            cells_per_task=cells_per_task,
            backend=backend,
            address=address,
            device=device,
            progress=progress,
            shift_device=settings,
        )
        store = Store(db)
        summary = execute(plan, store, options)
    _store_generated_attributes(store, plan)
    table = run_table(store, summary.run_id, skipped=summary.skipped)
    table.attrs.update(
        {
            "n_written": summary.n_written,
            "resumed": summary.resumed,
            "stages": summary.stages,
            "throughput": summary.throughput,
            "protocol": (plan.record.config.get("protocol") or {}).get("label"),
        }
    )
    return table


def _run_options(model, *, batch_size, workers, progress, backend, **options):
    """How a plan is executed (:class:`robustlab.run.runner.RunOptions`), with evaluate's
    defaults: the model's batch size, one worker per spare core (none on Ray: its
    actors), progress on. Never part of the run identity."""
    from robustlab.run.runner import RunOptions

    default_workers_here = 0 if backend == "ray" else default_workers()
    run_options = RunOptions(
        batch_size=int(batch_size or getattr(model, "batch_size", None) or 32),
        workers=int(default_workers_here if workers is None else workers),
        backend=backend,
        progress=True if progress is None else bool(progress),
        **options,
    )
    if run_options.batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {run_options.batch_size}")
    return run_options


def _shift_device(shift_device, shift_jpeg, preprocess, tta, backend):
    """The batched shift path asked for (:class:`robustlab.run.device_shifts.ShiftDevice`),
    checked on this machine unless the Ray actors' devices run it; None for the exact path."""
    if shift_device is None:
        return None
    from robustlab.run.device_shifts import ShiftDevice

    if preprocess is not None or tta is not None:
        raise InputError(
            "--shift-device does not combine with --preprocess or --tta yet "
            "(the defences run after the exact path's shifts)",
            hint="leave --shift-device out to evaluate a defended model",
        )
    settings = ShiftDevice(str(shift_device), jpeg=shift_jpeg)
    if backend != "ray":  # on Ray: the model actors' devices (plan_placement, the actors)
        settings.check_here()
    return settings


def execute(plan: RunPlan, store: Store, options):
    """Run ``plan`` into ``store`` with ``options`` (:class:`robustlab.run.runner.RunOptions`:
    the local or the Ray executor, which consume the same plan) and return the runner's
    summary. Refuses a resume with another configured tool first, and says when an earlier
    run over the same folder had other inputs."""
    from robustlab.run.runner import Runner
    from robustlab.shifts.kernels import ensure_compiled_for

    _check_same_resources(store, plan.record)
    note_earlier_runs(store, plan.record)
    if getattr(plan.images, "generated_root", None) is None:  # shifts computed here
        ensure_compiled_for({s for s, _ in plan.cells}, progress=options.progress)
    return Runner(
        plan.model,
        plan.samples,
        plan.labels,
        plan.cells,
        plan.images,
        store,
        plan.record,
        options,
    ).run()


def _check_device_view(protocol) -> None:
    """The batched shift path resizes for the model itself (the model's resize only)."""
    from robustlab.suites import VIEW_FIELDS, Protocol

    if any(getattr(protocol, k) != getattr(Protocol(), k) for k in VIEW_FIELDS):
        raise InputError(
            f"--shift-device applies the model's resize only; protocol {protocol.label()} "
            "needs the exact path",
            hint="leave out --shift-device",
        )


def note_earlier_runs(store: Store, record) -> str | None:
    """Say, in one warning line, when this is a new run although an earlier run of the same
    model and suite over the same data folder exists with other inputs, and which differ.

    Why not refuse: both runs are valid measurements of different inputs, kept apart under
    their own run ids; what must never happen is the user reading the old numbers as the new
    ones, so the line names both run ids and the differences. Returns the line (or None).
    """
    from robustlab.run.identity import input_changes

    new = record.config.get("inputs")
    if not new or not store.exists() or store.get_run(record.run_id) is not None:
        return None
    runs = store.runs()
    if runs.empty:
        return None
    same = runs[
        (runs["data_root"] == record.data_root)
        & (runs["model_spec"] == record.model_spec)
        & (runs["weights_hash"].fillna("") == (record.weights_hash or ""))
        & (runs["suite"].fillna("") == (record.suite or ""))
        & (runs["run_id"] != record.run_id)
    ]
    for _, old in same.sort_values("started_at", ascending=False).iterrows():
        config = old["config"] if isinstance(old["config"], dict) else {}
        old_inputs = config.get("inputs")
        if not old_inputs:
            continue
        changes = input_changes(old_inputs, new)
        for key, label in (("label_space", "label space"), ("suite_version", "suite version")):
            if old.get(key) != getattr(record, key):
                changes.append(f"{label} {old.get(key)} -> {getattr(record, key)}")
        versions = old["versions"] if isinstance(old["versions"], dict) else {}
        before = versions.get("robustlab")
        if before != record.versions.get("robustlab"):
            changes.append(f"robustlab {before} -> {record.versions.get('robustlab')}")
        if not changes:  # e.g. a fine-tuning split: not what this line is about
            continue
        line = (
            f"new run {record.run_id}: earlier run {old['run_id']} of {record.model_spec} "
            f"over {record.data_root} had other inputs ({'; '.join(changes)}); "
            "its numbers are kept under its own id"
        )
        log.warning(line)
        return line
    return None


def _check_same_resources(store: Store, record) -> None:
    """Refuse to resume a run whose images came from another configured tool.

    The tools (ai_bg's inpainter and bg_complexity's diffusion checkpoints, the attribute
    edits' hole-fill backend: every self-describing resource of the registry) are not part
    of the run id (a run may gain such cells later), so without this check a rerun with a
    different ``ROBUSTLAB_INPAINTER``, ``ROBUSTLAB_BG_DIFFUSION`` or ``ROBUSTLAB_EDIT_FILL``
    would mix two tools' images in one run.
    """
    from robustlab.shifts.registry import described_resources, get_resource, list_shifts

    if not store.exists():
        return
    old_config = None
    for key in described_resources():
        new = record.config.get(key) or {}
        if not new.get("fingerprint"):
            continue
        if old_config is None:
            old_config = (store.get_run(record.run_id) or {}).get("config") or {}
        old = old_config.get(key) or {}
        if old.get("fingerprint") and old["fingerprint"] != new["fingerprint"]:
            res = get_resource(key)
            shifts = "/".join(s.name for s in list_shifts() if res.uses(s))
            raise InputChangedError(
                f"run {record.run_id} already holds {shifts} images drawn by the {res.noun} "
                f"{res.label(old)} (fingerprint {old['fingerprint']}); the configured one is "
                f"{res.label(new)} ({new['fingerprint']})",
                hint=f"use another --db or --seed, or configure the run's {res.noun} again",
            )


def _store_generated_attributes(store: Store, plan: RunPlan) -> None:
    """Copy a generated folder's ``attributes.csv`` rows of this run's cells into the store.

    On the fly the runner stores what each edit reports as it goes; a generated folder
    measured its edits when it was written, so their record is read from there.
    """
    root = plan.record.config.get("generated_root")
    if not root:
        return
    from robustlab.workflows.generate import ATTRIBUTES_CSV, read_attributes_csv

    cells = {(s, str(lv)) for s, lv in plan.cells}
    ids = {s.id for s in plan.samples}
    rows = [
        {k: v for k, v in r.items() if k != "file"}
        for r in read_attributes_csv(Path(root) / ATTRIBUTES_CSV)
        if (r.get("shift"), str(r.get("level"))) in cells and r.get("sample_id") in ids
    ]
    store.write_attributes(plan.record.run_id, rows)


def run_table(store: Store, run_id: str, skipped=None):
    """Per-cell results of one stored run, as ``evaluate`` returns them."""
    run = store.get_run(run_id)
    if run is None:
        raise StoreError(f"run {run_id} is not in {store.path}")
    cells = store.cell_table([run_id])
    from robustlab.store.naming import model_label

    cells.insert(1, "model", model_label(run["model_spec"], run.get("config")))
    cells.insert(2, "suite", run["suite"])
    cells.attrs.update(
        {
            "run_id": run_id,
            "db": str(store.path),
            "skipped": run["skipped"] if skipped is None else skipped,
        }
    )
    return cells
