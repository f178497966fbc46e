"""ImageNet-D style synthesis: a prompt grid drawn by a local diffusion checkpoint.

:mod:`robustlab.synth.prompts` builds the grid (classes x nuisances x N, templates as
data, seeds from the seed rule), :mod:`robustlab.synth.backend` runs a diffusers
text-to-image pipeline, :mod:`robustlab.synth.run` writes the published layout resumably.
"""

from robustlab.synth.run import SynthResult, synth

__all__ = ["synth", "SynthResult"]
