"""gaussian_noise: additive Gaussian noise (ImageNet-C, noise family)."""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift


def draw(rng, shape, sigma: float) -> np.ndarray:
    """The reference's only draw: ``normal(0, sigma)`` over the HxWx3 array (float64).

    The batched version replays it (:mod:`robustlab.shifts.batched.noise`).
    """
    return rng.normal(size=shape, scale=sigma)


@register_shift(
    "gaussian_noise",
    family="noise",
    params={1: 0.08, 2: 0.12, 3: 0.18, 4: 0.26, 5: 0.38},
    tags=("imagenet-c",),
)
def gaussian_noise(x, sigma, rng, ctx):
    """Additive Gaussian noise with standard deviation ``sigma`` on [0, 1] intensities."""
    x = np.asarray(x) / 255.0
    return np.clip(x + draw(rng, x.shape, sigma), 0, 1) * 255
