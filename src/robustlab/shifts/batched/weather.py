"""Batched weather corruptions: snow, frost, fog and brightness.

Deviations from the exact versions:

* snow: the same draws (float64 normal layer, then an angle from [-135, -45)) from torch
  and the same steps with the exact path's rounding: the scipy-order zoom in float64, the
  ImageMagick motion blur's float64 taps, OpenCV's fused float32 grey, the float32 wash
  and the float64 sum. Fed the exact path's draws, the same pixels (the separable zoom,
  a float32 blur sum and a plain grey flipped up to 6e-4 of the bytes at 224 px). The
  grey is OpenCV's with IPP on an x86-64 CPU with FMA; where OpenCV rounds otherwise,
  the exact path itself changes in the last bit of the grey.
* frost: the same five textures (decoded once per process and device, kept on the
  device), the same draws (texture index, crop corner) from torch, and the same float64
  blend: fed the exact path's draws, the same pixels.
* fog: the same diamond-square plasma fractal, built for all images of the batch at
  once with the reference's vectorised steps (``roll`` on strided views), in float64,
  from the same kinds of draws (per level, ``uniform(-wibble, wibble)`` for the square
  centres, row diamonds and column diamonds): fed the exact path's draws, the same pixels.
* brightness: the scikit-image HSV round trip in float64 (:mod:`.color`).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from robustlab.shifts.batched._ops import (
    clipped_zoom_exact,
    motion_blur,
    to_uint8,
    uniform,
    unit,
)
from robustlab.shifts.registry import register_batched
from robustlab.shifts.batched.color import hsv_adjust


@register_batched("brightness")
def brightness(x, shift, gens):
    """HSV value raised by ``shift`` (on [0, 1]) and clipped."""
    return hsv_adjust(x, v_shift=shift)


def _snow_draw(x, params, gens) -> dict[str, torch.Tensor]:
    """Per image, like the reference: the float64 ``normal(loc, scale)`` layer, one value
    per pixel, then the blur angle in degrees, uniform on [-135, -45)."""
    loc, scale = params[:2]
    h, w = x.shape[-2:]
    dev = x.device
    layers, angles = [], []
    for g in gens:
        layers.append(torch.randn((1, h, w), generator=g, device=dev, dtype=torch.float64))
        angles.append(torch.rand((), generator=g, device=dev, dtype=torch.float64))
    return {
        "layer": torch.stack(layers) * scale + loc,
        "angle": torch.stack(angles) * 90.0 - 135.0,
    }


def _snow_replay(img, params, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.snow import draw

    layer, angle = draw(rng, *img.shape[:2], *params[:2])
    return {
        "layer": torch.from_numpy(layer).view(1, 1, *layer.shape),
        "angle": torch.tensor([angle], dtype=torch.float64),
    }


def _grey(v: torch.Tensor) -> torch.Tensor:
    """OpenCV's float32 RGB-to-grey of (N, 3, H, W) float32, as the exact path gets it.

    OpenCV (with IPP, on an x86-64 CPU with FMA) computes ``fma(b, 0.114, fma(r, 0.299,
    g * 0.587))`` in float32: other orders differ in the last bit at 14 % to 30 % of the
    pixels. Here each fused step is a float64 product (exact for float32 factors) and sum
    rounded once to float32, which is the fused result except for a double rounding too
    rare to have been seen.
    """

    def f32(c: float) -> float:
        return float(np.float32(c))

    d = v.to(torch.float64)
    r, g, b = d[:, 0:1], d[:, 1:2], d[:, 2:3]
    acc = (g * f32(0.587)).to(torch.float32).to(torch.float64)
    acc = (r * f32(0.299) + acc).to(torch.float32).to(torch.float64)
    return (b * f32(0.114) + acc).to(torch.float32)


@register_batched("snow", draw=_snow_draw, replay=_snow_replay)
def snow(x, params, draws):
    """Snow flakes (zoomed, thresholded noise, motion-blurred downwards) over a brightened image."""
    _, _, zoom, threshold, radius, sigma, blend = params
    layer = clipped_zoom_exact(draws["layer"], zoom)
    layer = torch.where(layer < threshold, torch.zeros_like(layer), layer)
    layer8 = to_uint8(layer)
    flakes = unit(motion_blur(layer8, radius, sigma, draws["angle"].tolist()), torch.float64)
    v = unit(x)
    washed = blend * v + (1 - blend) * torch.maximum(v, _grey(v) * 1.5 + 0.5)
    out = washed.to(torch.float64) + flakes + torch.flip(flakes, dims=(-2, -1))
    return to_uint8(out)


@functools.lru_cache(maxsize=8)
def _textures(device: str, h: int, w: int) -> tuple[torch.Tensor, ...]:
    """The five drawable frost textures as (3, th, tw) uint8 RGB tensors on ``device``
    (enlarged like the exact path when an ``h x w`` crop would not fit)."""
    from robustlab.shifts.corruptions.frost import N_DRAWN, texture_for

    return tuple(
        torch.from_numpy(texture_for(i, h, w)[..., ::-1].copy())
        .permute(2, 0, 1)
        .contiguous()
        .to(device)
        for i in range(N_DRAWN)
    )


def _frost_draw(x, params, gens) -> dict[str, torch.Tensor]:
    """Per image: texture index, crop top and crop left, each uniform like the reference."""
    from robustlab.shifts.corruptions.frost import N_DRAWN

    h, w = x.shape[-2:]
    textures = _textures(str(x.device), h, w)
    rows = []
    for g in gens:
        idx = int(torch.randint(N_DRAWN, (1,), generator=g, device=x.device))
        tex = textures[idx]
        top = int(torch.randint(0, tex.shape[1] - h, (1,), generator=g, device=x.device))
        left = int(torch.randint(0, tex.shape[2] - w, (1,), generator=g, device=x.device))
        rows.append((idx, top, left))
    return _frost_draws(rows)


def _frost_replay(img, params, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.frost import draw

    return _frost_draws([draw(rng, *img.shape[:2])])


def _frost_draws(rows) -> dict[str, torch.Tensor]:
    t = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
    return {"texture": t[:, 0], "top": t[:, 1], "left": t[:, 2]}


@register_batched("frost", draw=_frost_draw, replay=_frost_replay)
def frost(x, params, draws):
    """The image blended with a crop of one of five frost photographs."""
    a, b = params
    h, w = x.shape[-2:]
    textures = _textures(str(x.device), h, w)
    crops = [
        textures[i][:, top : top + h, left : left + w]
        for i, top, left in zip(
            draws["texture"].tolist(), draws["top"].tolist(), draws["left"].tolist()
        )
    ]
    # float64 like the exact path's lookup tables: float32 flips a truncated value
    out = a * x.to(torch.float64) + b * torch.stack(crops).to(torch.float64)
    return out.clamp(0, 255).to(torch.uint8)


def _fog_levels(size: int, decay: float) -> list[tuple[str, int, float]]:
    """``(draw key, cells per side, wibble)`` of each plasma level, coarsest first."""
    from robustlab.shifts.corruptions.fog import levels

    return [(f"step{step}", size // step, wibble) for step, wibble in levels(size, decay)]


def _fog_split(flat: torch.Tensor, size: int, decay: float) -> dict[str, torch.Tensor]:
    """(N, total) draws in the exact path's order -> one (N, 3, n, n) tensor per level
    (square centres, row diamonds, column diamonds)."""
    spec = _fog_levels(size, decay)
    parts = torch.split(flat, [3 * n * n for _, n, _ in spec], dim=1)
    return {key: part.reshape(-1, 3, n, n) for (key, n, _), part in zip(spec, parts)}


def _fog_draw(x, params, gens) -> dict[str, torch.Tensor]:
    """Per image and plasma level, ``uniform(-wibble, wibble)`` for each new point."""
    from robustlab.shifts.corruptions.fog import map_size

    _, decay = params
    size = map_size(*x.shape[-2:])
    total = sum(3 * n * n for _, n, _ in _fog_levels(size, decay))
    split = _fog_split(uniform(gens, (total,), x.device, 0.0, 1.0, torch.float64), size, decay)
    return {key: split[key] * (2 * wib) - wib for key, _, wib in _fog_levels(size, decay)}


def _fog_replay(img, params, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.fog import draw, map_size

    _, decay = params
    size = map_size(*img.shape[:2])
    u, _ = draw(rng, size, decay)
    return _fog_split(torch.from_numpy(u)[None], size, decay)


def plasma_fractal(draws: dict[str, torch.Tensor], size: int, decay: float) -> torch.Tensor:
    """(N, size, size) diamond-square plasma fractals in [0, 1] from :func:`_fog_draw`'s draws.

    The reference's vectorised steps (``roll`` on strided views) for the whole batch at
    once, in float64 with the reference's order of additions.
    """
    spec = _fog_levels(size, decay)
    first = draws[spec[0][0]]
    m = torch.zeros((first.shape[0], size, size), dtype=torch.float64, device=first.device)
    for key, n, wib in spec:
        step = size // n
        half = step // 2
        u = draws[key]
        corners = m[:, 0::step, 0::step]
        acc = corners + torch.roll(corners, -1, dims=1)
        acc = acc + torch.roll(acc, -1, dims=2)
        m[:, half::step, half::step] = acc / 4 + wib * u[:, 0]
        centres = m[:, half::step, half::step]
        acc = (centres + torch.roll(centres, 1, dims=1)) + (
            corners + torch.roll(corners, -1, dims=2)
        )
        m[:, 0::step, half::step] = acc / 4 + wib * u[:, 1]
        acc = (centres + torch.roll(centres, 1, dims=2)) + (
            corners + torch.roll(corners, -1, dims=1)
        )
        m[:, half::step, 0::step] = acc / 4 + wib * u[:, 2]
    m = m - m.amin(dim=(1, 2), keepdim=True)
    return m / m.amax(dim=(1, 2), keepdim=True)


@register_batched("fog", draw=_fog_draw, replay=_fog_replay)
def fog(x, params, draws):
    """A plasma fractal added with strength ``c``, then rescaled to keep the maximum."""
    from robustlab.shifts.corruptions.fog import map_size

    c, decay = params
    h, w = x.shape[-2:]
    plasma = plasma_fractal(draws, map_size(h, w), decay)[:, None, :h, :w]
    v = unit(x, torch.float64)
    top = v.amax(dim=(1, 2, 3), keepdim=True)
    return to_uint8((v + c * plasma) * top / (top + c))
