"""ImageNet-D style synthesis: a prompt grid drawn by a local diffusion checkpoint.

:mod:`robustlab.workflows.imagenet_d.synth.prompts` builds the grid (classes x nuisances x N, templates as
data, seeds from the seed rule), :mod:`robustlab.shifts.generative.text2image` runs a diffusers
text-to-image pipeline, :mod:`robustlab.workflows.imagenet_d.synth.run` writes the published layout resumably.
"""

from robustlab.workflows.imagenet_d.synth.request import SynthDiffusion, SynthExecution, SynthGrid
from robustlab.workflows.imagenet_d.synth.run import SynthResult, synth

__all__ = ["synth", "SynthGrid", "SynthDiffusion", "SynthExecution", "SynthResult"]
