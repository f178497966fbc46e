"""gaussian_blur: Gaussian smoothing (ImageNet-C extra/validation corruption).

Reference: ``skimage.filters.gaussian(x / 255., sigma, multichannel=True)`` (scipy
``gaussian_filter``, mode 'nearest', truncate 4), clipped to [0, 1]. ``_gauss`` reproduces
scipy's double-precision loop exactly, so the output bytes are the reference's.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.corruptions._gauss import gaussian_nearest, gaussian_nearest_uint8
from robustlab.shifts.registry import register_shift

# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.4, 0.6, 0.7, 0.8, 1]
_64PX = [0.5, 0.75, 1, 1.25, 1.5]
_299PX = [1.5, 2.5, 3.5, 4.5, 6.5]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "gaussian_blur",
    monotone=True,
    family="extra",
    params={1: 1, 2: 2, 3: 3, 4: 4, 5: 6},
    tags=("imagenet-c-extra",),
    presets=PRESETS,
    deterministic=True,
)
def gaussian_blur(x, sigma, rng, ctx):
    """Blur with a Gaussian of standard deviation ``sigma`` pixels, channels separately."""
    x = np.asarray(x)
    if x.dtype != np.uint8:  # the fused blur takes the pipeline's uint8; anything else as written
        return np.clip(gaussian_nearest(x / 255.0, sigma), 0, 1) * 255
    return gaussian_nearest_uint8(x, sigma, clip=True)
