"""gaussian_noise: additive Gaussian noise (ImageNet-C, noise family).

Reference: ``clip(x / 255 + normal(size, scale=sigma), 0, 1) * 255``, then truncated to
uint8 (the pipeline's last step). Here the noise is drawn with ``standard_normal`` and
scaled by ``sigma`` in the kernel: numpy's ``normal(scale=s)`` is ``0.0 + s * z`` for the
same standard normal ``z`` per value, drawn in the same order (for ``Generator`` and for
``RandomState``), so the values are the reference's bit for bit; the draws are a fifth
cheaper without the per-value call, and the arithmetic, clip and cast run in one pass
instead of five temporary float64 arrays.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from robustlab.shifts.registry import register_shift


def draw(rng, size: int) -> np.ndarray:
    """The reference's only draw, as ``size`` standard normals (float64, the HxWx3 array
    in C order): the reference's ``normal(scale=sigma)`` values are ``sigma`` times these.

    The batched version replays it (:mod:`robustlab.shifts.batched.noise`).
    """
    return rng.standard_normal(size)


@njit(cache=True, nogil=True)
def _add_noise(x, z, sigma, out):
    """``uint8(clip(x / 255 + sigma * z, 0, 1) * 255)`` per value, in double precision."""
    for i in range(x.shape[0]):
        v = x[i] / 255.0 + sigma * z[i]
        v = min(max(v, 0.0), 1.0) * 255.0
        out[i] = np.uint8(v)
    return out


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.04, 0.06, 0.08, 0.09, 0.1]
_64PX = [0.04, 0.08, 0.12, 0.15, 0.18]
_299PX = [0.09, 0.13, 0.19, 0.27, 0.4]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "gaussian_noise",
    monotone=True,
    family="noise",
    params={1: 0.08, 2: 0.12, 3: 0.18, 4: 0.26, 5: 0.38},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def gaussian_noise(x, sigma, rng, ctx):
    """Additive Gaussian noise with standard deviation ``sigma`` on [0, 1] intensities."""
    x = np.asarray(x)
    if x.dtype != np.uint8:  # the kernel takes the pipeline's uint8; anything else as written
        return np.clip(x / 255.0 + sigma * draw(rng, x.shape), 0, 1) * 255
    x = np.ascontiguousarray(x)
    z = draw(rng, x.size)
    out = np.empty(x.size, np.uint8)
    return _add_noise(x.reshape(-1), z, float(sigma), out).reshape(x.shape)
