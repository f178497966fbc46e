"""snow: falling snow over a brightened, washed-out scene (ImageNet-C, weather family).

The reference, step by step (and here in the same order, with the same dtypes):

1. A snow layer of ``normal(loc, scale)`` noise, one value per pixel (float64), zoomed about
   the center by ``zoom`` with ``clipped_zoom`` (shared :mod:`._zoom`), and set to 0 below
   ``threshold``.
2. The layer is clipped to [0, 1] and stored as an 8-bit grey PNG (``(v * 255)`` truncated),
   motion-blurred by ImageMagick with ``(radius, sigma)`` and an angle drawn
   ``uniform(-135, -45)`` degrees (the streaks fall downwards), decoded and divided by 255.
   :mod:`._motion` reproduces that ImageMagick blur byte for byte, so the PNG round trip is
   just the uint8 array.
3. The image (float32 in [0, 1]) becomes ``blend * x + (1 - blend) * max(x, 1.5 * grey(x) + 0.5)``
   in float32, with OpenCV's RGB-to-grey (:func:`_grey`: its weights and its fused
   multiply-adds, which OpenCV itself only computes that way on some CPUs).
4. Output: ``clip(x + snow + snow rotated by 180 degrees, 0, 1) * 255`` in float64.

Steps 3 and 4 run as one numba loop that does the same float32/float64 operations as the
reference's numpy expressions (about 2 ms less than the five array passes at 224 px) and
returns the truncated uint8 image directly.

The reference reshapes the grey image to 224x224; here it keeps the image's own height and
width, so any size works (``clipped_zoom`` treats the two axes separately).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from robustlab.shifts.corruptions._fma import fma32
from robustlab.shifts.corruptions._motion import motion_blur_uint8
from robustlab.shifts.corruptions._zoom import clipped_zoom
from robustlab.shifts.registry import register_shift


@njit(cache=True, nogil=True)
def _compose(x, grey, flakes, blend, rest):
    """Steps 3 and 4 fused, with the reference's dtypes; returns the final uint8 image.

    ``x`` is HxWx3 float32, ``grey`` HxW float32, ``flakes`` the HxW uint8 blurred layer,
    ``blend`` and ``rest`` (``1 - blend`` computed in double, as in the reference) already
    float32. Every operation is a single IEEE float32 or float64 operation in the
    reference's order, so the values are numpy's; truncating to uint8 here is what the
    caller's ``np.uint8(clip(...))`` would do.
    """
    height, width, channels = x.shape
    out = np.empty((height, width, channels), np.uint8)
    one_half = np.float32(1.5)
    half = np.float32(0.5)
    for i in range(height):
        for j in range(width):
            bright = grey[i, j] * one_half + half
            snow = np.float64(flakes[i, j]) / 255.0
            mirrored = np.float64(flakes[height - 1 - i, width - 1 - j]) / 255.0
            for c in range(channels):
                v = x[i, j, c]
                washed = blend * v + rest * max(v, bright)
                y = (np.float64(washed) + snow) + mirrored
                y = min(max(y, 0.0), 1.0) * 255.0
                out[i, j, c] = np.uint8(y)
    return out


_KR, _KG, _KB = np.float32(0.299), np.float32(0.587), np.float32(0.114)


@njit(cache=True, nogil=True)
def _grey(x, out):
    """The reference's ``cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)`` of HxWx3 float32, as OpenCV
    computes it with IPP on a CPU with FMA: ``fma(b, 0.114, fma(r, 0.299, g * 0.587))`` in
    float32 (other orders differ in the last bit at 14 to 30 % of the pixels). Written out
    because OpenCV's own result depends on the CPU: with IPP's SSE4.2 code, or without
    IPP, 19 % of the values differed, and with them snow's pixels (3 values of one
    reference photo at severity 1)."""
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            out[i, j] = fma32(x[i, j, 2], _KB, fma32(x[i, j, 0], _KR, x[i, j, 1] * _KG))
    return out


@njit(cache=True, nogil=True)
def _threshold_uint8(layer, threshold, out):
    """The reference's ``layer[layer < threshold] = 0`` then ``uint8(clip(layer, 0, 1) *
    255)``, in one pass over the float64 layer (the same comparisons and products)."""
    for i in range(layer.shape[0]):
        for j in range(layer.shape[1]):
            v = layer[i, j]
            if v < threshold:
                v = 0.0
            out[i, j] = np.uint8(min(max(v, 0.0), 1.0) * 255.0)
    return out


def draw(rng, height: int, width: int, loc: float, scale: float) -> tuple[np.ndarray, float]:
    """The reference's draws in its order: the float64 ``normal(loc, scale)`` snow layer
    (``height x width``), then the blur angle in degrees, uniform on [-135, -45)."""
    layer = rng.normal(size=(height, width), loc=loc, scale=scale)
    return layer, float(rng.uniform(-135, -45))


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [
    (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
    (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
    (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
    (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
    (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
]
_64PX = [
    (0.1, 0.2, 1, 0.6, 8, 3, 0.8),
    (0.1, 0.2, 1, 0.5, 10, 4, 0.8),
    (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7),
    (0.25, 0.3, 2.25, 0.6, 12, 6, 0.65),
    (0.3, 0.3, 1.25, 0.65, 14, 12, 0.6),
]
_299PX = [
    (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
    (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
    (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
    (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
    (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "snow",
    monotone=True,
    family="weather",
    params={
        1: (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
        2: (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
        3: (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
        4: (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
        5: (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
    },
    tags=("imagenet-c",),
    presets=PRESETS,
)
def snow(x, params, rng, ctx):
    """Snow flakes (zoomed, thresholded noise, motion-blurred downwards) over a brightened image.

    ``params`` is ``(loc, scale, zoom, threshold, blur radius, blur sigma, blend)``.
    """
    loc, scale, zoom, threshold, radius, sigma, blend = params
    x = np.asarray(x, dtype=np.float32) / 255.0
    height, width = x.shape[:2]
    layer, angle = draw(rng, height, width, loc, scale)
    layer = clipped_zoom(layer[..., np.newaxis], zoom)[..., 0]
    layer8 = _threshold_uint8(layer, threshold, np.empty(layer.shape, np.uint8))
    flakes = motion_blur_uint8(layer8, radius, sigma, angle)
    grey = _grey(x, np.empty((height, width), np.float32))
    return _compose(x, grey, flakes, np.float32(blend), np.float32(1 - blend))
