"""contrast: pull every channel towards its image mean (ImageNet-C, digital family).

Reference: ``x = img / 255.``; ``m = np.mean(x, axis=(0, 1))``; output
``clip((x - m) * c + m, 0, 1) * 255``, truncated to uint8.

Two observations make this cheap and still bit-exact:

* numpy reduces the (H, W, 3) float64 array over axes (0, 1) with the channel axis as
  its inner loop, i.e. a plain left-to-right running sum per channel in row-major pixel
  order, divided by H*W. The numba loop below adds the same doubles in the same order
  (no fast-math), so the means are the same to the last bit. (A last-bit difference can
  flip a truncated output value, which is why an exact integer mean is not used.)
* each output value depends only on the input value of its channel, so a 3x256 table
  computed with the reference's float64 expression replaces the full-size arithmetic.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from robustlab.shifts.registry import register_shift

_LEVELS = np.arange(256, dtype=np.float64) / 255.0


@njit(cache=True, nogil=True)
def _channel_means(flat, levels):
    """Per-channel mean of ``img / 255.`` summed in numpy's order for axis=(0, 1).

    ``flat`` is the HxWx3 image raveled; ``levels[v]`` is ``v / 255.`` (the same double
    as the division, looked up instead of recomputed).
    """
    n = flat.shape[0] // 3
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    for p in range(n):
        s0 += levels[flat[3 * p]]
        s1 += levels[flat[3 * p + 1]]
        s2 += levels[flat[3 * p + 2]]
    return np.array([s0, s1, s2]) / n


@njit(cache=True, nogil=True)
def _contrast(flat, levels, factor, out):
    """The whole corruption in one call: the means, the per-channel tables of
    ``uint8(clip((v / 255. - m) * factor + m, 0, 1) * 255)`` (the reference's double
    operations, in its order), and the lookup. One call instead of numpy's half-dozen
    on 3x256 tables, which cost more than the image itself at 32x32."""
    means = _channel_means(flat, levels)
    lut = np.empty((3, 256), np.uint8)
    for c in range(3):
        m = means[c]
        for v in range(256):
            t = (levels[v] - m) * factor + m
            lut[c, v] = np.uint8(min(max(t, 0.0), 1.0) * 255.0)
    return _apply_tables(flat, lut, out)


@njit(cache=True, nogil=True)
def _apply_tables(flat, lut, out):
    """``out[p, k] = lut[k, flat[p, k]]`` over the raveled HxWx3 image."""
    l0, l1, l2 = lut[0], lut[1], lut[2]
    for p in range(flat.shape[0] // 3):
        out[3 * p] = l0[flat[3 * p]]
        out[3 * p + 1] = l1[flat[3 * p + 1]]
        out[3 * p + 2] = l2[flat[3 * p + 2]]
    return out


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.75, 0.5, 0.4, 0.3, 0.15]
_64PX = [0.4, 0.3, 0.2, 0.1, 0.05]
_299PX = [0.4, 0.3, 0.2, 0.1, 0.05]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "contrast",
    monotone=True,
    family="digital",
    params={1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1, 5: 0.05},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def contrast(x, factor, rng, ctx):
    """Contrast scaled by ``factor`` around the per-channel mean intensity."""
    x = np.ascontiguousarray(x, dtype=np.uint8)
    flat = x.reshape(-1)
    return _contrast(flat, _LEVELS, float(factor), np.empty_like(flat)).reshape(x.shape)
