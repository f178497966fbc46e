"""Batched blurs: defocus, glass, motion, zoom and Gaussian blur.

Deviations from the exact versions (all measured in benchmarks/torch_shifts.py):

* Arithmetic in float32 where the exact path uses float64 (defocus, zoom, Gaussian):
  a truncated output value moves by one where a result lands within ~1e-6 of a step.
* glass_blur: the shuffle is the reference's chained copy done row by row (bottom row
  first, as the reference walks), each row in parallel; a chain of copies inside a row
  is resolved by pointer jumping, so for the same offsets the result is the exact one.
  Only the offsets come from torch generators. Cost: one small step per image row.
* motion_blur: the same taps and Q16 arithmetic as ImageMagick (see
  :func:`._ops.motion_blur`), with the angle drawn from torch.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustlab.shifts.batched._ops import (
    clipped_zoom,
    filter2d,
    gaussian,
    randint,
    to_uint8,
    uniform,
    unit,
)
from robustlab.shifts.batched._ops import (
    motion_blur as _motion,
)
from robustlab.shifts.batched._registry import batched


@batched("defocus_blur")
def defocus_blur(x, params, gens):
    """Convolution with the reference's anti-aliased disk (reflect-101 border)."""
    from robustlab.shifts.corruptions.defocus_blur import disk_kernel

    radius, alias = params
    return to_uint8(filter2d(unit(x), disk_kernel(radius, alias)))


@batched("gaussian_blur")
def gaussian_blur(x, sigma, gens):
    """Gaussian of ``sigma`` pixels, 'nearest' border, truncated at 4 sigma."""
    return to_uint8(gaussian(unit(x), sigma))


def _shuffle_pass(img: torch.Tensor, offsets: torch.Tensor, delta: int) -> None:
    """One pass of the reference's chained pixel copies, in place on (N, C, H, W) uint8.

    ``offsets`` is (N, rows, cols, 2) of ``(dx, dy)`` in the reference's visiting order
    (rows from ``H - delta`` up to ``delta + 1``, columns from ``W - delta`` left to
    ``delta + 1``). A pixel copies the *current* value at its offset: rows below were
    already rewritten in this pass (read from ``img``, which holds them), rows above not
    yet; inside the row, a source to the right that was visited earlier holds its own new
    value, found by following the pointers to the end of the chain.
    """
    n, c, h, w = img.shape
    rows, cols = offsets.shape[1:3]
    dev = img.device
    col_idx = torch.arange(cols, device=dev)
    ws = (w - delta) - col_idx  # image column of each visited position
    steps = max(1, math.ceil(math.log2(max(cols, 2)))) + 1
    batch = torch.arange(n, device=dev).view(n, 1)
    for r in range(rows):
        hh = h - delta - r
        dx = offsets[:, r, :, 0]
        dy = offsets[:, r, :, 1]
        src_h = hh + dy
        src_w = ws.view(1, -1) + dx
        # terminal values: what the source holds now
        vals = img[batch, :, src_h, src_w]  # (N, cols, C)
        chained = (dy == 0) & (dx > 0) & (src_w <= w - delta)
        ptr = torch.where(chained, col_idx.view(1, -1) - dx, col_idx.view(1, -1))
        for _ in range(steps):
            ptr = ptr.gather(1, ptr)
        vals = vals.gather(1, ptr.unsqueeze(-1).expand(-1, -1, c))
        img[batch, :, hh, ws.view(1, -1).expand(n, -1)] = vals


@batched("glass_blur")
def glass_blur(x, params, gens):
    """Gaussian blur, ``iterations`` passes of local chained pixel copies, Gaussian blur."""
    sigma, delta, iterations = params
    h, w = x.shape[-2:]
    img = (gaussian(unit(x), sigma) * 255).to(torch.uint8)
    rows, cols = max(h - 2 * delta, 0), max(w - 2 * delta, 0)
    for _ in range(iterations):
        if rows and cols:
            offsets = randint(gens, -delta, delta, (rows, cols, 2), x.device)
            _shuffle_pass(img, offsets, delta)
    return to_uint8(gaussian(unit(img), sigma))


@batched("motion_blur")
def motion_blur(x, params, gens):
    """ImageMagick-style motion blur along an angle drawn uniformly from [-45, 45) degrees."""
    radius, sigma = params
    angles = uniform(gens, (), x.device, -45.0, 45.0, dtype=torch.float64).cpu().numpy()
    return _motion(x, radius, sigma, angles)


@batched("zoom_blur")
def zoom_blur(x, params, gens):
    """The image averaged with its centre zooms by the factors ``arange(1, stop, step)``."""
    stop, step = params
    factors = np.arange(1, stop, step)
    v = unit(x)
    acc = torch.zeros_like(v)
    for z in factors:
        acc += clipped_zoom(v, float(z))
    return to_uint8((v + acc) / (len(factors) + 1))
