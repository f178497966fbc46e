"""ImageNet-E object position: the object, first shrunk to a base rate, moved to a random place.

As the official code does (REFERENCE.md section 4; ``utils/change_place.py`` and the
editor that calls it): the box of the mask's largest contour (every non-zero mask pixel
counts, the whole contour tree, first of the largest boxes), with the image and mask
pixels inside it, moves to a top-left corner drawn uniformly from ``[0, W - w] x
[0, H - h]`` (x first, then y), and the moved object (where the moved mask is non-zero)
is pasted on the hole-filled background. An object touching all four borders has one
place to go, its own: it stays, on the filled background, as in the original.

**Base rate.** The official dataset script (``change_place.py``'s ``__main__``) moves the
objects of ``validation-size-0.05-padding-...``: the images the size edit made at rate
0.05, not the original photos. So by default the object is first rescaled to rate 0.05
with the size edit's official procedure (:func:`.size.rescale`), then moved; a level with
``base_rate`` None moves the full-size object. When the shrink is unreachable the size
edit's official answer is the original image, which is then what gets moved
(``unreachable="copy"``, recorded ``shrunk=0``); ``"skip"`` makes it a counted skip.

The official draw used Python's unseeded ``random``; here both coordinates come from the
cell's generator (the seed rule), so a cell is reproducible. Object parts outside the
largest contour's box are not moved; they are filled in with the rest of the old object
region, as in the original.
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
)
from robustlab.shifts.attributes.fill import fill_background
from robustlab.shifts.attributes.size import MAX_STEPS, TOLERANCE, UNREACHABLE, mask_u8, rescale
from robustlab.shifts.registry import register_shift

BASE_RATE = 0.05  # the official dataset script moves the size-0.05 images


def position_levels(
    base_rate: float | None = BASE_RATE, *, unreachable: str = "copy"
) -> dict[str, dict]:
    """The level table: ``random`` -> parameters of :func:`edit_position`."""
    if unreachable not in UNREACHABLE:
        raise ValueError(f"unreachable must be 'copy' or 'skip', not {unreachable!r}")
    if base_rate is not None and not 0.0 < float(base_rate) < 1.0:
        raise ValueError(f"a base object pixel rate must be in (0, 1), got {base_rate}")
    return {
        "random": {
            "draw": "uniform",
            "base_rate": None if base_rate is None else float(base_rate),
            "tolerance": TOLERANCE,
            "max_steps": MAX_STEPS,
            "unreachable": unreachable,
        }
    }


POSITION = position_levels()


def move_box(x: np.ndarray, mask: np.ndarray, box, nx: int, ny: int):
    """(image with the box's pixels copied to (nx, ny), mask holding only the moved object)."""
    bx, by, w, h = box
    moved = x.copy()
    moved[ny : ny + h, nx : nx + w] = x[by : by + h, bx : bx + w]
    new_mask = np.zeros_like(mask)
    new_mask[ny : ny + h, nx : nx + w] = mask[by : by + h, bx : bx + w]
    return moved, new_mask


def object_layer(x: np.ndarray, mask: np.ndarray, p: dict) -> tuple[np.ndarray, np.ndarray, str]:
    """(image, 8-bit mask, note) of the object to move: shrunk to ``p["base_rate"]``
    with the official size procedure, or the original when there is no base rate (or,
    with ``unreachable="copy"``, when the shrink cannot be done).

    Raises:
        ValueError: the shrink is unreachable and ``unreachable`` is ``"skip"``.
    """
    m = mask_u8(mask)
    if p.get("base_rate") is None:
        return x, m, ""
    try:
        r = rescale(
            x,
            m,
            p["base_rate"],
            tolerance=p.get("tolerance", TOLERANCE),
            max_steps=p.get("max_steps", MAX_STEPS),
        )
    except ValueError as exc:
        if p.get("unreachable", "copy") != "copy":
            raise
        return x, m, f"moved at full size (official copy): {exc}"
    return r.image, r.mask, ""


def place(layer: np.ndarray, m: np.ndarray, nx: int, ny: int) -> tuple[np.ndarray, np.ndarray]:
    """(image with the object's box at (nx, ny), the moved 8-bit mask), as change_place.

    The editor pastes where the moved mask is non-zero; its rate is measured above 127
    like the size edit's.
    """
    return move_box(layer, m, largest_box(m > 0), nx, ny)


@register_shift("obj_position", family=FAMILY, params=POSITION, needs=("mask",), tags=TAGS)
def edit_position(image, p, rng, ctx):
    """Object (shrunk to the base rate) moved to a uniform random place on a filled background."""
    x, mask = prepare_inputs(image, ctx)
    layer, m, note = object_layer(x, mask, p)
    bx, by, w, h = largest_box(m > 0)
    hh, ww = m.shape
    nx = int(randint(rng, 0, ww - w + 1))
    ny = int(randint(rng, 0, hh - h + 1))
    moved, new_m = place(layer, m, nx, ny)
    background, fill = fill_background(x, mask, rng, ctx)
    out = composite(moved, new_m > 0, background)
    extra = {"note": note} if note else {}
    record(
        ctx,
        **measured(
            x,
            out,
            new_m > 127,
            fill,
            rate_before=round(object_rate(mask), 6),
            angle=0.0,
            dx=nx - bx,
            dy=ny - by,
            edited=1,
            shrunk=int(p.get("base_rate") is not None and not note),
            **extra,
        ),
    )
    return out


__all__ = [
    "BASE_RATE",
    "POSITION",
    "position_levels",
    "move_box",
    "object_layer",
    "place",
    "edit_position",
]
