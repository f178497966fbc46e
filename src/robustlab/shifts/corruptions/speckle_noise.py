"""speckle_noise: multiplicative Gaussian noise (ImageNet-C extra/validation corruption).

Reference: ``x + x * N(0, sigma)`` on ``x / 255``, clipped to [0, 1]; one normal draw
over the HxWx3 array, so a ``RandomState`` reproduces it exactly. The arithmetic after
the draw is fused into one numba loop doing the same double operations per value
(``v / 255`` by table lookup), which saves four full-size temporaries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from robustlab.shifts.registry import register_shift


_LEVELS = np.arange(256, dtype=np.float64) / 255.0


@njit(cache=True, nogil=True)
def _speckle(flat, noise, levels, out):
    """``out = uint8(clip(x + x * noise, 0, 1) * 255)`` with ``x = flat / 255``."""
    for i in range(flat.shape[0]):
        x = levels[flat[i]]
        out[i] = np.uint8(min(max(x + x * noise[i], 0.0), 1.0) * 255)
    return out


def draw(rng, shape, sigma: float) -> np.ndarray:
    """The reference's only draw: ``normal(0, sigma)`` over the HxWx3 array (float64).

    The batched version replays it (:mod:`robustlab.shifts.batched.noise`).
    """
    return rng.normal(size=shape, scale=sigma)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.06, 0.1, 0.12, 0.16, 0.2]
_64PX = [0.15, 0.2, 0.25, 0.3, 0.35]
_299PX = [0.16, 0.21, 0.36, 0.46, 0.61]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "speckle_noise",
    monotone=True,
    family="extra",
    params={1: 0.15, 2: 0.2, 3: 0.35, 4: 0.45, 5: 0.6},
    tags=("imagenet-c-extra",),
    presets=PRESETS,
)
def speckle_noise(x, sigma, rng, ctx):
    """Noise proportional to intensity: ``x + x * N(0, sigma)``."""
    x = np.ascontiguousarray(x, dtype=np.uint8)
    noise = draw(rng, x.shape, sigma)
    return _speckle(x.reshape(-1), noise.reshape(-1), _LEVELS, np.empty(x.size, np.uint8)).reshape(
        x.shape
    )
