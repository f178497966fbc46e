"""Shifts made by generative models.

- ``ai_bg`` (XIMAGENET-12): a diffusion inpainter redraws the background; configured with
  ``--inpainter`` / ``ROBUSTLAB_INPAINTER`` (see :mod:`robustlab.shifts.generative.inpaint`).
- ``bg_complexity`` / ``bg_complexity_adv`` (ImageNet-E): guided diffusion makes the
  background busier or plainer; configured with ``--bg-diffusion`` / ``ROBUSTLAB_BG_DIFFUSION`` (see
  :mod:`robustlab.shifts.generative.guided_bg`).

Importing this package registers them and their context resources. Without the
configuration these shifts are skipped with a message.
"""

from robustlab.shifts.generative import guided_bg, inpaint  # noqa: F401  (register the shifts)
from robustlab.shifts.generative.guided_bg import GuidedBackground, get_bg_diffusion
from robustlab.shifts.generative.inpaint import Inpainter, get_inpainter

__all__ = [
    "Inpainter",
    "get_inpainter",
    "GuidedBackground",
    "get_bg_diffusion",
]
