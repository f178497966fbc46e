"""ImageNet-C common corruptions (Hendrycks & Dietterich, 2019) and the four extra ones.

Public surface: :func:`corrupt` and :func:`list_corruptions`. Each corruption lives in a
module of its own (one registered function plus its per-severity parameter table), written to match the reference code
(``imagenet-c`` 0.0.3) and generalised to any image size of at least 32x32.
"""

from __future__ import annotations

import fnmatch

import numpy as np

# Import order = registration order = the canonical ImageNet-C order.
from robustlab.shifts.corruptions import (  # noqa: F401
    gaussian_noise,
    shot_noise,
    impulse_noise,
    defocus_blur,
    glass_blur,
    motion_blur,
    zoom_blur,
    snow,
    frost,
    fog,
    brightness,
    contrast,
    elastic_transform,
    pixelate,
    jpeg_compression,
    speckle_noise,
    gaussian_blur,
    spatter,
    saturate,
)
from robustlab.data.images import array_to_rgb, check_size
from robustlab.errors import InputError, unknown_name
from robustlab.seeding import make_rng
from robustlab.shifts.registry import Shift, get_shift, list_shifts

COMMON_TAG = "imagenet-c"
EXTRA_TAG = "imagenet-c-extra"
SEVERITIES = (1, 2, 3, 4, 5)
_GROUPS = {
    "common": COMMON_TAG,
    "imagenet-c": COMMON_TAG,
    "extra": EXTRA_TAG,
    "validation": EXTRA_TAG,
    "imagenet-c-extra": EXTRA_TAG,
}


def _all() -> list[Shift]:
    return [s for s in list_shifts() if COMMON_TAG in s.tags or EXTRA_TAG in s.tags]


def list_corruptions(pattern_or_family: str | None = None) -> list[str]:
    """Names of corruptions in canonical order.

    Args:
        pattern_or_family: ``None`` or ``"common"`` for the 15 benchmark corruptions;
            ``"extra"`` (or ``"validation"``) for the 4 extra ones; ``"all"`` for all 19; a
            family (``"noise"``, ``"blur"``, ``"weather"``, ``"digital"``); or a glob such
            as ``"*_blur"``.

    Raises:
        InputError: nothing matches; the message lists the valid choices.
    """
    everything = _all()
    if pattern_or_family is None:
        pattern_or_family = "common"
    key = pattern_or_family.strip().lower()
    if key == "all":
        return [s.name for s in everything]
    if key in _GROUPS:
        return [s.name for s in everything if _GROUPS[key] in s.tags]
    out = [s.name for s in everything if s.family == key or fnmatch.fnmatchcase(s.name, key)]
    if not out:
        families = sorted({s.family for s in everything})
        raise InputError(
            f"no corruption matches {pattern_or_family!r}; use 'common', 'extra', 'all', "
            f"a family ({', '.join(families)}), a glob, or a name: "
            f"{', '.join(s.name for s in everything)}"
        )
    return out


def get_corruption(name: str) -> Shift:
    """The registered corruption ``name``; an InputError naming the closest otherwise.

    One dictionary lookup in the registry (2.5 us) rather than a walk over every
    registered shift (10 us, 0.7 ms of an image's 75 cells).
    """
    try:
        s = get_shift(name)
    except InputError:
        s = None
    if s is not None and (COMMON_TAG in s.tags or EXTRA_TAG in s.tags):
        return s
    raise unknown_name("corruption", name, [s.name for s in _all()])


def check_severity(severity) -> int:
    if (
        isinstance(severity, bool)
        or not isinstance(severity, (int, np.integer))
        or int(severity) not in SEVERITIES
    ):
        raise InputError(f"severity must be an integer from 1 to 5, got {severity!r}")
    return int(severity)


def to_uint8(x: np.ndarray) -> np.ndarray:
    """Clip to [0, 255] and truncate to uint8, as the reference's ``np.uint8(...)`` does."""
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return x
    return np.clip(x, 0, 255).astype(np.uint8)


def corrupt(
    image, name: str, severity: int = 1, seed=None, preset: str | None = None
) -> np.ndarray:
    """Apply corruption ``name`` at ``severity`` (1..5) to ``image``.

    Args:
        image: uint8 array (HxW, HxWx1, HxWx3 or HxWx4) or PIL image, at least 32x32.
        name: A corruption name, see :func:`list_corruptions`.
        severity: 1 (mild) to 5 (severe).
        seed: ``None`` (fresh entropy), an int (a PCG64 Generator is derived from it:
            identical output everywhere), a ``numpy.random.Generator``, or a
            ``numpy.random.RandomState`` (draws follow the reference code's order, so
            ``seed=np.random.RandomState(k)`` reproduces the reference after
            ``np.random.seed(k)``).
        preset: None for ImageNet-C's constants, or another official generator's:
            ``"cifar-c"`` (make_cifar_c.py, made for 32x32), ``"tiny-imagenet-c"`` /
            ``"imagenet-64-c"`` (64x64), ``"imagenet-c-299"`` (299x299). The image is
            used as given: bring it to the preset's size first to reproduce that
            generator (any size works, as with ImageNet-C's constants).

    Returns:
        uint8 array of the same height and width: 3 channels, or 4 when the input had an
        alpha channel (the alpha plane is returned unchanged).

    Example:
        >>> import numpy as np, robustlab
        >>> x = np.zeros((64, 64, 3), np.uint8)
        >>> robustlab.corrupt(x, "gaussian_noise", 3, seed=0).shape
        (64, 64, 3)
    """
    shift = get_corruption(name).preset(preset)
    severity = check_severity(severity)
    rgb, alpha = array_to_rgb(image)
    check_size(rgb)
    out = to_uint8(shift.apply(rgb, severity, make_rng(seed)))
    if out.shape[:2] != rgb.shape[:2]:  # a shape change is a bug in the shift, not user error
        raise RuntimeError(f"{name} changed the image size {rgb.shape[:2]} -> {out.shape[:2]}")
    if alpha is not None:
        out = np.dstack([out, alpha])
    return out


__all__ = ["corrupt", "list_corruptions", "get_corruption", "SEVERITIES"]
