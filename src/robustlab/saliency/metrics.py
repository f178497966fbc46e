"""Foreground reliance of a saliency map: how much of it lies on the object.

Three numbers per image, from a map ``S`` (HxW, any real values) and the object mask ``M``
(HxW bool) at the same resolution (the model's input):

- **relevance mass** (``fg_share``): the share of the positive saliency inside the mask,
  ``sum(S+ * M) / sum(S+)`` with ``S+ = max(S, 0)``. Arras et al.'s Relevance Mass Accuracy
  (CLEVR-XAI, 2022; Quantus ``RelevanceMassAccuracy``) on the positive part: a gradient
  method's negative evidence is not "looking at" anything, and Grad-CAM maps are already
  non-negative, where the two definitions agree.
- **pointing game** (``pointing``): whether the map's maximum lies inside the mask (Zhang et
  al. 2016; Quantus ``PointingGame``). Ties count as a hit when any maximal pixel is inside,
  as in Quantus.
- **normalised share** (``fg_share_norm``): ``fg_share / area`` with ``area`` the mask's
  share of the image. A map spread evenly over the image scores 1 whatever the object's
  size, so a large object is not rewarded for being large; above 1 the map concentrates on
  the object, below 1 on the background.

A map with no positive value (a dead Grad-CAM) has no share and no maximum to point with:
all three are NaN, as is every number of an empty mask (Quantus: NaN for an empty mask,
but a hit for an all-zero map, whose every pixel is "the maximum").
"""

from __future__ import annotations

import numpy as np


def _pair(maps, masks) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(maps, dtype=np.float64)
    m = np.asarray(masks).astype(bool)
    if s.ndim == 2:
        s, m = s[None], m[None] if m.ndim == 2 else m
    if s.shape != m.shape or s.ndim != 3:
        raise ValueError(f"maps {s.shape} and masks {m.shape} must both be (N, H, W) or (H, W)")
    return s.reshape(len(s), -1), m.reshape(len(m), -1)


def relevance_mass(maps, masks) -> np.ndarray:
    """Share of positive saliency inside the mask, per image (N,), NaN where undefined."""
    s, m = _pair(maps, masks)
    pos = np.clip(s, 0.0, None)
    total = pos.sum(1)
    inside = (pos * m).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = inside / total
    out[(total <= 0) | (m.sum(1) == 0)] = np.nan
    return out


def pointing_game(maps, masks) -> np.ndarray:
    """1.0 where a maximal pixel of the map lies inside the mask, else 0.0 (N,); NaN for an
    empty mask or a map without a positive value."""
    s, m = _pair(maps, masks)
    peak = s == s.max(1, keepdims=True)
    out = (peak & m).any(1).astype(np.float64)
    out[(s.max(1) <= 0) | (m.sum(1) == 0)] = np.nan
    return out


def mask_area(masks) -> np.ndarray:
    """The mask's share of the image, per image (N,)."""
    m = np.asarray(masks).astype(bool)
    m = m[None] if m.ndim == 2 else m
    return m.reshape(len(m), -1).mean(1)


def normalised_share(maps, masks) -> np.ndarray:
    """Relevance mass divided by the mask's area share (1: no preference for the object)."""
    area = mask_area(masks)
    with np.errstate(invalid="ignore", divide="ignore"):
        return relevance_mass(maps, masks) / np.where(area > 0, area, np.nan)


def foreground_metrics(maps, masks) -> dict[str, np.ndarray]:
    """All per-image numbers at once: ``fg_share``, ``fg_share_norm``, ``pointing``,
    ``mask_area`` (each an (N,) float array)."""
    share = relevance_mass(maps, masks)
    area = mask_area(masks)
    with np.errstate(invalid="ignore", divide="ignore"):
        norm = share / np.where(area > 0, area, np.nan)
    return {
        "fg_share": share,
        "fg_share_norm": norm,
        "pointing": pointing_game(maps, masks),
        "mask_area": area,
    }


__all__ = [
    "relevance_mass",
    "pointing_game",
    "mask_area",
    "normalised_share",
    "foreground_metrics",
]
