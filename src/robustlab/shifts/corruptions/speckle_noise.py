"""speckle_noise: multiplicative Gaussian noise (ImageNet-C extra/validation corruption).

Reference: ``x + x * N(0, sigma)`` on ``x / 255``, clipped to [0, 1]; one normal draw
over the HxWx3 array, so a ``RandomState`` reproduces it exactly.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift


@register_shift(
    "speckle_noise",
    family="extra",
    params={1: 0.15, 2: 0.2, 3: 0.35, 4: 0.45, 5: 0.6},
    tags=("imagenet-c-extra",),
)
def speckle_noise(x, sigma, rng, ctx):
    """Noise proportional to intensity: ``x + x * N(0, sigma)``."""
    x = np.asarray(x) / 255.0
    return np.clip(x + x * rng.normal(size=x.shape, scale=sigma), 0, 1) * 255
