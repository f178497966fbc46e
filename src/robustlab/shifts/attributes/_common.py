"""Shared pieces of the ImageNet-E attribute edits: input checks, the object box, the
measured attributes and the final composite.

ImageNet-E (REFERENCE.md section 4) edits one attribute of the object at a time (its size,
position or direction) and pastes the edited object onto a background whose object region
was filled in first. Everything an edit needs from the mask is defined here once, the way
the official code defines it, so that the three edits and the measurements agree:

- the object's **box** is the bounding box of the mask's largest contour (largest by box
  area), not of all foreground pixels: a stray blob must not decide where "the object" is;
- the **object pixel rate** is the number of mask pixels inside that box over the image
  area (H*W);
- the **high-frequency complexity** is the paper's guidance measure, mean |FFT2| of the
  image scaled to [0, 1], averaged over channels.

Bad input (no mask, wrong size, empty or full) is a one-line ``ValueError``: the runner
records it as a counted skip, so an unusable sample never becomes a silently unedited
image under an edit's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cv2
import numpy as np

from robustlab.errors import CellSkipped
from robustlab.shifts.scenes._common import check_image, check_mask

FAMILY = "attribute"
TAGS = ("imagenet-e",)
# The context key a caller may fill with an empty dict to receive what an edit achieved.
ATTRIBUTES_KEY = "attributes"


def prepare_inputs(image, ctx: Mapping) -> tuple[np.ndarray, np.ndarray]:
    """The image (HxWx3 uint8) and its foreground mask (HxW bool), both validated.

    Raises:
        ValueError: bad image, or a missing, mis-sized, empty or full mask.
    """
    x = check_image(image)
    return x, check_mask(ctx.get("mask"), x.shape)


def largest_box(mask: np.ndarray) -> tuple[int, int, int, int]:
    """``(x, y, w, h)`` of the bounding box of the mask's largest contour (by box area).

    Every contour of the tree counts (holes and objects inside holes too) and ties go to
    the first one OpenCV reports, as in the official code (``RETR_TREE``).

    Raises:
        ValueError: the mask has no foreground.
    """
    contours, _ = cv2.findContours(
        np.ascontiguousarray(mask, dtype=np.uint8), cv2.RETR_TREE, cv2.CHAIN_APPROX_SIMPLE
    )
    if not contours:
        raise CellSkipped("mask is empty (no foreground pixels)")
    best, area = None, -1
    for c in contours:
        x, y, w, h = cv2.boundingRect(c)
        if w * h > area:
            best, area = (int(x), int(y), int(w), int(h)), w * h
    return best


def object_rate(mask: np.ndarray, box: tuple[int, int, int, int] | None = None) -> float:
    """Mask pixels inside the largest contour's box over the image area (the size measure)."""
    if not mask.any():
        return 0.0
    x, y, w, h = box if box is not None else largest_box(mask)
    return float(np.count_nonzero(mask[y : y + h, x : x + w])) / float(
        mask.shape[0] * mask.shape[1]
    )


def hf_complexity(rgb: np.ndarray) -> float:
    """Mean |FFT2| of the image in [0, 1] over height and width, averaged over channels.

    The quantity ImageNet-E's diffusion guidance pushes up or down (``HF((x0+1)/2)``);
    recorded before and after every edit so accuracy can be plotted against it.
    """
    from scipy import fft

    # Channel-first float32 with scipy's FFT: the same number as numpy's fft2 over axes
    # (0, 1) to float32 precision, about 7x faster (numpy works in float64 on strided axes).
    x = np.ascontiguousarray(np.asarray(rgb)[..., :3].transpose(2, 0, 1), dtype=np.float32)
    return float(np.abs(fft.fft2(x / np.float32(255.0))).mean())


def composite(obj: np.ndarray, obj_mask: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Object pixels where ``obj_mask`` is set, the filled background everywhere else."""
    return np.where(obj_mask[..., None], obj, background).astype(np.uint8)


def record(ctx: Mapping, **values: Any) -> None:
    """Put what an edit achieved into ``ctx["attributes"]`` when the caller asked for it.

    ``Shift.apply`` copies ``ctx`` but not the dict inside it, so the caller's dict is
    filled. Numbers are plain Python types (JSON/CSV/DuckDB friendly).
    """
    sink = ctx.get(ATTRIBUTES_KEY)
    if sink is None:
        return
    for k, v in values.items():
        if isinstance(v, np.generic):
            v = v.item()
        sink[k] = v


def measured(x: np.ndarray, out: np.ndarray, new_mask: np.ndarray, fill_name: str, **extra) -> dict:
    """The attribute record every edit reports: achieved rate, box, complexity, backend."""
    box = largest_box(new_mask)
    return {
        "object_rate": round(object_rate(new_mask, box), 6),
        "box_x": box[0],
        "box_y": box[1],
        "box_w": box[2],
        "box_h": box[3],
        "hf_before": round(hf_complexity(x), 6),
        "hf_after": round(hf_complexity(out), 6),
        "fill": fill_name,
        **extra,
    }


__all__ = [
    "FAMILY",
    "TAGS",
    "ATTRIBUTES_KEY",
    "prepare_inputs",
    "largest_box",
    "object_rate",
    "hf_complexity",
    "composite",
    "record",
    "measured",
]
