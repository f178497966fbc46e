"""Batched noise corruptions: gaussian, shot, impulse and speckle noise.

Same distributions and parameters as the exact versions; the draws come from torch
generators, so single pixels differ from the numpy path while every statistic agrees.
"""

from __future__ import annotations

import torch

from robustlab.shifts.batched._ops import normal, to_uint8, uniform, unit
from robustlab.shifts.batched._registry import batched


@batched("gaussian_noise")
def gaussian_noise(x, sigma, gens):
    """``x / 255 + N(0, sigma)``, clipped."""
    return to_uint8(unit(x) + normal(gens, x.shape[1:], x.device, std=sigma))


@batched("shot_noise")
def shot_noise(x, photons, gens):
    """``Poisson(x / 255 * c) / c``, clipped: ``torch.poisson`` per image."""
    rate = unit(x) * float(photons)
    counts = torch.stack([torch.poisson(r, generator=g) for r, g in zip(rate, gens)])
    return to_uint8(counts / float(photons))


@batched("impulse_noise")
def impulse_noise(x, amount, gens):
    """Salt and pepper: one uniform per value, 0 below ``amount / 2``, 255 below ``amount``."""
    u = uniform(gens, x.shape[1:], x.device, 0.0, 1.0)
    out = x.clone()
    out[u < amount] = 255
    out[u < amount / 2] = 0
    return out


@batched("speckle_noise")
def speckle_noise(x, sigma, gens):
    """``x + x * N(0, sigma)`` on ``x / 255``, clipped."""
    v = unit(x)
    return to_uint8(v + v * normal(gens, x.shape[1:], x.device, std=sigma))
