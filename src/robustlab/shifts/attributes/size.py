"""ImageNet-E object size: rescale the object to a target object pixel rate.

The arithmetic is the official ``resize_obj.py``'s (REFERENCE.md section 4), step for
step, so that on the same 256x256 frame and mask the pixels are the official ones
(checked against outputs of the official functions in
``tests/fixtures/imagenet_e_reference``, see ``benchmarks/imagenet_e_reference.py``):

- **Measure**: the box of the largest contour (by box area; OpenCV contours of the mask
  thresholded at 127, every level of the contour tree) and the rate = mask pixels above
  127 inside that box over the image area (:func:`box_and_rate`).
- **Zoom to the maximum first**: the box, widened to the frame's aspect ratio by the
  official formula, is stretched over the whole frame (:func:`zoom_to_maximum`). When the
  target is not below the rate this reaches, that stretched frame *is* the result (a
  target the object cannot reach gives its largest version).
- **Otherwise iterate**: while ``floor(100 * rate) != 100 * target`` and
  ``|rate - target| > tolerance``, zoom by ``s = sqrt(target / rate)`` about the box centre
  on whole-pixel offsets (:func:`zoom_step`: shrinking pastes the frame into an
  ``int(H/s) x int(W/s)`` canvas at ``int(centre * (1/s - 1))`` whose border is the frame
  itself upscaled; growing crops ``int(H/s) x int(W/s)`` at ``int(centre * (1 - 1/s))``;
  then ``cv2.resize`` back, bilinear with OpenCV's pixel-centre convention) and measure
  again. Each step resamples the previous step's result, as the original does.
- **Unreachable** (a step moved the rate the wrong way, more than ``max_steps`` steps, or
  the object left the frame): the official code copies the original image. That is the
  default here too (``unreachable="copy"``, recorded ``edited=0``); ``"skip"`` makes it a
  counted skip instead.
- **Paste**: the resampled object goes wherever the resampled mask is non-zero (the
  official editor binarises the mask at > 0), on the hole-filled background.

Other rates: register another level table with :func:`register_size_shift`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np

from robustlab.errors import CellSkipped
from robustlab.shifts.attributes._common import (
    FAMILY,
    TAGS,
    composite,
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
UNREACHABLE = ("copy", "skip")  # the official behaviour first


def size_levels(
    targets=TARGETS,
    *,
    tolerance: float = TOLERANCE,
    max_steps: int = MAX_STEPS,
    unreachable: str = "copy",
) -> dict[str, dict]:
    """A level table: level name (``"0.10"``) -> parameters of :func:`edit_size`."""
    if unreachable not in UNREACHABLE:
        raise ValueError(f"unreachable must be 'copy' or 'skip', not {unreachable!r}")
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


def mask_u8(mask: np.ndarray) -> np.ndarray:
    """An HxW 0/255 uint8 mask (the official code reads masks as 8-bit images)."""
    return np.ascontiguousarray(mask, dtype=bool).astype(np.uint8) * 255


def box_and_rate(m: np.ndarray) -> tuple[tuple[int, int, int, int] | None, float | None]:
    """``((x, y, w, h), rate)`` of an 8-bit mask, measured as the official code does.

    Contours of ``m > 127`` (the whole contour tree), the box of the first contour with the
    largest box area; rate = pixels above 127 inside the box / H / W (in that order, so
    the float is the official one to the last bit). ``(None, None)`` without a contour.
    """
    fg = (m > 127).astype(np.uint8)
    contours, _ = cv2.findContours(fg, cv2.RETR_TREE, cv2.CHAIN_APPROX_NONE)
    if not contours:
        return None, None
    best, area = (0, 0, 0, 0), 0
    for c in contours:
        x, y, w, h = cv2.boundingRect(c)
        if w * h > area:
            best, area = (int(x), int(y), int(w), int(h)), w * h
    x, y, w, h = best
    count = int(np.count_nonzero(fg[y : y + h, x : x + w]))
    return best, count / m.shape[0] / m.shape[1]


def zoom_step(img: np.ndarray, m: np.ndarray, box, s: float) -> tuple[np.ndarray, np.ndarray]:
    """One official zoom by ``s`` about the box centre, on whole-pixel offsets.

    ``s < 1`` shrinks: the frame goes into a larger canvas (its border: the frame itself
    resized to the canvas) at the integer offset of the box centre, and the canvas is
    resized back. ``s >= 1`` grows: a smaller window at that offset is resized up. Both
    resize with ``cv2.resize``'s default (bilinear), image and mask alike.
    """
    x, y, w, h = box
    hh, ww = m.shape
    ch, cw = int(hh / s), int(ww / s)
    cy, cx = y + h / 2, x + w / 2
    if s < 1:
        oy, ox = int(cy * (1 / s - 1)), int(cx * (1 / s - 1))
        big = cv2.resize(img, (cw, ch))
        big[oy : oy + hh, ox : ox + ww] = img
        big_m = np.zeros((ch, cw), np.uint8)
        big_m[oy : oy + hh, ox : ox + ww] = m
    else:
        oy, ox = int(cy * (1 - 1 / s)), int(cx * (1 - 1 / s))
        big = img[oy : oy + ch, ox : ox + cw]
        big_m = m[oy : oy + ch, ox : ox + cw]
    return cv2.resize(big, (ww, hh)), cv2.resize(big_m, (ww, hh))


def zoom_to_maximum(img: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The object at its official maximum: its box (widened by the official formula)
    stretched over the frame. None without an object."""
    box, _ = box_and_rate(m)
    if box is None:
        return None
    x, y, w, h = box
    hh, ww = m.shape
    if hh / h < ww / w:
        y0, y1 = float(y), float(y + h)
        span = w / hh * h
        c = x + w // 2
        x0 = c - span * c / ww
        x1 = x0 + span
    else:
        x0, x1 = float(x), float(x + w)
        span = h / ww * w
        c = y + h // 2
        y0 = c - span * c / hh
        y1 = y0 + span
    rows = slice(min(y, int(y0)), max(int(y1), y + h))
    cols = slice(min(x, int(x0)), max(int(x1), x + w))
    return cv2.resize(img[rows, cols], (ww, hh)), cv2.resize(m[rows, cols], (ww, hh))


def _off_target(rate: float, target: float, tolerance: float) -> bool:
    # The official loop condition, float for float (100 * target is compared unrounded).
    return math.floor(rate * 100) != target * 100.0 and abs(rate - target) > tolerance


def iterate_to(
    img: np.ndarray, m: np.ndarray, target: float, tolerance: float, max_steps: int
) -> tuple[np.ndarray, np.ndarray, float, int]:
    """The official iterative zoom: (image, mask, achieved rate, steps).

    Raises:
        ValueError: unreachable (a step moved the rate the wrong way, more than
            ``max_steps`` steps, or the object left the frame).
    """
    box, rate = box_and_rate(m)
    if box is None or rate is None:
        raise CellSkipped("object pixel rate cannot be measured: the mask has no object")
    start, steps = rate, 0
    while _off_target(rate, target, tolerance):
        grow = math.floor(rate * 100) < target * 100.0
        try:
            img, m = zoom_step(img, m, box, math.sqrt(target / rate))
        except cv2.error:  # a window of zero pixels: the official code fails here too
            raise CellSkipped(
                f"object pixel rate {start:.3f} cannot reach {target:.2f} "
                "(the zoom window shrank to nothing)"
            ) from None
        box, new = box_and_rate(m)
        if box is None or new is None:
            raise CellSkipped(
                f"object pixel rate {start:.3f} cannot reach {target:.2f} "
                "(the object left the image while zooming)"
            )
        if (grow and new < rate) or (not grow and new > rate):
            raise CellSkipped(
                f"object pixel rate {start:.3f} cannot reach {target:.2f} "
                f"(zooming stalled at {rate:.3f})"
            )
        steps += 1
        rate = new
        if steps > max_steps:
            raise CellSkipped(
                f"object pixel rate {start:.3f} did not reach {target:.2f} in {max_steps} steps"
            )
    return img, m, rate, steps


@dataclass(frozen=True)
class Rescaled:
    """What the official size procedure produced on one frame.

    Attributes:
        image: The whole resampled frame (HxWx3 uint8); the object is where ``mask`` > 0.
        mask: The resampled 8-bit mask (HxW uint8).
        rate: Its official rate (:func:`box_and_rate`).
        steps: Zoom steps taken (0 for the maximum).
        how: ``"iterate"`` or ``"maximum"`` (the target was at or above the object's
            largest rate, so the object was zoomed to its maximum).
    """

    image: np.ndarray
    mask: np.ndarray
    rate: float
    steps: int
    how: str


def rescale(
    img: np.ndarray,
    m: np.ndarray,
    target: float,
    *,
    tolerance: float = TOLERANCE,
    max_steps: int = MAX_STEPS,
) -> Rescaled:
    """The official size procedure on an image and its 8-bit mask (no hole fill).

    Raises:
        ValueError: the target is unreachable (the official code then copies the
            original: see :func:`edit_size`).
    """
    top = zoom_to_maximum(img, m)
    if top is None:
        raise CellSkipped("object pixel rate cannot be measured: the mask has no object")
    _, max_rate = box_and_rate(top[1])
    if max_rate is None:
        raise CellSkipped("the object vanished when zoomed to its maximum")
    if target < max_rate:
        out, om, rate, steps = iterate_to(img, m, target, tolerance, max_steps)
        return Rescaled(out, om, rate, steps, "iterate")
    return Rescaled(top[0], top[1], max_rate, 0, "maximum")


def edit_size(image, p, rng, ctx):
    """Object rescaled about its box centre to a target pixel rate, on a filled background."""
    x, mask = prepare_inputs(image, ctx)
    before = object_rate(mask)
    try:
        r = rescale(
            x, mask_u8(mask), p["target"], tolerance=p["tolerance"], max_steps=p["max_steps"]
        )
    except ValueError as exc:
        if p.get("unreachable", "copy") != "copy":
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
                edited=0,
                note=f"original copied (official): {exc}",
            ),
        )
        return x.copy()
    background, fill = fill_background(x, mask, rng, ctx)
    out = composite(r.image, r.mask > 0, background)
    record(
        ctx,
        **measured(
            x,
            out,
            r.mask > 127,
            fill,
            rate_before=round(before, 6),
            steps=r.steps,
            angle=0.0,
            edited=1,
            how=r.how,
        ),
    )
    return out


def register_size_shift(name: str, levels: dict[str, dict]) -> None:
    """Register a size edit with its own level table (see :func:`size_levels`).

    Not marked deterministic: with the ``diffusers`` hole fill the background depends on
    the cell's generator.
    """
    register_shift(
        name,
        family=FAMILY,
        params=levels,
        needs=("mask",),
        deterministic=False,
        tags=TAGS,
        random_only_with="the diffusers hole fill (ROBUSTLAB_EDIT_FILL=diffusers)",
    )(edit_size)


register_size_shift("obj_size", size_levels())

__all__ = [
    "TARGETS",
    "TOLERANCE",
    "MAX_STEPS",
    "UNREACHABLE",
    "Rescaled",
    "size_levels",
    "mask_u8",
    "box_and_rate",
    "zoom_step",
    "zoom_to_maximum",
    "iterate_to",
    "rescale",
    "edit_size",
    "register_size_shift",
]
