"""saturate: rescale the HSV saturation channel (ImageNet-C extra/validation corruption).

The reference converts ``x / 255.`` to HSV with scikit-image, sets
``S = clip(S * a + b, 0, 1)`` and converts back; :func:`._hsv.hsv_adjust` does the same
double-precision arithmetic per pixel (bit-exact for all 2**24 colours). Severities 1-2
desaturate, 3-5 oversaturate, so pixel distance is not monotone in severity.
"""

from __future__ import annotations

from robustlab.shifts.corruptions._hsv import hsv_adjust
from robustlab.shifts.registry import register_shift

# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)]
_64PX = [(0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (30, 0.2)]
_299PX = [(0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "saturate",
    family="extra",
    # (scale a, shift b) of the saturation channel on [0, 1]
    params={1: (0.3, 0.0), 2: (0.1, 0.0), 3: (2.0, 0.0), 4: (5.0, 0.1), 5: (20.0, 0.2)},
    tags=("imagenet-c-extra",),
    presets=PRESETS,
    deterministic=True,
)
def saturate(x, params, rng, ctx):
    """Saturation changed to ``S * a + b`` (clipped to [0, 1]) in HSV."""
    a, b = params
    return hsv_adjust(x, s_scale=a, s_shift=b)
