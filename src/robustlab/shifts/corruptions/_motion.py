"""ImageMagick-compatible motion blur, used by motion_blur and snow.

The ImageNet-C reference blurs through Wand with ImageMagick 6's ``MotionBlurImage``
(``radius``, ``sigma``, ``angle``) on an 8-bit PNG and decodes the 8-bit PNG it writes back.
What ImageMagick (6.9, Q16, non-HDRI: the build that reproduces the reference data) does,
re-implemented from its documented behaviour and source:

* Kernel width: ``2 * ceil(radius) + 1`` taps when ``radius`` > 0; otherwise the smallest
  odd width whose outermost normalised Gaussian weight drops below one quantum step
  (``GetOptimalKernelWidth1D``).
* Weights: a *one-sided* Gaussian, ``w_i = exp(-i^2 / (2 sigma^2)) / (sqrt(2 pi) sigma)`` for
  tap ``i = 0 .. width-1``, divided by their sum. Tap 0 is the pixel itself, so the blur
  trails away from the pixel in one direction only.
* Tap offsets: the unit direction ``(cos a, sin a)`` (``a`` in degrees, ``x`` to the right,
  ``y`` down) times ``i``, each coordinate rounded with ``ceil(v - 0.5)`` (halves round
  down), computed as ImageMagick does, ``i * width * cos(a) / hypot(...)``.
* Edges: the default virtual-pixel method 'edge' clamps each coordinate into the image,
  i.e. replicate padding.
* Arithmetic: 8-bit samples are read as 16-bit quanta (``v * 257``); each output sample is
  the double-precision sum ``((0 + w_0 p_0) + w_1 p_1) + ...`` in tap order, rounded to a
  quantum (``floor(s + 0.5)``, clamped to [0, 65535]).
* Back to 8 bits: the PNG writer first reduces the image to its 8-bit depth with
  ``SetImageDepth``, whose ``ScaleQuantumToAny`` *truncates* (``floor(255 q / 65535)``, i.e.
  ``q // 257``); after that the 8-bit export is exact. Rounding here instead would differ
  from the reference in about half of all bytes.

:func:`motion_blur_uint8` follows those operations in the same order with the same doubles
(numba without fast-math: no reassociation, no fused multiply-add, and the x86-64 baseline
ImageMagick is compiled for has none either), so its bytes equal Wand's for this build.
Sines, cosines and exponentials come from the C library through :mod:`math`, as in
ImageMagick.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

# ImageMagick's constants (magick/image-private.h); the same doubles as math.sqrt(2*pi), pi.
_SQ2PI = 2.50662827463100024161235523934010416269302368164062
_EPSILON = 1.0e-12  # MagickEpsilon in 6.9.x
_QUANTUM_SCALE = 1.0 / 65535.0


def optimal_kernel_width(radius: float, sigma: float) -> int:
    """Number of taps ImageMagick's ``GetOptimalKernelWidth1D`` picks for ``radius``, ``sigma``.

    Used for the motion-blur kernel length, so the blur reaches exactly as far as in the
    reference.
    """
    if radius > _EPSILON:
        return int(2.0 * math.ceil(radius) + 1.0)
    gamma = abs(sigma)
    if gamma <= _EPSILON:
        return 3
    alpha = 1.0 / (2.0 * gamma * gamma)
    beta = 1.0 / (_SQ2PI * gamma)
    width = 5
    while True:
        j = (width - 1) // 2
        normalize = 0.0
        for i in range(-j, j + 1):
            normalize += math.exp(-float(i * i) * alpha) * beta
        value = math.exp(-float(j * j) * alpha) * beta / normalize
        if value < _QUANTUM_SCALE or value < _EPSILON:
            break
        width += 2
    return width - 2


@functools.lru_cache(maxsize=64)
def _weights(radius: float, sigma: float) -> np.ndarray:
    """The normalised one-sided Gaussian taps for ``radius``, ``sigma`` (read-only).

    Cached: they do not depend on the angle, and building them in Python (up to 29 taps
    of ``math.exp``) was a third of a 32x32 motion blur.
    """
    width = optimal_kernel_width(radius, sigma)
    s = sigma if abs(sigma) >= _EPSILON else _EPSILON
    weights = np.empty(width, np.float64)
    normalize = 0.0
    for i in range(width):
        weights[i] = math.exp(-(float(i) * i) / (2.0 * s * s)) / (_SQ2PI * s)
        normalize += weights[i]
    weights /= normalize
    weights.setflags(write=False)
    return weights


@njit(cache=True, nogil=True)
def _offsets(width, px, py, norm):
    """``(ceil(i * py / norm - 0.5), ceil(i * px / norm - 0.5))`` for each tap ``i``: the
    same double operations as the Python expressions (no fused multiply-add), one call
    instead of two list comprehensions. Also returns the edge padding the taps need,
    ``(top, bottom, left, right)``, which took four numpy reductions (a tenth of a 32x32
    motion blur)."""
    dx = np.empty(width, np.int64)
    dy = np.empty(width, np.int64)
    for i in range(width):
        dx[i] = np.int64(math.ceil(np.float64(i) * py / norm - 0.5))
        dy[i] = np.int64(math.ceil(np.float64(i) * px / norm - 0.5))
    pads = (max(0, -dy.min()), max(0, dy.max()), max(0, -dx.min()), max(0, dx.max()))
    return dx, dy, pads


def _kernel(radius: float, sigma: float, angle: float):
    """:func:`motion_kernel` plus the padding ``(top, bottom, left, right)`` of its taps."""
    weights = _weights(float(radius), float(sigma))
    width = len(weights)
    rad = math.pi * angle / 180.0
    px = width * math.sin(rad)
    py = width * math.cos(rad)
    norm = math.hypot(px, py)
    dx, dy, pads = _offsets(width, px, py, norm)
    return weights, dx, dy, pads


def motion_kernel(radius: float, sigma: float, angle: float):
    """ImageMagick's motion-blur taps: ``(weights, dx, dy)``, one entry per tap.

    Args:
        radius: Blur radius in pixels (``width = 2 * ceil(radius) + 1`` taps).
        sigma: Standard deviation of the one-sided Gaussian, in taps.
        angle: Direction in degrees; 0 points along +x (right), 90 along +y (down).

    Returns:
        ``weights`` (float64, sums to 1, tap 0 first; read-only, shared between calls),
        ``dx`` and ``dy`` (int64 pixel offsets of each tap from the output pixel).
    """
    weights, dx, dy, _ = _kernel(radius, sigma, angle)
    return weights, dx, dy


@njit(cache=True, nogil=True)
def _blur_rows(padded, weights, dx, dy, top, left, height, width, out):
    """Sum the taps in ImageMagick's order, quantise to Q16, truncate to 8 bits.

    ``padded`` is the edge-replicated uint8 image, shape (rows, cols * C); each value
    enters the sum as its 16-bit quantum ``v * 257.0`` (exact in double), converted on
    the fly rather than stored as a float64 copy of the image eight times its size;
    ``out`` is (height, width * C) uint8.
    """
    channels = out.shape[1] // width
    n = width * channels
    acc = np.empty(n, np.float64)
    for y in range(height):
        for j in range(n):
            acc[j] = 0.0
        for t in range(weights.shape[0]):
            wt = weights[t]
            start = (left + dx[t]) * channels
            row = padded[top + y + dy[t], start : start + n]
            for j in range(n):
                acc[j] += wt * (np.float64(row[j]) * 257.0)
        o = out[y]
        for j in range(n):
            # clamp to [0, 65535], round half up, keep the top 8 bits: written without
            # branches (a sum <= 0 gives int(0.5) = 0, one >= 65535 gives 65535), so
            # the loop vectorises
            q = np.uint32(min(max(acc[j], 0.0), 65535.0) + 0.5)
            o[j] = q // np.uint32(257)


@njit(cache=True, nogil=True)
def _pad_edge(src, top, left, out):
    """``np.pad(src, ..., mode="edge")`` into ``out``: each coordinate clamped into the
    image (ImageMagick's 'edge' virtual pixels). numpy's pad costs about 60 us of Python
    per call, as much as the whole blur of a 32x32 image."""
    h, w, c = src.shape
    for i in range(out.shape[0]):
        si = min(max(i - top, 0), h - 1)
        for j in range(out.shape[1]):
            sj = min(max(j - left, 0), w - 1)
            for k in range(c):
                out[i, j, k] = src[si, sj, k]


def motion_blur_uint8(img: np.ndarray, radius: float, sigma: float, angle: float) -> np.ndarray:
    """Motion-blur a uint8 HxW or HxWxC image the way ImageMagick's ``MotionBlurImage`` does.

    Args:
        img: uint8 array, HxW or HxWxC (channels are blurred independently).
        radius: Blur radius (kernel of ``2 * ceil(radius) + 1`` taps).
        sigma: Gaussian standard deviation along the blur, in pixels.
        angle: Blur direction in degrees (0: the trail extends to the right of each pixel).

    Returns:
        uint8 array of the input's shape.
    """
    img = np.asarray(img)
    if img.dtype != np.uint8 or img.ndim not in (2, 3):
        raise ValueError(
            f"motion_blur_uint8 needs a uint8 HxW or HxWxC array, got {img.dtype} {img.shape}"
        )
    weights, dx, dy, (top, bottom, left, right) = _kernel(radius, sigma, angle)
    src = img if img.ndim == 3 else img[:, :, None]
    height, width, channels = src.shape
    padded = np.empty((height + top + bottom, width + left + right, channels), np.uint8)
    _pad_edge(np.ascontiguousarray(src), top, left, padded)
    out = np.empty((height, width * channels), np.uint8)
    _blur_rows(padded.reshape(padded.shape[0], -1), weights, dx, dy, top, left, height, width, out)
    return out.reshape(img.shape)
