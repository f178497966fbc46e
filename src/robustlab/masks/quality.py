"""Mask quality: per-mask sanity records and agreement between two mask sets.

An automatic mask is only useful if someone can see when it failed. :func:`mask_record`
gives the numbers a reviewer looks at (area, pieces, border contact) and turns them into
flags; :func:`iou` and :func:`boundary_f` score a mask against a reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np


@dataclass(frozen=True)
class QualityThresholds:
    """When a mask is flagged. Fractions are of the image area.

    Attributes:
        tiny: Foreground below this fraction (but not empty) is ``tiny``.
        huge: Foreground above this fraction (but not full) is ``huge``.
        max_components: More 8-connected pieces than this is ``fragmented``...
        min_largest: ...as is a largest piece holding less than this share of the foreground.
        border_sides: Foreground touching at least this many image sides is ``border``
            (an object rarely touches all four; a background leak often does).
    """

    tiny: float = 0.01
    huge: float = 0.95
    max_components: int = 5
    min_largest: float = 0.6
    border_sides: int = 4


def mask_record(mask: np.ndarray, thresholds: QualityThresholds = QualityThresholds()) -> dict:
    """Area fraction, components, border contact and flags for one mask.

    Returns:
        dict with ``height``, ``width``, ``area_fraction``, ``components``,
        ``largest_fraction`` (largest piece / foreground), ``border_sides`` (0..4),
        ``touches_border``, ``flags`` (list of ``empty``, ``full``, ``tiny``, ``huge``,
        ``fragmented``, ``border``) and ``suspicious`` (any flag but none of empty/full).
    """
    m = np.asarray(mask) > 0
    h, w = m.shape
    area = int(m.sum())
    frac = area / m.size
    if area:
        n, labels, stats, _ = cv2.connectedComponentsWithStats(m.astype(np.uint8), connectivity=8)
        sizes = stats[1:, cv2.CC_STAT_AREA]
        comps, largest = int(n - 1), float(sizes.max() / area)
    else:
        comps, largest = 0, 0.0
    sides = int(m[0].any()) + int(m[-1].any()) + int(m[:, 0].any()) + int(m[:, -1].any())
    flags = []
    if area == 0:
        flags.append("empty")
    elif area == m.size:
        flags.append("full")
    else:
        if frac < thresholds.tiny:
            flags.append("tiny")
        if frac > thresholds.huge:
            flags.append("huge")
        if comps > thresholds.max_components or largest < thresholds.min_largest:
            flags.append("fragmented")
        if sides >= thresholds.border_sides:
            flags.append("border")
    return {
        "height": h,
        "width": w,
        "area_fraction": round(frac, 6),
        "components": comps,
        "largest_fraction": round(largest, 6),
        "border_sides": sides,
        "touches_border": sides > 0,
        "flags": flags,
        "suspicious": bool(flags) and not {"empty", "full"} & set(flags),
    }


def _pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = np.asarray(a) > 0, np.asarray(b) > 0
    if a.shape != b.shape:
        raise ValueError(f"masks differ in size: {a.shape} vs {b.shape}")
    return a, b


def iou(pred: np.ndarray, true: np.ndarray) -> float:
    """Intersection over union; 1.0 when both masks are empty (they agree)."""
    a, b = _pair(pred, true)
    union = np.logical_or(a, b).sum()
    return 1.0 if union == 0 else float(np.logical_and(a, b).sum() / union)


def _boundary(m: np.ndarray) -> np.ndarray:
    """One-pixel inner boundary: foreground pixels with a background 4-neighbour or edge."""
    padded = np.pad(m, 1, constant_values=False)
    eroded = cv2.erode(padded.astype(np.uint8), np.ones((3, 3), np.uint8))[1:-1, 1:-1] > 0
    return m & ~eroded


def boundary_f(pred: np.ndarray, true: np.ndarray, tolerance: float | None = None) -> float:
    """Boundary F-score: boundary pixels matched within ``tolerance`` pixels, both ways.

    Args:
        tolerance: Match distance in pixels; default 0.75 % of the image diagonal (at least
            1 pixel), the convention of the DAVIS benchmark.

    Returns:
        2PR / (P + R); 1.0 when both masks are empty, 0.0 when exactly one is.
    """
    a, b = _pair(pred, true)
    if tolerance is None:
        tolerance = max(1.0, 0.0075 * float(np.hypot(*a.shape)))
    ba, bb = _boundary(a), _boundary(b)
    na, nb = int(ba.sum()), int(bb.sum())
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    # distance from every pixel to the nearest boundary pixel of the other mask
    da = cv2.distanceTransform((~bb).astype(np.uint8), cv2.DIST_L2, 5)
    db = cv2.distanceTransform((~ba).astype(np.uint8), cv2.DIST_L2, 5)
    precision = float((da[ba] <= tolerance).mean())
    recall = float((db[bb] <= tolerance).mean())
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def compare_masks(pred: np.ndarray, true: np.ndarray) -> dict:
    """IoU and boundary F of one predicted mask against its reference."""
    return {"iou": iou(pred, true), "boundary_f": boundary_f(pred, true)}


def compare_mask_sets(pred_dir: str | Path, true_dir: str | Path):
    """Score every PNG under ``pred_dir`` against the same relative path under ``true_dir``.

    Returns:
        pandas DataFrame with one row per mask (``id``, ``iou``, ``boundary_f``, or
        ``error`` when a reference is missing or sizes differ), plus ``.attrs["mean"]``.
    """
    import pandas as pd

    from robustlab.masks.io import load_mask

    from robustlab.files.safety import file_inside, walk_files

    pred_dir, true_dir = Path(pred_dir), Path(true_dir)
    rows = []
    # Both folders under robustlab.files.safety' link rule: no link out of either is read.
    for rel in (r.as_posix() for r in sorted(walk_files(pred_dir)[0]) if r.suffix == ".png"):
        p = pred_dir / rel
        t = file_inside(true_dir, rel)
        if t is None:
            rows.append(
                {"id": rel, "iou": np.nan, "boundary_f": np.nan, "error": "no reference mask"}
            )
            continue
        try:
            rows.append({"id": rel, **compare_masks(load_mask(p), load_mask(t)), "error": ""})
        except ValueError as exc:
            rows.append({"id": rel, "iou": np.nan, "boundary_f": np.nan, "error": str(exc)})
    df = pd.DataFrame(rows, columns=["id", "iou", "boundary_f", "error"])
    df.attrs["mean"] = {
        "iou": float(df["iou"].mean()),
        "boundary_f": float(df["boundary_f"].mean()),
        "n": int(df["iou"].notna().sum()),
        "errors": int((df["error"] != "").sum()),
    }
    return df


def thresholds_dict(t: QualityThresholds) -> dict:
    return asdict(t)
