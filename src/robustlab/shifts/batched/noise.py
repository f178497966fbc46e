"""Batched noise corruptions: gaussian, shot, impulse and speckle noise.

Each is a draw per value (from the image's torch generator) and a deterministic apply
that repeats the exact version's float64 arithmetic, so fed the exact path's own draws
(``apply_matched``) it gives the exact pixels, and its torch draws follow the same
distributions (float64, like numpy's):

* gaussian_noise, speckle_noise: ``normal(0, sigma)`` per value.
* impulse_noise: one uniform per value; pepper below ``amount / 2``, salt below ``amount``.
* shot_noise: one uniform per value turned into a Poisson count by the exact path's
  inverse CDF (its tables and its binary search, run for every value at once), not
  ``torch.poisson``: an exact Poisson sample either way, but this one is the exact
  path's, so the replay can check it.

The exact path's draws are over the HxWx3 array in C order; the replays return them as
(1, 3, H, W).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from robustlab.shifts.batched._ops import normal, to_uint8, uniform, unit
from robustlab.shifts.batched._registry import random_batched


def _chw(values: np.ndarray, shape) -> torch.Tensor:
    """The exact path's per-value draws (HxWx3 in C order) as a (1, 3, H, W) tensor."""
    hwc = torch.from_numpy(np.ascontiguousarray(values).reshape(shape))
    return hwc.permute(2, 0, 1)[None].contiguous()


def _normal_draw(x, sigma, gens) -> dict[str, torch.Tensor]:
    return {"noise": normal(gens, x.shape[1:], x.device, std=sigma, dtype=torch.float64)}


def _uniform_draw(x, params, gens) -> dict[str, torch.Tensor]:
    return {"u": uniform(gens, x.shape[1:], x.device, 0.0, 1.0, dtype=torch.float64)}


def _gaussian_replay(img, sigma, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.gaussian_noise import draw

    return {"noise": _chw(draw(rng, img.shape, sigma), img.shape)}


@random_batched("gaussian_noise", draw=_normal_draw, replay=_gaussian_replay)
def gaussian_noise(x, sigma, draws):
    """``x / 255 + N(0, sigma)``, clipped."""
    return to_uint8(unit(x, torch.float64) + draws["noise"])


@functools.lru_cache(maxsize=16)
def _shot_tables(photons: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact path's CDF table, flat with one column of +inf appended to each row
    (so a finished binary search stays put), and its output value per count."""
    from robustlab.shifts.corruptions.shot_noise import tables

    cdf, values = tables(photons)
    padded = np.concatenate([cdf, np.full((cdf.shape[0], 1), np.inf)], axis=1)
    return (
        torch.as_tensor(padded.reshape(-1), device=device),
        torch.tensor(values, device=device),  # a copy: the table is read-only
    )


def _shot_replay(img, photons, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.shot_noise import draw

    return {"u": _chw(draw(rng, img.size), img.shape)}


@random_batched("shot_noise", draw=_uniform_draw, replay=_shot_replay)
def shot_noise(x, photons, draws):
    """``Poisson(x / 255 * c) / c``, clipped: the count is the smallest ``k < c`` with
    ``P(K <= k) > u`` (else ``c``), by the exact path's binary search on its table."""
    n_k = int(photons)
    table, values = _shot_tables(n_k, str(x.device))
    u = draws["u"]
    row = x.to(torch.int32) * (n_k + 1)
    lo = torch.zeros_like(row)
    hi = torch.full_like(row, n_k)
    # Each step at least halves hi - lo, so bit_length(n_k) steps end every search;
    # an ended one (lo == hi) stays put: table[row + hi] > u always holds there.
    for _ in range(n_k.bit_length()):
        mid = (lo + hi) >> 1
        above = table[row + mid] > u
        hi = torch.where(above, mid, hi)
        lo = torch.where(above, lo, mid + 1)
    return values[lo]


def _impulse_replay(img, amount, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.impulse_noise import draw

    return {"u": _chw(draw(rng, img.size), img.shape)}


@random_batched("impulse_noise", draw=_uniform_draw, replay=_impulse_replay)
def impulse_noise(x, amount, draws):
    """Salt and pepper: 0 where ``u < amount / 2``, 255 where ``u < amount``."""
    u = draws["u"]
    return x.masked_fill(u < amount, 255).masked_fill(u < amount / 2, 0)


def _speckle_replay(img, sigma, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.speckle_noise import draw

    return {"noise": _chw(draw(rng, img.shape, sigma), img.shape)}


@random_batched("speckle_noise", draw=_normal_draw, replay=_speckle_replay)
def speckle_noise(x, sigma, draws):
    """``x + x * N(0, sigma)`` on ``x / 255``, clipped."""
    v = unit(x, torch.float64)
    return to_uint8(v + v * draws["noise"])
