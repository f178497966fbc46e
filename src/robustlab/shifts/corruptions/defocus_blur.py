"""defocus_blur: convolution with an anti-aliased disk (ImageNet-C, blur family).

Reference: the kernel is a float32 disk (``X**2 + Y**2 <= r**2`` on a grid of
``-8..8`` for ``r <= 8``, else ``-r..r``) divided by its sum, then smoothed by
``cv2.GaussianBlur`` (3x3 if ``r <= 8`` else 5x5, sigma = alias blur); each channel of
``img / 255.`` (float64) is filtered with ``cv2.filter2D`` (reflect-101 border); output
``clip(., 0, 1) * 255``, truncated to uint8.

Exactness:

* The kernel is built here, not with ``cv2.GaussianBlur``: the OpenCV the reference ran
  (3.4, ``opencv-python~=3.4``) and current OpenCV round the 5x5 smoothing differently
  in the last float32 bit. :func:`_smooth_kernel` repeats 3.4's arithmetic (its float32
  Gaussian taps, reflect-101 border, and the operation order of its row and column
  passes, which fuse multiply-adds): the five reference kernels come out bit-identical
  (checked against OpenCV 3.4.18). A fused multiply-add is emulated in double precision
  (exact product, one rounding of the sum, then rounding to float32); that double
  rounding could in principle differ from a true FMA, a chance of about 1e-9 per tap.
* The filtering is ``cv2.filter2D`` itself, on all three channels in one call (the
  same result as three single-channel calls). OpenCV filters these kernel sizes through
  its DFT; current OpenCV reproduces 3.4 exactly for the 17x17 kernel (severities 1-4)
  and to within 4e-16 for the 21x21 one (severity 5), which changes a truncated output
  value only when a result lands that close to a multiple of 1/255 (none of the
  reference fixtures do).

A quirk kept from the reference: for r >= 8 the disk touches the edge of its grid and the
reflect-101 border of the smoothing adds mass, so the kernel sums to 1.011 (r = 8) and
1.013 (r = 10) and severities 4-5 also brighten slightly.

Deterministic: no random draws. Any size works as is (the kernel does not depend on it).
"""

from __future__ import annotations

import functools

import cv2
import numpy as np
from numba import njit

from robustlab.shifts.corruptions._scratch import lookup
from robustlab.shifts.registry import register_shift

_SCALE = np.arange(256) / 255.0
_F32 = np.float32


def _gaussian_taps(n: int, sigma: float) -> np.ndarray:
    """OpenCV 3.4 ``getGaussianKernel(n, sigma, CV_32F)``: float32 taps, sum in double."""
    x = np.arange(n) - (n - 1) * 0.5
    taps = np.exp(-0.5 / (sigma * sigma) * x * x).astype(_F32)
    total = 0.0
    for t in taps:  # sequential double sum of the float32 taps
        total += float(t)
    return (taps.astype(np.float64) * (1.0 / total)).astype(_F32)


def _fma(a, b, c):
    """float32 ``a*b + c`` with one rounding of the sum (the product is exact in double)."""
    return (a.astype(np.float64) * np.float64(b) + c.astype(np.float64)).astype(_F32)


def _pass(m: np.ndarray, taps: np.ndarray, first_product_rounded: bool) -> np.ndarray:
    """One symmetric pass along axis 1 with reflect-101 border, in float32.

    OpenCV 3.4's row pass rounds ``(x[-1] + x[1]) * k1`` first and fuses the centre
    product into it; its column pass rounds ``x[0] * k0`` first and fuses each pair
    product into the running sum. Pairs are added from the centre outwards.
    """
    r = len(taps) // 2
    p = np.pad(m, ((0, 0), (r, r)), mode="reflect")  # numpy 'reflect' = OpenCV reflect-101
    w = m.shape[1]

    def at(o):
        return p[:, r + o : r + o + w]

    pairs = [((at(-j) + at(j)).astype(_F32), taps[r + j]) for j in range(1, r + 1)]
    if first_product_rounded:
        (pair, k), rest = pairs[0], pairs[1:]
        s = _fma(at(0), taps[r], (pair * k).astype(_F32))
    else:
        s, rest = (at(0) * taps[r]).astype(_F32), pairs
    for pair, k in rest:
        s = _fma(pair, k, s)
    return s


@functools.lru_cache(maxsize=16)
def disk_kernel(radius: int, alias_blur: float) -> np.ndarray:
    """The reference's anti-aliased disk kernel (float32), as OpenCV 3.4 smooths it."""
    grid = np.arange(-8, 9) if radius <= 8 else np.arange(-radius, radius + 1)
    n = 3 if radius <= 8 else 5
    xx, yy = np.meshgrid(grid, grid)
    disk = np.array((xx**2 + yy**2) <= radius**2, dtype=_F32)
    disk /= np.sum(disk)
    taps = _gaussian_taps(n, alias_blur)
    rows = _pass(disk, taps, True)
    kernel = _pass(np.ascontiguousarray(rows.T), taps, False).T
    kernel = np.ascontiguousarray(kernel)
    kernel.setflags(write=False)
    return kernel


@njit(cache=True, nogil=True)
def _to_uint8(v, out):
    """``uint8(clip(v, 0, 1) * 255)`` elementwise (float64 in)."""
    for i in range(v.shape[0]):
        out[i] = np.uint8(min(max(v[i], 0.0), 1.0) * 255)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)]
_64PX = [(0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)]
_299PX = [(4, 0.1), (5, 0.5), (7, 0.5), (10, 0.5), (12, 0.5)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "defocus_blur",
    monotone=True,
    family="blur",
    # (disk radius, alias blur sigma)
    params={1: (3, 0.1), 2: (4, 0.5), 3: (6, 0.5), 4: (8, 0.5), 5: (10, 0.5)},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def defocus_blur(x, params, rng, ctx):
    """Defocus: convolve each channel with an anti-aliased disk of the given radius."""
    radius, alias = params
    x = lookup(np.asarray(x), _SCALE)
    blurred = cv2.filter2D(x, -1, disk_kernel(radius, alias))
    out = np.empty(x.shape, np.uint8)
    _to_uint8(blurred.ravel(), out.ravel())
    return out
