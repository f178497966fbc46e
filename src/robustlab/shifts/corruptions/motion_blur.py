"""motion_blur: camera-shake blur along a random direction (ImageNet-C, blur family).

The reference saves the image as PNG, runs ImageMagick's ``MotionBlurImage`` through Wand
with ``(radius, sigma)`` from the table and an angle drawn ``uniform(-45, 45)`` degrees, and
decodes the PNG ImageMagick writes (a grayscale PNG for grey images, returned as three
equal channels, which is what blurring each channel gives too). ImageMagick is not a
dependency: :mod:`._motion` re-implements that blur with the same kernel, tap offsets,
edge handling and 16-bit quantum arithmetic, so the bytes match the reference for the
ImageMagick 6 Q16 build that made the fixtures. The one random draw (the angle) is made
exactly as in the reference, so a ``RandomState`` reproduces it.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.corruptions._motion import motion_blur_uint8
from robustlab.shifts.registry import register_shift


def draw(rng) -> float:
    """The reference's one draw: the blur angle in degrees, uniform on [-45, 45)."""
    return float(rng.uniform(-45, 45))


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)]
_64PX = [(10, 1), (10, 1.5), (10, 2), (10, 2.5), (12, 3)]
_299PX = [(12, 4), (17, 6), (17, 9), (17, 13), (22, 16)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "motion_blur",
    monotone=True,
    family="blur",
    params={1: (10, 3), 2: (15, 5), 3: (15, 8), 4: (15, 12), 5: (20, 15)},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def motion_blur(x, params, rng, ctx):
    """ImageMagick-style motion blur, ``params = (radius, sigma)``, random angle in [-45, 45)."""
    radius, sigma = params
    return motion_blur_uint8(np.ascontiguousarray(x, dtype=np.uint8), radius, sigma, draw(rng))
