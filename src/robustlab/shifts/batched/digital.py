"""Batched digital corruptions: contrast, elastic transform, pixelate, JPEG, saturate.

Deviations from the exact versions:

* contrast, saturate: float64 tensor arithmetic; agrees with the exact path except
  where rounding flips a truncated value.
* pixelate: Pillow's BOX resampling reproduced with its own integer coefficients
  (:func:`._ops.pil_resize`): bit-identical.
* jpeg_compression: libjpeg through torchvision (:mod:`.jpeg`); on the CPU bit-identical
  to the exact path's OpenCV/PIL round trip, on CUDA nvJPEG.
* elastic_transform: the affine warp is bilinear ``grid_sample`` in float32 (OpenCV 3.4
  rounds source positions to 1/32 pixel and weights in float32); the displacement fields
  are smoothed with the same Gaussian ('reflect' border, truncate 3) through an FFT of the
  mirrored field, which is exactly the reflect-mode filter; the final ``map_coordinates``
  (order 1, 'reflect') is ``grid_sample`` with reflection padding. The random draws
  (triangle jitter, two uniform fields) come from torch.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from robustlab.shifts.batched._ops import pil_resize, to_uint8, uniform, unit
from robustlab.shifts.batched._registry import batched
from robustlab.shifts.batched.color import hsv_adjust
from robustlab.shifts.batched.jpeg import jpeg_roundtrip


@batched("contrast")
def contrast(x, factor, gens):
    """Each channel pulled towards its image mean: ``(x - m) * factor + m``."""
    v = unit(x, torch.float64)
    m = v.mean(dim=(2, 3), keepdim=True)
    return to_uint8((v - m) * factor + m)


@batched("saturate")
def saturate(x, params, gens):
    """HSV saturation changed to ``S * a + b``, clipped."""
    a, b = params
    return hsv_adjust(x, s_scale=a, s_shift=b)


@batched("pixelate")
def pixelate(x, scale, gens):
    """Pillow BOX resize to ``scale`` of each side and back (bit-identical to Pillow)."""
    h, w = x.shape[-2:]
    small = pil_resize(x, (max(1, int(h * scale)), max(1, int(w * scale))), "box")
    return pil_resize(small, (h, w), "box")


@batched("jpeg_compression")
def jpeg_compression(x, quality, gens):
    """JPEG round trip at ``quality``."""
    return jpeg_roundtrip(x, int(quality))


@functools.lru_cache(maxsize=16)
def _reflect_gain(n: int, sigma: float, truncate: float) -> np.ndarray:
    """Gain of scipy's Gaussian ('reflect' border) on the 2n-point DFT of the mirrored line.

    Mirroring a line (``a b c d d c b a``) makes 'reflect' filtering a circular one over
    2n points; the kernel wrapped on that circle has the real spectrum
    ``w0 + 2 sum_d w_d cos(pi k d / n)``.
    """
    from robustlab.shifts.corruptions.elastic_transform import gaussian_weights

    wts = gaussian_weights(sigma, truncate)
    r = (len(wts) - 1) // 2
    k = np.arange(2 * n)[:, None]
    d = np.arange(1, r + 1)[None, :]
    gain = wts[r] + 2 * (wts[r + 1 :][None, :] * np.cos(np.pi * k * d / n)).sum(1)
    gain.setflags(write=False)
    return gain


def gaussian_reflect(field: torch.Tensor, sigma: float, truncate: float = 3.0) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(f, sigma, mode='reflect', truncate=truncate)`` of
    each (H, W) field of an (N, H, W) float64 batch, through the FFT of the mirrored field."""
    h, w = field.shape[-2:]
    full = torch.cat([field, field.flip(1)], 1)
    full = torch.cat([full, full.flip(2)], 2)
    gh = torch.tensor(_reflect_gain(h, float(sigma), truncate), device=field.device)
    gw = torch.tensor(_reflect_gain(w, float(sigma), truncate), device=field.device)
    spec = torch.fft.fft2(full) * (gh[:, None] * gw[None, :])
    return torch.fft.ifft2(spec).real[:, :h, :w]


def _affine_sources(m: torch.Tensor, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source (x, y) of every destination pixel for forward affine matrices (N, 2, 3)."""
    n = m.shape[0]
    full = torch.cat(
        [m, torch.tensor([[[0.0, 0.0, 1.0]]], dtype=m.dtype, device=m.device).expand(n, 1, 3)], 1
    )
    inv = torch.linalg.inv(full)[:, :2]  # (N, 2, 3)
    ys, xs = torch.meshgrid(
        torch.arange(h, dtype=m.dtype, device=m.device),
        torch.arange(w, dtype=m.dtype, device=m.device),
        indexing="ij",
    )
    pts = torch.stack([xs, ys, torch.ones_like(xs)], 0).reshape(3, -1)  # (3, H*W)
    src = inv @ pts  # (N, 2, H*W)
    return src[:, 0].view(n, h, w), src[:, 1].view(n, h, w)


def _sample(img: torch.Tensor, sx: torch.Tensor, sy: torch.Tensor, *, align: bool) -> torch.Tensor:
    """Bilinear ``img`` at pixel coordinates (sx, sy) with reflection padding.

    ``align=True`` reflects about the edge pixel centres (OpenCV's reflect-101),
    ``align=False`` about the outer pixel edges (scipy's 'reflect').
    """
    h, w = img.shape[-2:]
    if align:
        gx, gy = 2 * sx / (w - 1) - 1, 2 * sy / (h - 1) - 1
    else:
        gx, gy = (2 * sx + 1) / w - 1, (2 * sy + 1) / h - 1
    grid = torch.stack([gx, gy], -1).to(img.dtype)
    return F.grid_sample(img, grid, mode="bilinear", padding_mode="reflection", align_corners=align)


@batched("elastic_transform")
def elastic_transform(x, params, gens):
    """A random affine warp followed by a Gaussian-smoothed random displacement."""
    from robustlab.shifts.corruptions.elastic_transform import affine_points

    alpha, sigma, affine = params
    n, _, h, w = x.shape
    dev = x.device
    pts1 = torch.as_tensor(affine_points(h, w), dtype=torch.float64, device=dev)  # (3, 2)
    jitter = uniform(gens, (3, 2), dev, -affine, affine).to(torch.float32).to(torch.float64)
    pts2 = pts1.to(torch.float32).to(torch.float64) + jitter
    # forward matrix M with [x y 1] @ M.T = pts2, as cv2.getAffineTransform solves it
    a = torch.cat([pts1, torch.ones(3, 1, dtype=torch.float64, device=dev)], 1)
    m = torch.linalg.solve(a.expand(n, 3, 3), pts2).transpose(1, 2)  # (N, 2, 3)
    sx, sy = _affine_sources(m, h, w)
    warped = _sample(unit(x), sx.float(), sy.float(), align=True)
    fields = uniform(gens, (2, h, w), dev, -1.0, 1.0, dtype=torch.float64)  # dx drawn first
    dx = (gaussian_reflect(fields[:, 0], sigma) * alpha).float()
    dy = (gaussian_reflect(fields[:, 1], sigma) * alpha).float()
    ys, xs = torch.meshgrid(
        torch.arange(h, device=dev, dtype=torch.float32),
        torch.arange(w, device=dev, dtype=torch.float32),
        indexing="ij",
    )
    return to_uint8(_sample(warped, xs + dx, ys + dy, align=False))
