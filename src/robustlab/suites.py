"""Suites: named, versioned recipes of shift cells plus the preprocessing protocol.

A suite says which (shift, level) cells to build or evaluate, how images are prepared
before the shift (e.g. resize 256 -> center crop 224) and how generated files are
saved (e.g. JPEG quality 85). Built-in suites are defined here as data; users can load
their own from YAML with :func:`load_suite`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import yaml

from robustlab.cells import Cell, level_key
from robustlab.errors import InputError, closest, unknown_name
from robustlab.shifts.registry import PRESETS, get_shift, list_shifts


# How the model sees a cell's image (after the frame, the shift and the storage round trip).
VIEWS = ("resize", "model")
# The fields that say how a model sees the images (the rest, format and JPEG quality, say
# how generated files are stored). Added after the first runs were stored: left out of
# :meth:`Protocol.describe` at their defaults, so ImageNet-C run ids stay what they were.
VIEW_FIELDS = ("view", "view_resize", "view_crop")


@dataclass(frozen=True)
class Protocol:
    """How a source image becomes the image a shift sees, how outputs are saved, and how
    the model sees the result: one benchmark's evaluation protocol, as data.

    The steps, in order: the *frame* (``resize``, ``crop``, ``interpolation``) prepares the
    source before the shift; the shifted image is stored (``format``, ``jpeg_quality``;
    on the fly: the same round trip in memory); then the *view* makes the model's input:
    an optional ``view_resize``/``view_crop`` of the stored image (shorter side, centre
    crop, bilinear, torchvision's rounding), then

    - ``view="resize"``: the model's resize of the shorter side to its input size, no
      crop (the frame already cropped: ImageNet-C's 256/224 protocol);
    - ``view="model"``: the model's own eval transform (its resize with its crop
      fraction and interpolation, then its centre crop: torchvision weights'
      ``transforms()``, timm's data config, open_clip's preprocess, a ``hf:`` image
      processor, an ``onnx:`` file's metadata, the lite models' declared transform).

    Attributes:
        resize: Shorter side is resized to this many pixels first (None keeps the size);
            with ``frame="squash"`` both sides are (the aspect ratio is not kept).
        crop: Center crop to ``crop x crop`` after resizing (None: no crop).
        interpolation: PIL filter name for the resize (the reference uses bilinear).
        format: ``"jpeg"`` or ``"png"`` for generated files.
        jpeg_quality: Quality for JPEG output (ImageNet-C: 85, optimize=True).
        frame: ``"shorter_side"`` (ImageNet-C: the shorter side becomes ``resize``),
            ``"squash"`` (ImageNet-E's editor, the 32 and 64 px presets: the whole photo
            becomes ``resize`` x ``resize``, see :data:`IMAGENET_E_PROTOCOL`) or
            ``"inception"`` (make_imagenet_c_inception.py: the central 87.5 % of each
            side, then ``resize`` x ``resize``).
        view: ``"resize"`` or ``"model"`` (above).
        view_resize, view_crop: Resize and centre crop of the stored image before the
            model's own step (None: none).
        preset: The shifts' parameter preset (a name of
            :data:`robustlab.shifts.registry.PRESETS`: another official generator's
            constants, e.g. ``"cifar-c"``), or None for each shift's own table. Part of
            what the cells are, like the file format: recorded when set.
    """

    resize: int | None = 256
    crop: int | None = 224
    interpolation: str = "bilinear"
    format: str = "jpeg"
    jpeg_quality: int = 85
    frame: str = "shorter_side"
    view: str = "resize"
    view_resize: int | None = None
    view_crop: int | None = None
    preset: str | None = None

    def __post_init__(self) -> None:
        if self.preset is not None and self.preset not in PRESETS:
            raise InputError(
                f"unknown parameter preset {self.preset!r}; use one of {', '.join(PRESETS)}"
            )
        if self.frame not in FRAMES:
            raise InputError(
                f"unknown protocol frame {self.frame!r}; use one of {', '.join(FRAMES)}"
            )
        if self.view not in VIEWS:
            raise InputError(f"protocol view must be one of {', '.join(VIEWS)}, got {self.view!r}")
        for key in ("resize", "crop", "view_resize", "view_crop", "jpeg_quality"):
            v = getattr(self, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError(f"protocol {key} must be a positive integer or none, got {v!r}")
        if self.view_resize and self.view_crop and self.view_crop > self.view_resize:
            raise InputError(
                f"protocol view_crop {self.view_crop} is larger than view_resize {self.view_resize}"
            )

    def describe(self, view: bool = True) -> dict[str, Any]:
        """The fields as a dict; the view fields only where they differ from the default
        (``view=False``: never, for what a generated folder's files depend on). The default
        frame is left out too, so folders and runs recorded before the field existed keep
        their identity; a squashed frame is always recorded."""
        d = asdict(self)
        default = Protocol()
        for key in VIEW_FIELDS:
            if not view or d[key] == getattr(default, key):
                d.pop(key)
        if d["frame"] == FRAMES[0]:
            del d["frame"]
        if d["preset"] is None:  # added later: absent from the records made before
            del d["preset"]
        return d

    @property
    def name(self) -> str:
        """The :data:`PROTOCOLS` name whose frame and view this is, else ``"custom"``."""
        return protocol_name(self.describe())

    def label(self) -> str:
        """One line for tables: name and what the model sees."""
        return protocol_label(self.describe())


FRAMES = ("shorter_side", "squash", "inception")


def _geometry(d: dict) -> tuple:
    full = {**asdict(Protocol()), **d}
    keys = ("resize", "crop", "interpolation", "frame", *VIEW_FIELDS, "preset")
    return tuple(full[k] for k in keys)


def protocol_name(described: dict | None) -> str:
    """Name of a recorded protocol (``Protocol.describe()``): the :data:`PROTOCOLS` entry
    with the same frame and view (format and JPEG quality aside), else ``"custom"``."""
    if not described:
        return "custom"
    mine = _geometry(described)
    for name, p in PROTOCOLS.items():
        if _geometry(p.describe()) == mine:
            return name
    return "custom"


def protocol_label(described: dict | None) -> str:
    """``"imagenet-c: 256/224 bilinear, model resize"`` for a recorded protocol."""
    if not described:
        return ""
    resize, crop, interp, frame, view, v_resize, v_crop, preset = _geometry(described)
    if frame == "squash" and resize:
        size = f"{resize}x{resize} squashed"
    elif frame == "inception" and resize:
        size = f"central 87.5 % to {resize}x{resize}"
    else:
        size = "/".join(str(x) for x in (resize, crop) if x) or "as is"
    parts = [f"{size} {interp}" if resize or crop else "source as is"]
    if v_resize or v_crop:
        parts.append("then " + "/".join(str(x) for x in (v_resize, v_crop) if x) + " bilinear")
    parts.append("model's own transform" if view == "model" else "model's resize")
    if preset:
        parts.append(f"{preset} constants")
    return f"{protocol_name(described)}: {', '.join(parts)}"


IMAGENET_C_PROTOCOL = Protocol()
# ImageNet-D: the published images as they are, each model through its own eval transform
# (evaluate_imagenet_models.py: weights.transforms(); evaluate_vlm.py: CLIP's preprocess).
MODEL_PROTOCOL = Protocol(resize=None, crop=None, format="png", view="model")
# ImageNet-E. The frame: the editor works on the whole photo squashed to 256x256 (the
# official app.py resizes the upload to (256, 256); the dataset scripts resize with Pillow's
# LANCZOS and the masks with NEAREST), not on the ImageNet-C 256/224 centre crop, which cut
# a median 8.8 % (up to 38.6 %) of the object away before editing. PNG: the edits are
# measured. The view: one rule for every image of the benchmark, the published archive's
# files and robustlab's own edits alike: the image as stored, shorter side to 256
# (bilinear) and a centre crop of 224 -- the evaluation transform of the authors' toolkit
# (alibaba/easyrobust benchmarks/ood/*.py, clean.py; the archive's own script is not
# published) -- then the model's resize to its input size.
IMAGENET_E_VIEW = (256, 224)  # (view_resize, view_crop)
IMAGENET_E_PROTOCOL = Protocol(
    resize=256,
    crop=None,
    interpolation="lanczos",
    format="png",
    frame="squash",
    view_resize=IMAGENET_E_VIEW[0],
    view_crop=IMAGENET_E_VIEW[1],
)
# The published ImageNet-E archive: its files are the frame already.
ARCHIVE_PROTOCOL = dataclasses.replace(
    IMAGENET_E_PROTOCOL, resize=None, crop=None, interpolation="bilinear", frame="shorter_side"
)
# The other official ImageNet-C generators (hendrycks/robustness ImageNet-C/create_c/),
# each with its preparation and its constants (the shifts' presets):
# - make_cifar_c.py corrupts the 32x32 CIFAR images as they are (a photo of another size is
#   squashed to 32x32 first, bilinear) and stores arrays: PNG keeps them lossless;
# - make_tinyimagenet_c.py and make_imagenet_64_c.py: torchvision Resize((64, 64)) (Pillow
#   bilinear on both sides), saved as JPEG quality 85 like ImageNet-C;
# - make_imagenet_c_inception.py: the central 87.5 % of each side, then Pillow bilinear to
#   299x299, JPEG quality 85.
PRESET_PROTOCOLS: dict[str, Protocol] = {
    "cifar-c": Protocol(resize=32, crop=None, format="png", frame="squash", preset="cifar-c"),
    "tiny-imagenet-c": Protocol(resize=64, crop=None, frame="squash", preset="tiny-imagenet-c"),
    "imagenet-64-c": Protocol(resize=64, crop=None, frame="squash", preset="imagenet-64-c"),
    "imagenet-c-299": Protocol(resize=299, crop=None, frame="inception", preset="imagenet-c-299"),
}
# Names for ``--protocol``; every built-in suite's protocol is one of them.
PROTOCOLS: dict[str, Protocol] = {
    "imagenet-c": IMAGENET_C_PROTOCOL,
    "model": MODEL_PROTOCOL,
    "imagenet-e": IMAGENET_E_PROTOCOL,
    "imagenet-e-archive": ARCHIVE_PROTOCOL,
    **PRESET_PROTOCOLS,
}


def parse_protocol(spec: str | Protocol, base: Protocol | None = None) -> Protocol:
    """A protocol from ``--protocol``: a :data:`PROTOCOLS` name, ``key=value`` pairs
    changing ``base`` (e.g. ``view=model`` or ``resize=none,crop=none,view=model``), or a
    name followed by pairs (``imagenet-c,interpolation=bicubic``).

    A name replaces the frame and view of ``base`` and keeps its file format, JPEG
    quality and parameter preset (those say what a suite's cells are and how its files
    are stored, not how a model sees them); ``preset=NAME|none`` changes the preset.

    Raises:
        InputError: an unknown name or key, or a value of the wrong kind.
    """
    if isinstance(spec, Protocol):
        return spec
    base = base or Protocol()
    hint = (
        f"use a name ({', '.join(PROTOCOLS)}) or key=value pairs of "
        f"{', '.join(f.name for f in dataclasses.fields(Protocol))}"
    )
    parts = [x.strip() for x in str(spec).split(",") if x.strip()]
    if not parts:
        raise InputError("--protocol is empty", hint=hint)
    out = base
    if "=" not in parts[0]:
        name = parts.pop(0)
        if name not in PROTOCOLS:
            raise InputError(f"unknown protocol {name!r}", hint=hint)
        named = PROTOCOLS[name]
        out = dataclasses.replace(
            named, format=base.format, jpeg_quality=base.jpeg_quality, preset=base.preset
        )
    ints = {"resize", "crop", "view_resize", "view_crop", "jpeg_quality"}
    changes: dict[str, Any] = {}
    fields = {f.name for f in dataclasses.fields(Protocol)}
    for part in parts:
        key, sep, value = (x.strip() for x in part.partition("="))
        if not sep or key not in fields:
            raise InputError(f"bad --protocol item {part!r}", hint=hint)
        if key in ints:
            if value.lower() in ("none", "null", ""):
                changes[key] = None
                continue
            try:
                changes[key] = int(value)
            except ValueError:
                raise InputError(
                    f"--protocol {key} must be an integer or none, got {value!r}"
                ) from None
        elif key == "preset" and value.lower() in ("none", "null", ""):
            changes[key] = None
        else:
            changes[key] = value.lower()
    return dataclasses.replace(out, **changes)


@dataclass(frozen=True)
class Selection:
    """What :meth:`Suite.select` chose: the cells, in report order, and the suite
    restricted to them (its name, version and protocol go into the run record).

    Iterating, ``len`` and indexing go over :attr:`cells`.
    """

    suite: Suite
    cells: tuple[Cell, ...]

    @property
    def shifts(self) -> tuple[str, ...]:
        """The chosen shift names, in report order."""
        return self.suite.shifts

    def __iter__(self):
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    def __getitem__(self, i):
        return self.cells[i]


# Group words of the selection grammar: the tag each stands for (None: every shift).
GROUPS: dict[str, str | None] = {
    "all": None,
    "common": "imagenet-c",
    "extra": "imagenet-c-extra",
    "validation": "imagenet-c-extra",
}


def match_shifts(
    names: Sequence[str],
    patterns: Sequence[str] | str | None,
    *,
    where: str = "the suite",
    absent: str = "{pat!r} is a shift but not part of {where}",
) -> list[str]:
    """The selection grammar for shifts: those of ``names`` (in their order) chosen by
    ``patterns``, each an exact name, a family (``blur``), a tag, a glob (``*_noise``) or a
    group word (:data:`GROUPS`: ``common``, ``extra``, ``all``). A string is split at commas.

    Args:
        names: The shifts there are to choose from (a suite's, a published folder's).
        patterns: None for all of ``names``.
        where: What ``names`` belong to, for messages (``"suite 'imagenet-c'"``).
        absent: The message for a registered shift that is not among ``names``.

    Raises:
        InputError: a pattern matches none of ``names`` (the message says whether it is a
            shift elsewhere or unknown, and names the closest matches), or ``patterns`` is
            given but blank (``--shifts ,``), which must not mean "all".
    """
    names = list(names)
    if patterns is None:
        return names
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    import fnmatch

    def tags_of(n: str) -> tuple[tuple[str, ...], str | None]:
        try:
            s = get_shift(n)
        except InputError:  # a published folder's cell that is no registered shift
            return (), None
        return tuple(s.tags), s.family

    info = {n: tags_of(n) for n in names}
    chosen: list[str] = []
    for raw in patterns:
        pat = str(raw).strip()
        if not pat:
            continue
        if pat in GROUPS:
            tag = GROUPS[pat]
            hits = [n for n in names if tag is None or tag in info[n][0]]
        else:
            hits = [
                n
                for n in names
                if n == pat or fnmatch.fnmatchcase(n, pat) or info[n][1] == pat or pat in info[n][0]
            ]
        if not hits:
            known = [s.name for s in list_shifts()]
            if pat in known:
                msg = absent.format(pat=pat, where=where)
            elif any(c in pat for c in "*?["):
                msg = f"no shift of {where} matches {pat!r}"
            else:
                msg = f"unknown shift {pat!r}: no shift of {where} matches it"
            close = closest(pat, [*names, *(f for _, f in info.values() if f)])
            if close:
                raise InputError(f"{msg}; did you mean {' or '.join(close)}?")
            raise InputError(f"{msg}; its shifts are: {', '.join(names)}")
        chosen.extend(h for h in hits if h not in chosen)
    if not chosen:
        raise InputError(
            f"--shifts {','.join(patterns)!r} names no shift",
            hint=f"leave --shifts out for all, or name some of: {', '.join(names)}",
        )
    return [n for n in names if n in chosen]


def select_cells(
    cells: Sequence[tuple[str, Any]],
    shifts: Sequence[str] | str | None,
    levels: Sequence | str | None,
    *,
    where: str,
) -> list[Cell]:
    """The selection grammar applied to a fixed list of cells (a published folder's): the
    cells, in their order, whose shift :func:`match_shifts` chooses and whose level (as
    text) :func:`parse_levels` names. None chooses everything."""
    names = list(dict.fromkeys(sh for sh, _ in cells))
    chosen = set(match_shifts(names, shifts, where=where, absent="{where} has no {pat!r} folders"))
    wanted = None if levels is None else {level_key(lv) for lv in parse_levels(levels) or []}
    chosen_cells = (Cell(*c) for c in cells)
    return [c for c in chosen_cells if c.shift in chosen and (wanted is None or c.key in wanted)]


def parse_levels(text: str | Sequence | None) -> list | None:
    """The selection grammar for levels: ``"1,3,5"`` or ``"1-3"`` (or a list of such
    tokens) -> ``[1, 3, 5]`` / ``[1, 2, 3]``; named levels stay strings; None -> None.

    Raises:
        InputError: a range that runs backwards, or nothing named (``--levels ,`` must not
            mean "all levels").
    """
    if text is None:
        return None
    tokens = text.split(",") if isinstance(text, str) else list(text)
    out: list = []
    for tok in tokens:
        if isinstance(tok, int) and not isinstance(tok, bool):
            out.append(tok)
            continue
        tok = str(tok).strip()
        if not tok:
            continue
        if "-" in tok and all(p.strip().isdigit() for p in tok.split("-", 1)):
            a, b = (int(p) for p in tok.split("-", 1))
            if a > b:
                raise InputError(f"level range {tok!r} runs backwards")
            out.extend(range(a, b + 1))
        elif tok.lstrip("-").isdigit():
            out.append(int(tok))
        else:
            out.append(tok)
    if not out:
        raise InputError(
            f"--levels {text!r} names no level",
            hint="leave --levels out for all levels, or give e.g. 1,3,5 or 1-3",
        )
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Suite:
    """A named, versioned set of (shift, level) cells with its protocol.

    Attributes:
        name: Registry key, e.g. ``"imagenet-c"``.
        version: Bumped whenever cells, parameters or protocol change.
        shifts: Shift names in report order.
        levels: Levels per shift (None: every level the shift defines).
        protocol: Preprocessing and output format.
        label_space: Label space name (``"imagenet1k"``, ``"imagenet9"``, ...).
    """

    name: str
    version: str
    description: str
    shifts: tuple[str, ...]
    levels: dict[str, tuple] | None = None
    protocol: Protocol = field(default_factory=Protocol)
    label_space: str = "imagenet1k"

    def cells(self) -> list[Cell]:
        """All (shift, level) pairs, in report order."""
        out: list[Cell] = []
        for name in self.shifts:
            shift = get_shift(name)
            levels = (self.levels or {}).get(name) or shift.levels
            out.extend(Cell(name, level) for level in levels)
        return out

    def match(self, patterns: Sequence[str] | None) -> list[str]:
        """Shift names of this suite chosen by ``patterns``, in the suite's order: see
        :func:`match_shifts` (the selection grammar). None chooses every shift."""
        return match_shifts(self.shifts, patterns, where=f"suite {self.name!r}")

    def select(
        self, shifts: Sequence[str] | None = None, levels: Sequence | str | None = None
    ) -> Selection:
        """The cells chosen by the one selection grammar every command and the Python API
        use: ``shifts`` are names, families, tags, globs or the group words ``common``,
        ``extra``, ``all`` (:func:`match_shifts`); ``levels`` are levels, names or ranges
        such as ``"1-3"`` (:func:`parse_levels`), as a list or a comma-separated string.
        None (or nothing given) keeps every shift or level.

        Returns:
            A :class:`Selection`: the cells, in report order, and the suite restricted to
            them (whose name, version and protocol the run records).

        Raises:
            InputError: a pattern matches no shift of the suite (naming the closest
                names), or a shift has no such level.
        """
        names = tuple(self.match(shifts))
        level_list = parse_levels(levels)
        lv = None
        if level_list:
            lv = {}
            for n in names:
                allowed = get_shift(n).levels
                # A named level that reads as a number ("90" of obj_direction) is that
                # name: the grammar parses it as 90, the table says "90".
                own = {level_key(a): a for a in allowed}
                mine = [x if x in allowed else own.get(level_key(x), x) for x in level_list]
                bad = [x for x in mine if x not in allowed]
                if bad:
                    raise InputError(
                        f"{n} has no level {bad[0]!r}; levels are {list(allowed)}",
                        hint=(
                            f"did you mean {' or '.join(close)}?"
                            if (close := closest(bad[0], [level_key(x) for x in allowed]))
                            else None
                        ),
                    )
                lv[n] = tuple(mine)
        sub = Suite(
            self.name,
            self.version,
            self.description,
            names,
            lv or self.levels,
            self.protocol,
            self.label_space,
        )
        return Selection(sub, tuple(sub.cells()))

    def select_levels(self, levels: dict[str, Sequence]) -> Selection:
        """The cells of exactly these shifts at exactly these levels each (a generated
        folder's cells, :func:`robustlab.workflows.evaluate.generated.held_levels`), in the
        suite's order.

        Raises:
            InputError: a shift that is not in the suite, or a level its table lacks.
        """
        names = tuple(n for n in self.shifts if n in levels)
        stray = [n for n in levels if n not in names]
        if stray:
            raise InputError(f"{stray[0]!r} is not a shift of suite {self.name!r}")
        own: dict[str, tuple] = {}
        for n in names:
            allowed = get_shift(n).levels
            bad = [x for x in levels[n] if x not in allowed]
            if bad:
                raise InputError(f"{n} has no level {bad[0]!r}; levels are {list(allowed)}")
            own[n] = tuple(levels[n])
        sub = Suite(
            self.name, self.version, self.description, names, own, self.protocol, self.label_space
        )
        return Selection(sub, tuple(sub.cells()))

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "shifts": list(self.shifts),
            "cells": [[s, lv] for s, lv in self.cells()],
            "protocol": self.protocol.describe(),
            "label_space": self.label_space,
        }


def _builtin() -> dict[str, Suite]:
    common = tuple(s.name for s in list_shifts(tag="imagenet-c"))
    extra = tuple(s.name for s in list_shifts(tag="imagenet-c-extra"))
    suites = [
        Suite(
            "imagenet-c",
            "1",
            "ImageNet-C: 15 common corruptions x 5 severities",
            common,
            protocol=IMAGENET_C_PROTOCOL,
        ),
        Suite(
            "imagenet-c-extra",
            "1",
            "ImageNet-C extra corruptions (speckle, gaussian blur, spatter, saturate)",
            extra,
            protocol=IMAGENET_C_PROTOCOL,
        ),
    ]
    for preset, (desc, label_space) in _PRESET_SUITES.items():
        names = tuple(n for n in common + extra if preset in get_shift(n).presets)
        suites.append(
            Suite(
                preset, "1", desc, names, protocol=PRESET_PROTOCOLS[preset], label_space=label_space
            )
        )
    for tag, desc, label_space in _SCENE_SUITES:
        names = tuple(s.name for s in list_shifts(tag=tag))
        if names:
            version, protocol = _SCENE_PROTOCOLS.get(
                tag, ("1", Protocol(resize=256, crop=224, format="png"))
            )
            suites.append(
                Suite(tag, version, desc, names, protocol=protocol, label_space=label_space)
            )
    return {s.name: s for s in suites}


# The other official ImageNet-C generators as suites: the 15 common and the 4 extra
# corruptions (CIFAR-10-C ships all 19) with each generator's constants and preparation.
_PRESET_SUITES = {
    "cifar-c": ("CIFAR-10-C / CIFAR-100-C: 19 corruptions x 5 severities, 32x32", "cifar10"),
    "tiny-imagenet-c": ("Tiny-ImageNet-C: 19 corruptions x 5 severities, 64x64", "imagenet1k"),
    "imagenet-64-c": ("ImageNet 64x64-C: 19 corruptions x 5 severities", "imagenet1k"),
    "imagenet-c-299": ("ImageNet-C at 299x299 (Inception): 19 corruptions x 5", "imagenet1k"),
}
# Scene suites appear once their shifts are registered with these tags.
_SCENE_SUITES = [
    ("ximagenet12", "XIMAGENET-12 foreground/background scenarios", "imagenet1k"),
    ("imagenet9", "ImageNet-9 background variants", "imagenet9"),
    ("imagenet-e", "ImageNet-E attribute edits", "imagenet1k"),
]
# Suites whose generation protocol is not the 256/224 crop: (version, protocol). ImageNet-E
# version 2: the official 256x256 frame and the official edits (docs/imagenet_e.md).
_SCENE_PROTOCOLS = {"imagenet-e": ("2", IMAGENET_E_PROTOCOL)}


def list_suites() -> list[Suite]:
    return list(_builtin().values())


def get_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a user suite from a YAML file path."""
    suites = _builtin()
    if name_or_path in suites:
        return suites[name_or_path]
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return load_suite(p)
    err = unknown_name("suite", name_or_path, suites)
    raise InputError(f"{err} (or a .yaml suite file)", hint=err.hint)


def load_suite(path: str | Path) -> Suite:
    """Load a user suite from YAML.

    Example file::

        name: my-blur
        version: "1"
        shifts: [defocus_blur, glass_blur]
        levels: [1, 3, 5]
        protocol: {resize: 256, crop: 224, format: png}
    """
    data = yaml.safe_load(Path(path).read_text()) or {}
    if not isinstance(data, dict) or "shifts" not in data:
        raise InputError(f"{path}: a suite file needs at least 'name' and 'shifts'")
    unknown = set(data) - {
        "name",
        "version",
        "description",
        "shifts",
        "levels",
        "protocol",
        "label_space",
    }
    if unknown:
        raise InputError(f"{path}: unknown suite keys {sorted(unknown)}")
    shifts = tuple(data["shifts"])
    for s in shifts:
        get_shift(s)
    proto = Protocol(**(data.get("protocol") or {}))
    suite = Suite(
        str(data.get("name", Path(path).stem)),
        str(data.get("version", "1")),
        str(data.get("description", "")),
        shifts,
        protocol=proto,
        label_space=str(data.get("label_space", "imagenet1k")),
    )
    levels = data.get("levels")
    return suite.select(list(shifts), list(levels)).suite if levels else suite
