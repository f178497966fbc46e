"""Batched blurs: defocus, glass, motion, zoom and Gaussian blur.

Deviations from the exact versions (all measured in benchmarks/torch_shifts.py):

* Arithmetic in float32 where the exact path uses float64 (defocus, zoom, Gaussian blur):
  a truncated output value moves by one where a result lands within ~1e-6 of a step.
* glass_blur: the shuffle is the reference's chained copy done row by row (bottom row
  first, as the reference walks), each row in parallel; a chain of copies inside a row
  is resolved by pointer jumping, so for the same offsets the result is the exact one.
  Both Gaussians run in float64 in scipy's order (float32 flipped ~3e-5 of the bytes).
  Only the offsets come from torch generators: fed the exact path's, the same pixels.
  Cost: one small step per image row.
* motion_blur: the same taps and float64 Q16 arithmetic as ImageMagick (see
  :func:`._ops.motion_blur`), with the angle drawn from torch: fed the exact path's
  angle, the same pixels.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from robustlab.shifts.batched._ops import (
    clipped_zoom,
    div,
    filter2d,
    gaussian,
    pad,
    randint,
    to_uint8,
    uniform,
    unit,
)
from robustlab.shifts.batched._ops import (
    motion_blur as _motion,
)
from robustlab.shifts.registry import register_batched


@register_batched("defocus_blur")
def defocus_blur(x, params, gens):
    """Convolution with the reference's anti-aliased disk (reflect-101 border)."""
    from robustlab.shifts.corruptions.defocus_blur import disk_kernel

    radius, alias = params
    return to_uint8(filter2d(unit(x), disk_kernel(radius, alias)))


@register_batched("gaussian_blur")
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


def _gaussian_scipy(v: torch.Tensor, sigma: float) -> torch.Tensor:
    """:func:`..corruptions._gauss.gaussian_nearest` of float64 (N, C, H, W), same bits.

    scipy's order for a symmetric kernel, rows then columns: ``x[i] * w0`` plus
    ``(x[i - k] + x[i + k]) * w_k`` for k from the radius down to 1, edge pixels repeated;
    each step one rounded float64 operation, as in the exact path. (A convolution sums
    in another order and flips a truncated byte now and then.)
    """
    from robustlab.shifts.corruptions._gauss import gaussian_weights

    w = gaussian_weights(sigma)
    r = (len(w) - 1) // 2
    h, wd = v.shape[-2:]
    rows = pad(v, r, 0, "nearest")
    acc = rows[..., r : r + h, :] * float(w[r])
    for d in range(r, 0, -1):
        acc = acc + (rows[..., r - d : r - d + h, :] + rows[..., r + d : r + d + h, :]) * float(
            w[r - d]
        )
    cols = pad(acc, 0, r, "nearest")
    acc = cols[..., r : r + wd] * float(w[r])
    for d in range(r, 0, -1):
        acc = acc + (cols[..., r - d : r - d + wd] + cols[..., r + d : r + d + wd]) * float(
            w[r - d]
        )
    return acc


def _glass_draw(x, params, gens) -> dict[str, torch.Tensor]:
    """Per image and pass, the offsets of every visited pixel, uniform on [-delta, delta)."""
    _, delta, iterations = params
    rows, cols = _glass_grid(*x.shape[-2:], delta)
    shape = (iterations, rows, cols, 2)
    return {"offsets": randint(gens, -delta, delta, shape, x.device)}


def _glass_replay(img, params, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.glass_blur import draw

    _, delta, iterations = params
    h, w = img.shape[:2]
    rows, cols = _glass_grid(h, w, delta)
    offsets = draw(rng, h, w, delta, iterations)  # visiting order is row-major: a reshape
    return {"offsets": torch.from_numpy(offsets).view(1, iterations, rows, cols, 2)}


def _glass_grid(h: int, w: int, delta: int) -> tuple[int, int]:
    """Rows and columns of the pixels one pass visits."""
    return max(h - 2 * delta, 0), max(w - 2 * delta, 0)


@register_batched("glass_blur", draw=_glass_draw, replay=_glass_replay)
def glass_blur(x, params, draws):
    """Gaussian blur, ``iterations`` passes of local chained pixel copies, Gaussian blur."""
    sigma, delta, iterations = params
    img = (_gaussian_scipy(unit(x, torch.float64), sigma) * 255).to(torch.uint8)
    offsets = draws["offsets"]
    if offsets.numel():
        for i in range(iterations):
            _shuffle_pass(img, offsets[:, i], delta)
    return to_uint8(_gaussian_scipy(unit(img, torch.float64), sigma))


def _motion_draw(x, params, gens) -> dict[str, torch.Tensor]:
    """Per image, the blur angle in degrees, uniform on [-45, 45) (float64 like numpy's)."""
    return {"angle": uniform(gens, (), x.device, -45.0, 45.0, dtype=torch.float64)}


def _motion_replay(img, params, rng) -> dict[str, torch.Tensor]:
    from robustlab.shifts.corruptions.motion_blur import draw

    return {"angle": torch.tensor([draw(rng)], dtype=torch.float64)}


@register_batched("motion_blur", draw=_motion_draw, replay=_motion_replay)
def motion_blur(x, params, draws):
    """ImageMagick-style motion blur along each image's drawn angle (degrees)."""
    radius, sigma = params
    return _motion(x, radius, sigma, draws["angle"].tolist())


@register_batched("zoom_blur")
def zoom_blur(x, params, gens):
    """The image averaged with its centre zooms by the factors ``arange(1, stop, step)``."""
    stop, step = params
    factors = np.arange(1, stop, step)
    v = unit(x)
    acc = torch.zeros_like(v)
    for z in factors:
        acc += clipped_zoom(v, float(z))
    return to_uint8(div(v + acc, len(factors) + 1))
