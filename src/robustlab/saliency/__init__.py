"""Saliency and foreground reliance (XIMAGENET-12, its Figure 4): does a model look at the
object, and does it still when the background changes?

- :mod:`.attribution`: saliency maps from ``grad-cam`` (CAM methods, the target layer
  found automatically) and Captum (gradient methods).
- :mod:`.methods`: the methods and targets as data (no heavy import, for ``--help``).
- :mod:`.explain`: one batch explained: prediction, class explained, map, numbers.
- :mod:`.maps`: the stored thumbnail of a map, and the object mask on the model's pixels.
- :mod:`.metrics`: relevance mass, pointing game and area-normalised share per image.
- :mod:`.analysis`: per-cell intervals, per-model numbers, correlation across models.

Every saliency computation lives here. The stored, resumable run (``robustlab saliency``)
is the workflow :func:`robustlab.workflows.saliency.saliency`, which only selects cells,
batches them and stores rows; the report's section (``workflows/report/saliency.py``) and
the command only read, draw and print.

The libraries are an optional extra: ``pip install 'robustlab[saliency]'``.
"""

from __future__ import annotations

import importlib
from typing import Any

# Names of the package face, by the module that defines them: imported on first use, so
# ``robustlab saliency --help`` (which reads only :mod:`.attribution`'s method table)
# imports neither pandas nor the store.
_LAZY = {
    "foreground_metrics": "metrics",
    "relevance_mass": "metrics",
    "pointing_game": "metrics",
    "normalised_share": "metrics",
    "mask_area": "metrics",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"robustlab.saliency.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'robustlab.saliency' has no attribute {name!r}")


__all__ = [
    "foreground_metrics",
    "relevance_mass",
    "pointing_game",
    "normalised_share",
    "mask_area",
]
