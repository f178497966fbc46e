"""zoom_blur: average of the image and center zooms of it (ImageNet-C, blur family).

Reference: ``x = (img / 255.).astype(float32)``; ``out = zeros_like(x)``; for each zoom
factor ``z`` in ``np.arange(1, stop, step)``: ``out += clipped_zoom(x, z)``; result
``clip((x + out) / (len(factors) + 1), 0, 1) * 255``, truncated to uint8. Everything after
the division to float32 stays in float32, as in the reference.

The zooms come from :func:`._zoom.clipped_zoom_sum`, which reproduces
``scipy.ndimage.zoom(order=1)`` bit for bit, so the output equals the reference's on
square images. Non-square images are zoomed about the center per axis (the reference
only handles squares). Deterministic: no random draws.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from robustlab.shifts.corruptions._scratch import lookup, scratch
from robustlab.shifts.corruptions._zoom import clipped_zoom_sum
from robustlab.shifts.registry import register_shift

_SCALE = (np.arange(256) / 255.0).astype(np.float32)  # the reference's float32 x, per value


@njit(cache=True, nogil=True)
def _finish(x, acc, n, dst):
    """``uint8(clip((x + acc) / n, 0, 1) * 255)`` in float32, the reference's last line."""
    d = np.float32(n)
    one = np.float32(1.0)
    k = np.float32(255.0)
    for i in range(x.shape[0]):
        v = (x[i] + acc[i]) / d
        v = min(max(v, np.float32(0.0)), one)
        dst[i] = np.uint8(v * k)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(1.06, 0.01), (1.11, 0.01), (1.16, 0.01), (1.21, 0.01), (1.26, 0.01)]
_64PX = [(1.06, 0.01), (1.11, 0.01), (1.16, 0.01), (1.21, 0.01), (1.26, 0.01)]
_299PX = [(1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@functools.lru_cache(maxsize=64)
def _factors(stop: float, step: float) -> tuple[float, ...]:
    """The reference's ``np.arange(1, stop, step)`` as a tuple of Python floats (the same
    doubles), made once per severity rather than on every call."""
    return tuple(float(z) for z in np.arange(1, stop, step))


@register_shift(
    "zoom_blur",
    monotone=True,
    family="blur",
    # (stop, step) of np.arange(1, stop, step): the zoom factors averaged with the image
    params={1: (1.11, 0.01), 2: (1.16, 0.01), 3: (1.21, 0.02), 4: (1.26, 0.02), 5: (1.31, 0.03)},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def zoom_blur(x, params, rng, ctx):
    """Blur by averaging the image with center zooms by factors 1 .. stop (step apart)."""
    factors = _factors(*params)
    x = np.asarray(x)
    img = lookup(x, _SCALE, scratch("zoom_blur.img", x.shape, np.float32))
    acc = clipped_zoom_sum(img, factors)
    out = np.empty(img.shape, np.uint8)
    _finish(img.ravel(), acc.ravel(), len(factors) + 1, out.ravel())
    return out
