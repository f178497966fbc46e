"""Shifts made by generative models: ``ai_bg`` (a diffusion inpainter redraws the background).

Importing this package registers them and the ``inpainter`` context resource; the model is
a user's local checkpoint, configured with ``ROBUSTLAB_INPAINTER`` (see
:mod:`robustlab.shifts.synth.inpaint`). Without it these shifts are skipped with a message.
"""

from robustlab.shifts.synth import inpaint  # noqa: F401  (registers ai_bg)
from robustlab.shifts.synth.inpaint import Inpainter, configure_inpainter, get_inpainter

__all__ = ["Inpainter", "configure_inpainter", "get_inpainter"]
