"""OpenCV's uint8 arithmetic as batched tensor operations (the scenes' building blocks).

The exact XIMAGENET-12 scenes call OpenCV on uint8 images, and OpenCV's uint8 paths are
integer or float32 pipelines with their own rounding: a float64 re-derivation of the same
formula would disagree by one at a few percent of the pixels. These functions reproduce
the arithmetic itself, so on the shared photos they agree with ``cv2`` pixel for pixel
(tests/test_batched_scenes.py measures it):

* ``GaussianBlur``: OpenCV's bit-exact fixed-point filter (8 fractional bits per tap, the
  horizontal pass first, ``(sum + 2**15) >> 16`` at the end, reflect-101 border). The
  integer taps are read from ``cv2`` itself (:func:`gaussian_taps`), so they are the ones
  of the installed OpenCV; every partial sum stays below 2**24, exact in float32.
* ``COLOR_RGB2GRAY``: ``(9798 R + 19235 G + 3735 B + 2**14) >> 15``.
* ``COLOR_RGB2HSV``: the 12-bit division tables and integer hue formula.
* ``COLOR_HSV2RGB``: the vectorised float32 path (fused ``1 - s*h``, truncation to uint8);
  where a row's length is not a multiple of the vector width OpenCV finishes the row with
  its scalar code, which rounds instead of truncating: up to one level at those pixels.
* ``addWeighted``: ``fma(a, alpha, fma(b, beta, gamma))`` in float32, rounded half to even.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from robustlab.shifts.batched._ops import pad

_HSV_SHIFT = 12


@functools.lru_cache(maxsize=16)
def gaussian_taps(ksize: int, sigma: float) -> tuple[int, ...]:
    """The integer taps (sum 256) of OpenCV's fixed-point ``GaussianBlur(ksize, sigma)``.

    Read from ``cv2`` by blurring a vertical line of 255: each output row is then the
    horizontal pass times the vertical taps' sum (exactly 1.0), i.e. ``255 * tap / 256``
    rounded, which is the tap itself for taps up to 128 (checked below).
    """
    import cv2

    n = int(ksize)
    line = np.zeros((2 * n + 1, 2 * n + 1), np.uint8)
    line[:, n] = 255
    row = cv2.GaussianBlur(line, (n, n), float(sigma))[n]
    taps = tuple(int(v) for v in row[n - n // 2 : n + n // 2 + 1])
    if sum(taps) != 256 or max(taps) > 128:  # the read-out above would not be exact
        raise RuntimeError(f"cannot read OpenCV's Gaussian taps for {ksize}/{sigma}: {taps}")
    return taps


def gaussian_blur(x: torch.Tensor, ksize: int, sigma: float) -> torch.Tensor:
    """``cv2.GaussianBlur(img, (ksize, ksize), sigma)`` of every image of a uint8 batch."""
    n, c, h, w = x.shape
    k = torch.tensor(gaussian_taps(int(ksize), float(sigma)), dtype=torch.float32, device=x.device)
    r = int(ksize) // 2
    flat = x.to(torch.float32).reshape(n * c, 1, h, w)
    flat = F.conv2d(pad(flat, 0, r, "mirror"), k.view(1, 1, 1, -1))
    flat = F.conv2d(pad(flat, r, 0, "mirror"), k.view(1, 1, -1, 1))
    out = torch.div(flat + 32768.0, 65536.0, rounding_mode="floor")
    return out.clamp_(0, 255).to(torch.uint8).reshape(n, c, h, w)


def rgb_to_grey(x: torch.Tensor) -> torch.Tensor:
    """``cv2.cvtColor(img, COLOR_RGB2GRAY)``: (N, 3, H, W) uint8 -> (N, H, W) uint8."""
    v = x.to(torch.int32)
    y = (v[:, 0] * 9798 + v[:, 1] * 19235 + v[:, 2] * 3735 + (1 << 14)) >> 15
    return y.to(torch.uint8)


@functools.lru_cache(maxsize=1)
def _hsv_tables() -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(1, 256, dtype=np.float64)
    sdiv = np.concatenate([[0], np.rint((255 << _HSV_SHIFT) / i)]).astype(np.int64)
    hdiv = np.concatenate([[0], np.rint((180 << _HSV_SHIFT) / (6.0 * i))]).astype(np.int64)
    return sdiv, hdiv


def rgb_to_hsv(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``cv2.cvtColor(img, COLOR_RGB2HSV)`` of a uint8 batch: (h 0..180, s, v) as int64."""
    sdiv, hdiv = (torch.as_tensor(t, device=x.device) for t in _hsv_tables())
    v3 = x.to(torch.int64)
    r, g, b = v3[:, 0], v3[:, 1], v3[:, 2]
    v = torch.maximum(torch.maximum(r, g), b)
    diff = v - torch.minimum(torch.minimum(r, g), b)
    half = 1 << (_HSV_SHIFT - 1)
    s = (diff * sdiv[v] + half) >> _HSV_SHIFT
    h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * hdiv[diff] + half) >> _HSV_SHIFT
    return torch.where(h < 0, h + 180, h), s, v


def _one_minus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """float32 ``1 - a*b`` rounded once (a fused multiply-add, as OpenCV's vector code)."""
    return (1.0 - a.to(torch.float64) * b.to(torch.float64)).to(torch.float32)


def hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``cv2.cvtColor(hsv, COLOR_HSV2RGB)`` (hue 0..180) -> (N, 3, H, W) uint8."""
    f32 = torch.float32
    s = s.to(f32) * np.float32(1 / 255)
    v = v.to(f32) * np.float32(1 / 255)
    hh = h.to(f32) * np.float32(6.0 / 180)
    whole = torch.trunc(hh)
    frac = hh - whole
    t0 = v
    t1 = v * (1.0 - s)
    t2 = v * _one_minus(s, frac)
    t3 = v * _one_minus(s, 1.0 - frac)
    sector = whole - torch.trunc(whole * np.float32(1 / 6)) * 6
    red = torch.where(
        (sector < 1) | (sector > 4),
        t0,
        torch.where(sector == 1, t2, torch.where(sector <= 3, t1, t3)),
    )
    green = torch.where(
        sector < 1, t3, torch.where(sector <= 2, t0, torch.where(sector == 3, t2, t1))
    )
    blue = torch.where(
        sector < 2, t1, torch.where(sector == 2, t3, torch.where(sector <= 4, t0, t2))
    )
    rgb = torch.stack([red, green, blue], dim=1) * np.float32(255)
    return torch.trunc(rgb).clamp_(0, 255).to(torch.uint8)


def add_weighted(
    a: torch.Tensor, alpha: float, b: torch.Tensor, beta: float, gamma: float
) -> torch.Tensor:
    """``cv2.addWeighted(a, alpha, b, beta, gamma)`` of uint8 batches (uint8 out).

    Each fused step is exact in float64 (uint8 times a float32 constant has at most 32
    significant bits) and rounded once to float32, as the vector instruction does.
    """
    f64 = torch.float64
    al, be, ga = (float(np.float32(v)) for v in (alpha, beta, gamma))
    inner = (b.to(f64) * be + ga).to(torch.float32)
    outer = (a.to(f64) * al + inner.to(f64)).to(torch.float32)
    return torch.round(outer).clamp_(0, 255).to(torch.uint8)
