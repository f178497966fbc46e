"""Batched noise corruptions: gaussian, shot, impulse and speckle noise.

Each is a draw per value (from the image's torch generator) and a deterministic apply
that repeats the exact version's float64 arithmetic, so fed the exact path's own draws
(``apply_matched``) it gives the exact pixels, and its torch draws follow the same
distributions:

* gaussian_noise, speckle_noise: ``normal(0, sigma)`` per value. The torch draws are
  float32 standard normals times ``sigma`` in float64: numpy's distribution to float32
  precision (samplers built on float32 uniforms may cut the tail beyond about 5.8
  standard deviations, 1e-8 of the values).
* impulse_noise: one uniform per value; pepper below ``amount / 2``, salt below ``amount``.
* shot_noise: one uniform per value turned into a Poisson count by the exact path's
  inverse CDF (its table, searched for every value at once), not ``torch.poisson``: an
  exact Poisson sample either way, but this one is the exact path's, so the replay can
  check it (and it is about twice as fast on the CPU).

The exact path's draws are over the HxWx3 array in C order; the replays return them as
(1, 3, H, W).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from robustlab.shifts.batched._ops import per_sample, to_uint8, uniform, unit
from robustlab.shifts.registry import register_batched


def _chw(values: np.ndarray, shape) -> torch.Tensor:
    """The exact path's per-value draws (HxWx3 in C order) as a (1, 3, H, W) tensor."""
    hwc = torch.from_numpy(np.ascontiguousarray(values).reshape(shape))
    return hwc.permute(2, 0, 1)[None].contiguous()


def _normal_draw(x, sigma, gens) -> dict[str, torch.Tensor]:
    # float32 standard normals (torch's float64 ones cost ~5x more on the CPU), scaled in
    # float64 as numpy scales its own
    z = per_sample(gens, lambda g: torch.randn(x.shape[1:], generator=g, device=x.device))
    return {"noise": z.to(torch.float64) * sigma}


def _uniform_draw(x, params, gens) -> dict[str, torch.Tensor]:
    return {"u": uniform(gens, x.shape[1:], x.device, 0.0, 1.0, dtype=torch.float64)}


def _gaussian_replay(img, sigma, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.gaussian_noise import draw

    return {"noise": _chw(sigma * draw(rng, img.size), img.shape)}


@register_batched("gaussian_noise", draw=_normal_draw, replay=_gaussian_replay)
def gaussian_noise(x, sigma, draws):
    """``x / 255 + N(0, sigma)``, clipped."""
    return to_uint8(unit(x, torch.float64) + draws["noise"])


@functools.lru_cache(maxsize=16)
def _shot_tables(photons: int, device: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The exact path's CDF table with each row padded with +inf to a power-of-two width
    above ``photons`` (flat), its output value per count, and that width."""
    from robustlab.shifts.corruptions.shot_noise import tables

    cdf, values = tables(photons)
    if not (np.diff(cdf, axis=1) >= 0).all():  # the search below relies on it
        raise RuntimeError(f"shot_noise's CDF table for c={photons} is not monotone")
    width = 1 << photons.bit_length()
    padded = np.full((cdf.shape[0], width), np.inf)
    padded[:, :photons] = cdf
    return (
        torch.as_tensor(padded.reshape(-1), device=device),
        torch.tensor(values, device=device),  # a copy: the table is read-only
        width,
    )


def _shot_replay(img, photons, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.shot_noise import draw

    return {"u": _chw(draw(rng, img.size), img.shape)}


@register_batched("shot_noise", draw=_uniform_draw, replay=_shot_replay)
def shot_noise(x, photons, draws):
    """``Poisson(x / 255 * c) / c``, clipped: the count is the smallest ``k < c`` with
    ``P(K <= k) > u`` (else ``c``), found in the exact path's table.

    The rows of the table do not decrease, so that count is the number of entries
    ``<= u``: a branch-free binary search (one halving step per bit of the padded
    width) finds it for every value at once, as the exact path's search does one by one.
    """
    table, values, width = _shot_tables(int(photons), str(x.device))
    u = draws["u"]
    row = x.to(torch.int64) * width
    pos = row.clone()
    step = width // 2
    while step:
        pos += (torch.take(table, pos + (step - 1)) <= u) * step
        step //= 2
    return torch.take(values, pos - row)


def _impulse_replay(img, amount, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.impulse_noise import draw

    return {"u": _chw(draw(rng, img.size), img.shape)}


@register_batched("impulse_noise", draw=_uniform_draw, replay=_impulse_replay)
def impulse_noise(x, amount, draws):
    """Salt and pepper: 0 where ``u < amount / 2``, 255 where ``u < amount``."""
    u = draws["u"]
    return x.masked_fill(u < amount, 255).masked_fill(u < amount / 2, 0)


def _speckle_replay(img, sigma, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.speckle_noise import draw

    return {"noise": _chw(draw(rng, img.shape, sigma), img.shape)}


@register_batched("speckle_noise", draw=_normal_draw, replay=_speckle_replay)
def speckle_noise(x, sigma, draws):
    """``x + x * N(0, sigma)`` on ``x / 255``, clipped."""
    v = unit(x, torch.float64)
    return to_uint8(v + v * draws["noise"])
