"""Saliency and foreground reliance (XIMAGENET-12, its Figure 4): does a model look at the
object, and does it still when the background changes?

- :mod:`.attribution`: saliency maps from ``grad-cam`` (CAM methods, the target layer
  found automatically) and Captum (gradient methods).
- :mod:`.metrics`: relevance mass, pointing game and area-normalised share per image.
- :mod:`.run`: :func:`saliency`, the Python face of ``robustlab saliency`` (a stored,
  resumable run).
- :mod:`.analysis`: per-cell intervals, per-model numbers, correlation across models.

The libraries are an optional extra: ``pip install 'robustlab[saliency]'``.
"""

from __future__ import annotations

from robustlab.saliency.metrics import (
    foreground_metrics,
    mask_area,
    normalised_share,
    pointing_game,
    relevance_mass,
)
from robustlab.saliency.run import SaliencyResult, saliency

__all__ = [
    "saliency",
    "SaliencyResult",
    "foreground_metrics",
    "relevance_mass",
    "pointing_game",
    "normalised_share",
    "mask_area",
]
