"""ImageNet-E object position: the object's box moved to a random place in the image.

As in the official ``change_place.py`` (REFERENCE.md section 4): the box of the mask's
largest contour, with the mask pixels inside it, moves to a top-left corner drawn
uniformly from ``[0, W - w] x [0, H - h]`` (x first, then y), and the moved object is
pasted on the hole-filled background. The official draw used Python's unseeded ``random``;
here both coordinates come from the cell's generator (the seed rule), so a cell is
reproducible. Object parts outside the largest contour's box are not moved; they are
filled in with the rest of the old object region, as in the original.
"""

from __future__ import annotations

import numpy as np

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
    touches_every_border,
)
from robustlab.shifts.attributes.fill import fill_background
from robustlab.shifts.registry import register_shift

POSITION = {"random": {"draw": "uniform"}}


def move_box(x: np.ndarray, mask: np.ndarray, box, nx: int, ny: int):
    """(image with the box's pixels copied to (nx, ny), mask holding only the moved object)."""
    bx, by, w, h = box
    moved = x.copy()
    moved[ny : ny + h, nx : nx + w] = x[by : by + h, bx : bx + w]
    new_mask = np.zeros_like(mask)
    new_mask[ny : ny + h, nx : nx + w] = mask[by : by + h, bx : bx + w]
    return moved, new_mask


@register_shift("obj_position", family=FAMILY, params=POSITION, needs=("mask",), tags=TAGS)
def edit_position(image, p, rng, ctx):
    """Object (its largest contour's box) moved to a uniform random place on a filled background."""
    x, mask = prepare_inputs(image, ctx)
    box = largest_box(mask)
    if touches_every_border(box, mask.shape):
        raise ValueError("the object touches every border: there is nowhere to move it")
    _, _, w, h = box
    hh, ww = mask.shape
    nx = int(randint(rng, 0, ww - w + 1))
    ny = int(randint(rng, 0, hh - h + 1))
    moved, new_mask = move_box(x, mask, box, nx, ny)
    background, fill = fill_background(x, mask, rng, ctx)
    out = composite(moved, new_mask, background)
    record(
        ctx,
        **measured(
            x,
            out,
            new_mask,
            fill,
            rate_before=round(object_rate(mask), 6),
            angle=0.0,
            dx=nx - box[0],
            dy=ny - box[1],
        ),
    )
    return out


__all__ = ["POSITION", "move_box", "edit_position"]
