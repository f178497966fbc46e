"""gaussian_blur: Gaussian smoothing (ImageNet-C extra/validation corruption).

Reference: ``skimage.filters.gaussian(x / 255., sigma, multichannel=True)`` (scipy
``gaussian_filter``, mode 'nearest', truncate 4), clipped to [0, 1]. ``_gauss`` reproduces
scipy's double-precision loop exactly, so the output bytes are the reference's.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.corruptions._gauss import gaussian_nearest, gaussian_nearest_uint8
from robustlab.shifts.registry import register_shift


@register_shift(
    "gaussian_blur",
    family="extra",
    params={1: 1, 2: 2, 3: 3, 4: 4, 5: 6},
    tags=("imagenet-c-extra",),
    deterministic=True,
)
def gaussian_blur(x, sigma, rng, ctx):
    """Blur with a Gaussian of standard deviation ``sigma`` pixels, channels separately."""
    x = np.asarray(x)
    if x.dtype != np.uint8:  # the fused blur takes the pipeline's uint8; anything else as written
        return np.clip(gaussian_nearest(x / 255.0, sigma), 0, 1) * 255
    return gaussian_nearest_uint8(x, sigma, clip=True)
