"""ImageNet-E object size: rescale the object to a target object pixel rate.

The official procedure (``resize_obj.py``, REFERENCE.md section 4): measure the rate (mask
pixels inside the largest contour's box over the image area); while it is not on target,
zoom the image about the box's centre by ``sqrt(target / rate)`` and measure again. It
stops when ``floor(100 * rate) == 100 * target`` or ``|rate - target| <= 0.015``; after 50
steps, or when a step moves the rate the wrong way, the official code silently copies the
original image. The zoomed object (its zoomed mask) is then pasted on the hole-filled
background.

Choices here, each documented in the level table:

- The zooms are composed into one affine map and the image is resampled once from the
  original (bilinear, like ``cv2.resize``), instead of re-resampling the already zoomed
  image at every step: the same geometry without the accumulated blur.
- An unreachable target is a ``ValueError`` (a counted skip with the reason) unless the
  level's ``unreachable`` is ``"copy"``, the official behaviour, which returns the original.
- The official code, asked for a rate above the object's maximum, zooms the object to fill
  the frame; here growth uses the same iterative zoom, so a target it cannot reach is
  reported like any other unreachable target.

Other rates: register another level table with :func:`register_size_shift`.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from robustlab.shifts.attributes._common import (
    FAMILY,
    TAGS,
    composite,
    largest_box,
    measured,
    object_rate,
    prepare_inputs,
    record,
)
from robustlab.shifts.attributes.fill import fill_background
from robustlab.shifts.registry import register_shift

TOLERANCE = 0.015
MAX_STEPS = 50
# The paper's benchmark rates (recalled in REFERENCE.md; the demo slider allows 0.01-0.5).
TARGETS = (0.10, 0.08, 0.05)


def size_levels(
    targets=TARGETS,
    *,
    tolerance: float = TOLERANCE,
    max_steps: int = MAX_STEPS,
    unreachable: str = "skip",
) -> dict[str, dict]:
    """A level table: level name (``"0.10"``) -> parameters of :func:`edit_size`."""
    if unreachable not in ("skip", "copy"):
        raise ValueError(f"unreachable must be 'skip' or 'copy', not {unreachable!r}")
    out = {}
    for t in targets:
        t = float(t)
        if not 0.0 < t < 1.0:
            raise ValueError(f"a target object pixel rate must be in (0, 1), got {t}")
        out[f"{t:.2f}"] = {
            "target": t,
            "tolerance": float(tolerance),
            "max_steps": int(max_steps),
            "unreachable": unreachable,
        }
    return out


def _on_target(rate: float, target: float, tolerance: float) -> bool:
    return math.floor(rate * 100) == round(target * 100) or abs(rate - target) <= tolerance


def _zoom(s: float, cx: float, cy: float) -> np.ndarray:
    """3x3 map of a zoom by ``s`` that keeps the point (cx, cy) fixed."""
    return np.array([[s, 0.0, cx * (1.0 - s)], [0.0, s, cy * (1.0 - s)], [0.0, 0.0, 1.0]])


def _warp_mask(mask: np.ndarray, a: np.ndarray) -> np.ndarray:
    h, w = mask.shape
    m = cv2.warpAffine(
        mask.astype(np.uint8) * 255,
        a[:2],
        (w, h),
        flags=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=0,
    )
    return m > 127


def rescale_plan(
    mask: np.ndarray, target: float, *, tolerance: float = TOLERANCE, max_steps: int = MAX_STEPS
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The official iterative centred rescale, on the mask only.

    Returns:
        (3x3 affine map from the original to the rescaled image, rescaled mask, achieved
        rate, steps taken).

    Raises:
        ValueError: the target is not reached within ``max_steps``, a step moved the rate
            the wrong way, or the object left the image.
    """
    a = np.eye(3)
    m = mask
    box = largest_box(m)
    rate = object_rate(m, box)
    steps = 0
    while not _on_target(rate, target, tolerance):
        if steps >= max_steps:
            raise ValueError(
                f"object pixel rate {rate:.3f} did not reach {target:.2f} in {max_steps} zoom steps"
            )
        grow = math.floor(rate * 100) < round(target * 100)
        x, y, w, h = box
        a = _zoom(math.sqrt(target / rate), x + w / 2.0, y + h / 2.0) @ a
        m2 = _warp_mask(mask, a)
        if not m2.any():
            raise ValueError(
                f"object pixel rate {object_rate(mask):.3f} cannot reach "
                f"{target:.2f} (the object left the image while zooming)"
            )
        box2 = largest_box(m2)
        rate2 = object_rate(m2, box2)
        if (grow and rate2 < rate) or (not grow and rate2 > rate):
            raise ValueError(
                f"object pixel rate {object_rate(mask):.3f} cannot reach "
                f"{target:.2f} (zooming stalled at {rate:.3f})"
            )
        m, box, rate = m2, box2, rate2
        steps += 1
    return a, m, rate, steps


def edit_size(image, p, rng, ctx):
    """Object rescaled about its box centre to a target pixel rate, on a filled background."""
    x, mask = prepare_inputs(image, ctx)
    before = object_rate(mask)
    try:
        a, new_mask, _, steps = rescale_plan(
            mask, p["target"], tolerance=p["tolerance"], max_steps=p["max_steps"]
        )
    except ValueError:
        if p["unreachable"] != "copy":
            raise
        record(
            ctx,
            **measured(
                x,
                x,
                mask,
                "none",
                rate_before=round(before, 6),
                steps=-1,
                angle=0.0,
                note="target unreachable: original copied (official)",
            ),
        )
        return x.copy()
    h, w = mask.shape
    zoomed = cv2.warpAffine(
        x, a[:2], (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
    )
    background, fill = fill_background(x, mask, rng, ctx)
    out = composite(zoomed, new_mask, background)
    record(
        ctx,
        **measured(
            x,
            out,
            new_mask,
            fill,
            rate_before=round(before, 6),
            steps=steps,
            angle=0.0,
            scale=round(float(a[0, 0]), 6),
        ),
    )
    return out


def register_size_shift(name: str, levels: dict[str, dict]) -> None:
    """Register a size edit with its own level table (see :func:`size_levels`).

    Not marked deterministic: with the ``diffusers`` hole fill the background depends on
    the cell's generator.
    """
    register_shift(
        name, family=FAMILY, params=levels, needs=("mask",), deterministic=False, tags=TAGS
    )(edit_size)


register_size_shift("obj_size", size_levels())

__all__ = [
    "TARGETS",
    "TOLERANCE",
    "MAX_STEPS",
    "size_levels",
    "rescale_plan",
    "edit_size",
    "register_size_shift",
]
