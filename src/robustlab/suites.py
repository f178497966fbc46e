"""Suites: named, versioned recipes of shift cells plus the preprocessing protocol.

A suite says which (shift, level) cells to build or evaluate, how images are prepared
before the shift (e.g. resize 256 -> center crop 224) and how generated files are
saved (e.g. JPEG quality 85). Built-in suites are defined here as data; users can load
their own from YAML with :func:`load_suite`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from robustlab.errors import InputError, unknown_name
from robustlab.shifts.registry import get_shift, list_shifts


@dataclass(frozen=True)
class Protocol:
    """How a source image becomes the image a shift sees, and how outputs are saved.

    Attributes:
        resize: Shorter side is resized to this many pixels first (None keeps the size);
            with ``frame="squash"`` both sides are (the aspect ratio is not kept).
        crop: Center crop to ``crop x crop`` after resizing (None: no crop).
        interpolation: PIL filter name for the resize (the reference uses bilinear).
        format: ``"jpeg"`` or ``"png"`` for generated files.
        jpeg_quality: Quality for JPEG output (ImageNet-C: 85, optimize=True).
        frame: ``"shorter_side"`` (ImageNet-C: the shorter side becomes ``resize``) or
            ``"squash"`` (ImageNet-E's editor: the whole photo becomes ``resize`` x
            ``resize``, see :data:`IMAGENET_E_PROTOCOL`).
    """

    resize: int | None = 256
    crop: int | None = 224
    interpolation: str = "bilinear"
    format: str = "jpeg"
    jpeg_quality: int = 85
    frame: str = "shorter_side"

    def __post_init__(self) -> None:
        if self.frame not in FRAMES:
            raise InputError(
                f"unknown protocol frame {self.frame!r}; use one of {', '.join(FRAMES)}"
            )

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        # The default frame is left out, so folders and runs recorded before the field
        # existed keep their identity; a squashed frame is always recorded.
        if d["frame"] == FRAMES[0]:
            del d["frame"]
        return d


FRAMES = ("shorter_side", "squash")


IMAGENET_C_PROTOCOL = Protocol()
# ImageNet-E's editor works on the whole photo squashed to 256x256 (the official app.py
# resizes the upload to (256, 256); the dataset scripts resize with Pillow's LANCZOS and
# the masks with NEAREST), not on the ImageNet-C 256/224 centre crop, which cut a median
# 8.8 % (up to 38.6 %) of the object away before editing. PNG: the edits are measured.
IMAGENET_E_PROTOCOL = Protocol(
    resize=256, crop=None, interpolation="lanczos", format="png", frame="squash"
)


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

    def cells(self) -> list[tuple[str, Any]]:
        """All (shift, level) pairs, in report order."""
        out: list[tuple[str, Any]] = []
        for name in self.shifts:
            shift = get_shift(name)
            levels = (self.levels or {}).get(name) or shift.levels
            out.extend((name, level) for level in levels)
        return out

    def select(self, shifts: list[str] | None = None, levels: list | None = None) -> Suite:
        """A copy restricted to some shifts and/or levels (names and levels are checked)."""
        names = tuple(shifts) if shifts else self.shifts
        for n in names:
            get_shift(n)
            if n not in self.shifts:
                raise InputError(
                    f"shift {n!r} is not in suite {self.name!r}: {', '.join(self.shifts)}"
                )
        lv = None
        if levels:
            lv = {}
            for n in names:
                allowed = get_shift(n).levels
                bad = [x for x in levels if x not in allowed]
                if bad:
                    raise InputError(f"{n} has no level {bad[0]!r}; levels are {list(allowed)}")
                lv[n] = tuple(levels)
        return Suite(
            self.name,
            self.version,
            self.description,
            names,
            lv or self.levels,
            self.protocol,
            self.label_space,
        )

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
    return suite.select(list(shifts), list(levels)) if levels else suite
