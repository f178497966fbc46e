"""brightness: raise the HSV value channel (ImageNet-C, weather family).

The reference converts ``x / 255.`` to HSV with scikit-image, adds ``c`` to V, clips V to
[0, 1] and converts back. :func:`._hsv.hsv_adjust` does the same double-precision
arithmetic per pixel (bit-exact for all 2**24 colours) without the full-size temporaries.
"""

from __future__ import annotations

from robustlab.shifts.corruptions._hsv import hsv_adjust
from robustlab.shifts.registry import register_shift

# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.05, 0.1, 0.15, 0.2, 0.3]
_64PX = [0.1, 0.2, 0.3, 0.4, 0.5]
_299PX = [0.1, 0.2, 0.3, 0.4, 0.5]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "brightness",
    monotone=True,
    family="weather",
    params={1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def brightness(x, shift, rng, ctx):
    """Brighter image: HSV value (on [0, 1]) raised by ``shift`` and clipped at 1."""
    return hsv_adjust(x, v_shift=shift)
