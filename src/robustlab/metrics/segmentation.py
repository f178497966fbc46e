"""Segmentation metrics: confusion matrices, IoU, mIoU and pixel accuracy.

XIMAGENET-12 also asks how *segmentation* models hold up when the background changes
(REFERENCE.md section 2): a model's predicted foreground (every class other than
background) is compared with the scenario's object mask. The functions here are pure and
work on any number of classes; the binary foreground/background case is the 2x2 matrix
``[[tn, fp], [fn, tp]]`` (rows: truth, columns: prediction; class 0 = background).

Scores are computed from counts accumulated over all pixels of a group (the PASCAL VOC
and Cityscapes convention), not by averaging per-image scores: an image of a tiny object
would otherwise weigh as much as one that fills the frame. :func:`summarize` also reports
the per-image mean foreground IoU for readers who want that view.

A class that appears neither in the truth nor in the prediction has an undefined IoU
(0/0): it is NaN and left out of the mean, never counted as 0 or 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

COUNT_COLUMNS = ("tp", "fp", "fn", "tn")


def _labels(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"{name} must be an HxW label map, got shape {a.shape}")
    if a.dtype == bool:
        return a.astype(np.int64)
    if not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must hold integer or bool labels, got {a.dtype}")
    return a.astype(np.int64, copy=False)


def confusion_matrix(
    pred, target, num_classes: int, *, ignore_index: int | None = None
) -> np.ndarray:
    """Pixel confusion matrix ``cm[true, predicted]`` (int64, ``num_classes`` square).

    Args:
        pred: HxW predicted labels (int or bool).
        target: HxW true labels, same shape.
        num_classes: Number of classes K; labels must be in 0..K-1.
        ignore_index: A target label whose pixels are not counted (e.g. VOC's 255 border).

    Raises:
        ValueError: shapes differ, or a label is outside 0..K-1.
    """
    p, t = _labels(pred, "pred"), _labels(target, "target")
    if p.shape != t.shape:
        raise ValueError(f"pred {p.shape} and target {t.shape} differ in shape")
    k = int(num_classes)
    if k < 1:
        raise ValueError(f"num_classes must be at least 1, got {num_classes}")
    keep = np.ones(t.shape, bool) if ignore_index is None else t != ignore_index
    p, t = p[keep], t[keep]
    for arr, name in ((p, "pred"), (t, "target")):
        if arr.size and (arr.min() < 0 or arr.max() >= k):
            raise ValueError(f"{name} has labels outside 0..{k - 1}")
    return np.bincount(t * k + p, minlength=k * k).reshape(k, k).astype(np.int64)


def binary_counts(pred, target) -> tuple[int, int, int, int]:
    """(tp, fp, fn, tn) of a predicted foreground mask against the true one (foreground > 0)."""
    p = np.asarray(pred)
    t = np.asarray(target)
    if p.ndim != 2 or p.shape != t.shape:
        raise ValueError(f"pred {p.shape} and target {t.shape} must be HxW masks of one shape")
    p, t = p > 0, t > 0
    tp = int(np.count_nonzero(p & t))
    fp = int(np.count_nonzero(p & ~t))
    fn = int(np.count_nonzero(~p & t))
    return tp, fp, fn, int(p.size - tp - fp - fn)


def binary_matrix(tp: int, fp: int, fn: int, tn: int) -> np.ndarray:
    """The 2x2 confusion matrix of binary counts (class 0 background, 1 foreground)."""
    return np.array([[tn, fp], [fn, tp]], dtype=np.int64)


def iou_per_class(cm) -> np.ndarray:
    """IoU of each class: diag / (row sum + column sum - diag); NaN when the class is absent."""
    cm = np.asarray(cm, dtype=np.float64)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1]:
        raise ValueError(f"a confusion matrix must be square, got shape {cm.shape}")
    inter = np.diag(cm)
    union = cm.sum(0) + cm.sum(1) - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), np.nan)


def mean_iou(cm) -> float:
    """Mean IoU over the classes present in truth or prediction (NaN if none is)."""
    iou = iou_per_class(cm)
    return float(np.nanmean(iou)) if np.any(~np.isnan(iou)) else float("nan")


def pixel_accuracy(cm) -> float:
    """Fraction of counted pixels whose predicted class is the true one (NaN if none)."""
    cm = np.asarray(cm, dtype=np.float64)
    total = cm.sum()
    return float(np.trace(cm) / total) if total > 0 else float("nan")


def class_accuracy(cm) -> np.ndarray:
    """Per-class recall: diag / row sum; NaN for a class with no true pixels."""
    cm = np.asarray(cm, dtype=np.float64)
    rows = cm.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(rows > 0, np.diag(cm) / np.where(rows > 0, rows, 1), np.nan)


def summarize(counts: pd.DataFrame, by: Sequence[str] = ("shift", "level")) -> pd.DataFrame:
    """Scores per group from per-image binary counts.

    Args:
        counts: One row per (image, cell) with integer columns ``tp``, ``fp``, ``fn``,
            ``tn`` plus the ``by`` columns.
        by: Grouping columns (a scenario is ``shift`` + ``level``).

    Returns:
        DataFrame with the ``by`` columns, ``n`` (images), ``pixel_acc``, ``miou``
        (mean of background and foreground IoU over the group's summed counts),
        ``fg_iou``, ``bg_iou`` and ``image_fg_iou`` (mean of per-image foreground IoU over
        images whose truth or prediction has foreground).
    """
    by = list(by)
    missing = [c for c in (*by, *COUNT_COLUMNS) if c not in counts.columns]
    if missing:
        raise ValueError(f"segmentation counts lack column(s) {', '.join(missing)}")
    rows = []
    groups = counts.groupby(by, sort=False) if by else [((), counts)]
    for key, g in groups:
        c = g[list(COUNT_COLUMNS)].to_numpy(dtype=np.int64)
        if (c < 0).any():
            raise ValueError("segmentation counts must be non-negative")
        tp, fp, fn, tn = (int(v) for v in c.sum(0))
        cm = binary_matrix(tp, fp, fn, tn)
        bg, fg = iou_per_class(cm)
        union = c[:, 0] + c[:, 1] + c[:, 2]
        per_image = c[union > 0, 0] / union[union > 0]
        key = key if isinstance(key, tuple) else (key,)
        rows.append(
            {
                **dict(zip(by, key)),
                "n": len(g),
                "pixel_acc": pixel_accuracy(cm),
                "miou": mean_iou(cm),
                "fg_iou": float(fg),
                "bg_iou": float(bg),
                "image_fg_iou": float(per_image.mean()) if per_image.size else float("nan"),
            }
        )
    return pd.DataFrame(
        rows, columns=[*by, "n", "pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou"]
    )


def cell_scores(counts: pd.DataFrame, by: Sequence[str] = ("run_id",)) -> pd.DataFrame:
    """Per-cell scores of stored segmentation counts (the ``segmentation`` table's rows).

    What ``robustlab segment`` and ``robustlab results`` print: :func:`summarize` per
    (``by``..., shift, level), in the same cell order as classification tables (clean
    first, then shifts in registry order), so the two read side by side.

    Args:
        counts: Rows with ``shift``, ``level``, ``tp``, ``fp``, ``fn``, ``tn`` and the
            ``by`` columns that are present (a missing ``run_id`` is simply not grouped on).
        by: Extra grouping columns in front of the cell.

    Returns:
        The :func:`summarize` columns (``n``, ``pixel_acc``, ``miou``, ``fg_iou``,
        ``bg_iou``, ``image_fg_iou``) per cell; empty input gives an empty table.
    """
    from robustlab.metrics.accuracy import sort_cells

    keys = [c for c in by if c in counts.columns] + ["shift", "level"]
    if counts.empty:
        missing = [c for c in ("shift", "level", *COUNT_COLUMNS) if c not in counts.columns]
        if missing:
            raise ValueError(f"segmentation counts lack column(s) {', '.join(missing)}")
        return pd.DataFrame(
            columns=[*keys, "n", "pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou"]
        )
    df = counts.assign(level=counts["level"].astype(str)) if "level" in counts.columns else counts
    return sort_cells(summarize(df, by=keys))


__all__ = [
    "cell_scores",
    "confusion_matrix",
    "binary_counts",
    "binary_matrix",
    "iou_per_class",
    "mean_iou",
    "pixel_accuracy",
    "class_accuracy",
    "summarize",
    "COUNT_COLUMNS",
]
