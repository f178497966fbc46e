"""ImageNet-E object direction: the object rotated and pasted on the filled background.

As in the official editor (REFERENCE.md section 4): the object image and its mask are
rotated with Pillow's ``Image.rotate(angle)`` (counter-clockwise degrees, about the image
centre, no expand, nearest-neighbour resampling, black outside), and the rotated object
(where the rotated mask is set) is pasted on the hole-filled background. Nearest-neighbour
resampling means every object pixel of the result is a pixel of the original object.

Levels: fixed angles and ``random``, one angle drawn from the cell's generator on the
official slider's grid (-180..180 in steps of 10). ``center`` ``"object"`` rotates about
the largest contour's box centre instead (not the official behaviour; it keeps an
off-centre object from swinging across or out of the frame).
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from robustlab.errors import CellSkipped
from robustlab.seeding import randint
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

RANDOM_RANGE = (-180, 180, 10)  # low, high (inclusive), step: the official demo slider
DIRECTION = {
    "45": {"angle": 45, "center": "image"},
    "90": {"angle": 90, "center": "image"},
    "180": {"angle": 180, "center": "image"},
    "random": {"angle": "random", "range": RANDOM_RANGE, "center": "image"},
}


def draw_angle(p: dict, rng) -> float:
    """The level's angle: fixed, or drawn uniformly from its (low, high, step) grid."""
    if p["angle"] != "random":
        return float(p["angle"])
    lo, hi, step = p["range"]
    return float(lo + step * int(randint(rng, 0, (hi - lo) // step + 1)))


def rotate(x: np.ndarray, mask: np.ndarray, angle: float, center=None):
    """(rotated image, rotated HxW bool mask) with Pillow's rotate semantics."""
    img = Image.fromarray(x, "RGB").rotate(angle, resample=Image.Resampling.NEAREST, center=center)
    m = Image.fromarray(mask.astype(np.uint8) * 255, "L").rotate(
        angle, resample=Image.Resampling.NEAREST, center=center
    )
    return np.asarray(img), np.asarray(m) > 127


@register_shift("obj_direction", family=FAMILY, params=DIRECTION, needs=("mask",), tags=TAGS)
def edit_direction(image, p, rng, ctx):
    """Object rotated (Pillow rotate, no expand) and pasted on a filled background."""
    x, mask = prepare_inputs(image, ctx)
    angle = draw_angle(p, rng)
    center = None
    if p.get("center", "image") == "object":
        bx, by, w, h = largest_box(mask)
        center = (bx + w / 2.0, by + h / 2.0)
    turned, new_mask = rotate(x, mask, angle, center)
    if not new_mask.any():
        raise CellSkipped(f"the object left the image when rotated by {angle:g} degrees")
    background, fill = fill_background(x, mask, rng, ctx)
    out = composite(turned, new_mask, background)
    record(
        ctx,
        **measured(
            x, out, new_mask, fill, rate_before=round(object_rate(mask), 6), angle=angle, edited=1
        ),
    )
    return out


__all__ = ["DIRECTION", "RANDOM_RANGE", "draw_angle", "rotate", "edit_direction"]
