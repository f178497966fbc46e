"""glass_blur: frosted-glass blur (ImageNet-C, blur family).

The reference blurs with ``skimage.filters.gaussian`` (here
:func:`_gauss.gaussian_nearest_uint8`, bit-identical to it, straight from and to uint8),
truncates to uint8, then walks the image from the bottom-right corner inward, row-major, "swapping" each pixel with a neighbour at a random offset in
``[-delta, delta)`` (``randint``'s upper bound is exclusive, so the shuffle drifts up-left),
``iterations`` times, and blurs again.

The reference's swap is the tuple assignment ``x[h, w], x[h', w'] = x[h', w'], x[h, w]`` on
numpy rows: the right-hand side holds *views*, so after the first assignment the second
copies the already-overwritten pixel back onto itself. The net effect is a copy,
``x[h, w] = x[h', w']``, not a swap. The published ImageNet-C images were made that way, so
this module copies too (a true swap would change about 3/4 of the output bytes at severity 1).

Why numba: the swaps are sequential and chained (a pixel moved by one swap can be moved
again by a later one), so they cannot be vectorised; the reference's Python loop with one
``randint`` call per pixel takes about 0.46 s. Here all offsets of one pass come from a
single ``randint(-delta, delta, size=(n, 2))`` call. For a ``RandomState`` that consumes the
stream exactly like ``n`` calls of size 2 (bounded int64 draws in a 32-bit range take one
32-bit word each, with no buffering carried between calls), so legacy mode is bit-exact.
The reference's 224 in the loop bounds becomes the image's own height and width.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from robustlab.seeding import randint
from robustlab.shifts.corruptions._gauss import gaussian_nearest, gaussian_nearest_uint8
from robustlab.shifts.registry import register_shift


@njit(cache=True, nogil=True)
def _shuffle_pass(img, offsets, delta):
    """One pass of the reference's chained "swaps" (copies, see above), in place.

    ``img`` is HxWxC uint8. Each visited pixel takes the value its offset points at, which
    may itself have been overwritten earlier in the pass.
    ``offsets[k] = (dx, dy)`` belongs to the k-th visited pixel; pixels are visited for
    ``h`` from ``H - delta`` down to ``delta + 1``, and within a row ``w`` from
    ``W - delta`` down to ``delta + 1``, as in the reference.
    """
    height, width, channels = img.shape
    k = 0
    for h in range(height - delta, delta, -1):
        for w in range(width - delta, delta, -1):
            dx = offsets[k, 0]
            dy = offsets[k, 1]
            k += 1
            # unsigned (all in range): no wrap-around test of signed indices per access
            src = img[np.uint64(h + dy), np.uint64(w + dx)]
            dst = img[np.uint64(h), np.uint64(w)]
            for c in range(channels):
                dst[c] = src[c]


def _pass_offsets(rng, n: int, delta: int) -> np.ndarray:
    """One pass's draws: ``(n, 2)`` int64 offsets ``(dx, dy)`` in [-delta, delta)."""
    return randint(rng, -delta, delta, size=(n, 2))


def _visited(height: int, width: int, delta: int) -> int:
    """The number of pixels one pass visits."""
    return max(height - 2 * delta, 0) * max(width - 2 * delta, 0)


def draw(rng, height: int, width: int, delta: int, iterations: int) -> np.ndarray:
    """The reference's draws: ``(iterations, n, 2)`` int64 offsets ``(dx, dy)`` in [-delta, delta).

    ``n`` is the number of pixels one pass visits, in :func:`_shuffle_pass`'s order. Drawing
    every pass up front consumes the stream as the reference's per-pass draws do (nothing
    else is drawn in between). The batched version replays this; the shift itself draws
    pass by pass (:func:`_pass_offsets`, the same calls) to skip the stacked copy.
    """
    n = _visited(height, width, delta)
    out = np.empty((iterations, n, 2), np.int64)
    for i in range(iterations):
        out[i] = _pass_offsets(rng, n, delta)
    return out


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)]
_64PX = [(0.1, 1, 1), (0.5, 1, 1), (0.6, 1, 2), (0.7, 2, 1), (0.9, 2, 2)]
_299PX = [(0.8, 1, 3), (1, 3, 1), (1.1, 2, 4), (1.2, 4, 2), (1.6, 5, 2)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "glass_blur",
    family="blur",
    params={1: (0.7, 1, 2), 2: (0.9, 2, 1), 3: (1, 2, 3), 4: (1.1, 3, 2), 5: (1.5, 4, 2)},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def glass_blur(x, params, rng, ctx):
    """Gaussian blur, ``iterations`` passes of local random pixel shuffling, Gaussian blur again.

    ``params`` is ``(sigma, delta, iterations)``: blur standard deviation in pixels, the
    largest swap distance, and the number of shuffle passes.
    """
    sigma, delta, iterations = params
    x = np.asarray(x)
    height, width = x.shape[:2]
    # np.uint8(gaussian(x / 255.) * 255): truncation, as in the reference
    if x.dtype == np.uint8:
        img = gaussian_nearest_uint8(x, sigma, clip=False)
    else:  # the fused blur takes the pipeline's uint8; anything else as written
        img = (gaussian_nearest(x / 255.0, sigma) * 255).astype(np.uint8)
    n = _visited(height, width, delta)
    for _ in range(iterations):
        _shuffle_pass(img, _pass_offsets(rng, n, delta), delta)
    return gaussian_nearest_uint8(img, sigma, clip=True)
