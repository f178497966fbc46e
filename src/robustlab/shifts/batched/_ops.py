"""Tensor building blocks shared by the batched corruptions.

Every function takes (N, C, H, W) tensors and runs on whatever device they live on, so the
same code serves CUDA and the CPU tests. Randomness comes only from the per-sample
``torch.Generator`` list passed in (one generator per image, seeded by the seed rule), so
an image's pixels do not depend on which other images share its batch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F


def generators(seeds: Sequence[int], device) -> list[torch.Generator]:
    """One generator per image on ``device`` (CUDA generators for CUDA tensors)."""
    return [torch.Generator(device=device).manual_seed(int(s)) for s in seeds]


def per_sample(gens: Sequence[torch.Generator], draw: Callable[[torch.Generator], torch.Tensor]):
    """``torch.stack([draw(g) for g in gens])``: the draws of each image from its own generator."""
    return torch.stack([draw(g) for g in gens])


def normal(gens, shape, device, *, mean: float = 0.0, std: float = 1.0, dtype=torch.float32):
    """(N, *shape) normal draws, one generator per image."""
    return (
        per_sample(gens, lambda g: torch.randn(shape, generator=g, device=device, dtype=dtype))
        * std
        + mean
    )


def uniform(gens, shape, device, low: float, high: float, dtype=torch.float32):
    """(N, *shape) uniform draws on [low, high), one generator per image."""
    return (
        per_sample(gens, lambda g: torch.rand(shape, generator=g, device=device, dtype=dtype))
        * (high - low)
        + low
    )


def randint(gens, low: int, high: int, shape, device):
    """(N, *shape) int64 draws on [low, high), one generator per image."""
    return per_sample(gens, lambda g: torch.randint(low, high, shape, generator=g, device=device))


def div(x: torch.Tensor, d: float) -> torch.Tensor:
    """``x / d`` for a Python number ``d``, correctly rounded on every device, as numpy's.

    CUDA divides a tensor by a Python number as a multiplication by its reciprocal
    (PyTorch's ``div_true_kernel_cuda``: "may lose one bit of precision"), which on an H200
    moved one pixel level here and there (elastic_transform's matched draws, saturate's
    HSV). A divisor that is a tensor on the device is divided by exactly. Made in float64,
    it is cast to ``x``'s float dtype the way a Python number is, so the quotient is the
    CPU's. The CPU path is left as it was.
    """
    if x.device.type == "cpu":
        return x / d
    return x / torch.full((), float(d), dtype=torch.float64, device=x.device)


def unit(x: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """uint8 pixels as ``x / 255`` in ``dtype``."""
    return div(x.to(dtype), 255.0)


def to_uint8(v: torch.Tensor, scale: float = 255.0) -> torch.Tensor:
    """``uint8(clip(v, 0, 1) * scale)``: clip then truncate, like the reference's ``np.uint8``."""
    return (v.clamp(0, 1) * scale).to(torch.uint8)


def trunc_uint8(v: torch.Tensor) -> torch.Tensor:
    """``uint8(clip(v, 0, 255))`` for values already on the 0..255 scale (truncation)."""
    return v.clamp(0, 255).to(torch.uint8)


# ---------------------------------------------------------------- padding and filtering


def pad_index(n: int, r: int, mode: str) -> np.ndarray:
    """Source index of each of the ``n + 2 r`` positions of a line padded by ``r``.

    Modes (scipy's names): ``nearest`` (edge repeated), ``reflect`` (half-sample
    symmetric, ``d c b a | a b c d``, repeated for pads longer than the line) and
    ``mirror`` (whole-sample, OpenCV's reflect-101).
    """
    p = np.arange(-r, n + r)
    if mode == "nearest":
        return np.clip(p, 0, n - 1)
    if mode == "reflect":
        q = np.mod(p, 2 * n)
        return np.where(q < n, q, 2 * n - 1 - q)
    if mode == "mirror":
        if n == 1:
            return np.zeros_like(p)
        q = np.mod(p, 2 * n - 2)
        return np.where(q < n, q, 2 * n - 2 - q)
    raise ValueError(f"unknown padding mode {mode!r}")


def pad(x: torch.Tensor, r_h: int, r_w: int, mode: str) -> torch.Tensor:
    """Pad the last two axes of ``x`` by index (any pad length, any of :func:`pad_index`'s modes)."""
    h, w = x.shape[-2:]
    if r_h:
        x = x.index_select(-2, torch.as_tensor(pad_index(h, r_h, mode), device=x.device))
    if r_w:
        x = x.index_select(-1, torch.as_tensor(pad_index(w, r_w, mode), device=x.device))
    return x


def separable(x: torch.Tensor, taps: np.ndarray, mode: str) -> torch.Tensor:
    """Correlate every channel of ``x`` with the 1-D ``taps`` along H, then along W.

    The order (rows first) and the border ``mode`` follow scipy's ``gaussian_filter``;
    the sums run in ``x``'s dtype (float32 here against scipy's float64: differences of
    about 1e-7 of full scale).
    """
    n, c, h, w = x.shape
    r = (len(taps) - 1) // 2
    k = torch.as_tensor(np.array(taps), dtype=x.dtype, device=x.device)  # taps may be read-only
    flat = x.reshape(n * c, 1, h, w)
    flat = F.conv2d(pad(flat, r, 0, mode), k.view(1, 1, -1, 1))
    flat = F.conv2d(pad(flat, 0, r, mode), k.view(1, 1, 1, -1))
    return flat.reshape(n, c, h, w)


def gaussian(
    x: torch.Tensor, sigma: float, *, truncate: float = 4.0, mode: str = "nearest"
) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter`` over H and W (scikit-image ``gaussian``'s default
    ``mode='nearest'``, ``truncate=4``)."""
    from robustlab.shifts.corruptions._gauss import gaussian_weights

    return separable(x, gaussian_weights(sigma, truncate), mode)


def filter2d(x: torch.Tensor, kernel: np.ndarray) -> torch.Tensor:
    """``cv2.filter2D`` (correlation, reflect-101 border) of every channel with ``kernel``."""
    n, c, h, w = x.shape
    kh, kw = kernel.shape
    k = torch.tensor(np.asarray(kernel), dtype=x.dtype, device=x.device)
    flat = pad(x.reshape(n * c, 1, h, w), kh // 2, kw // 2, "mirror")
    return F.conv2d(flat, k.view(1, 1, kh, kw)).reshape(n, c, h, w)


# ---------------------------------------------------------------- zoom and motion


def _zoom_axis(x: torch.Tensor, dim: int, factor: float) -> torch.Tensor:
    from robustlab.shifts.corruptions._zoom import _axis_table

    n = x.shape[dim]
    i0, i1, w0, w1, inside = _axis_table(n, float(factor))
    shape = [1] * x.ndim
    shape[dim] = n
    dev = x.device
    w0 = torch.as_tensor(w0 * inside, dtype=x.dtype, device=dev).view(shape)
    w1 = torch.as_tensor(w1 * inside, dtype=x.dtype, device=dev).view(shape)
    return (
        # copies of the indices: the tables are cached read-only arrays
        x.index_select(dim, torch.tensor(i0, device=dev)) * w0
        + x.index_select(dim, torch.tensor(i1, device=dev)) * w1
    )


def clipped_zoom(x: torch.Tensor, factor: float) -> torch.Tensor:
    """The reference's ``clipped_zoom``: crop the centre ``ceil(side / factor)``, zoom it
    linearly (scipy ``zoom(order=1)`` geometry, shared with :mod:`..corruptions._zoom`)
    and trim to the original size; separable, rows then columns."""
    return _zoom_axis(_zoom_axis(x, -2, factor), -1, factor)


def clipped_zoom_exact(x: torch.Tensor, factor: float) -> torch.Tensor:
    """:func:`clipped_zoom` of a float64 batch with the exact path's arithmetic, same bits.

    The exact path (scipy's order) scales the two source rows by their weights, then sums
    ``a0 * wc0 + a1 * wc1 + b0 * wc0 + b1 * wc1`` left to right in double; the separable
    :func:`clipped_zoom` rounds in another order and differs in the last bit at about
    half of the values, which can flip a threshold or a truncation downstream. Four
    gathers instead of two.
    """
    from robustlab.shifts.corruptions._zoom import _axis_table

    h, w = x.shape[-2:]
    dev = x.device
    # copies: the tables are cached read-only arrays, which torch must not alias
    r0, r1, rw0, rw1, rin = (torch.tensor(t, device=dev) for t in _axis_table(h, factor))
    c0, c1, cw0, cw1, cin = (torch.tensor(t, device=dev) for t in _axis_table(w, factor))
    a = x.index_select(-2, r0) * rw0.view(-1, 1)
    b = x.index_select(-2, r1) * rw1.view(-1, 1)
    out = (
        a.index_select(-1, c0) * cw0
        + a.index_select(-1, c1) * cw1
        + b.index_select(-1, c0) * cw0
        + b.index_select(-1, c1) * cw1
    )
    return torch.where(rin.view(-1, 1) & cin.view(1, -1), out, torch.zeros_like(out))


def motion_blur(
    x: torch.Tensor, radius: float, sigma: float, angles: Sequence[float]
) -> torch.Tensor:
    """ImageMagick's motion blur of a uint8 batch, one angle (degrees) per image.

    Same taps, offsets, edge replication and Q16 rounding as :mod:`..corruptions._motion`
    (its :func:`motion_kernel` gives them), and the same float64 sum in tap order (one
    multiply and one add per tap, never fused), so the bytes are the exact path's; a
    float32 sum moved a 16-bit quantum by one at about 3e-5 of the bytes. Each tap is one
    gather over the whole batch (each image has its own offsets).
    """
    from robustlab.shifts.corruptions._motion import motion_kernel

    n, c, h, w = x.shape
    kernels = [motion_kernel(radius, sigma, float(a)) for a in angles]
    weights = kernels[0][0]
    taps = len(weights)
    dev = x.device
    dx = torch.as_tensor(np.stack([k[1] for k in kernels]), device=dev)  # (N, taps)
    dy = torch.as_tensor(np.stack([k[2] for k in kernels]), device=dev)
    p = taps
    padded = pad(x.to(torch.float64) * 257.0, p, p, "nearest")
    wp = w + 2 * p
    flat = padded.reshape(n, c, -1)
    rows = torch.arange(h, device=dev).view(1, h, 1) + p
    cols = torch.arange(w, device=dev).view(1, 1, w) + p
    acc = torch.zeros((n, c, h, w), dtype=torch.float64, device=dev)
    for t in range(taps):
        idx = (rows + dy[:, t].view(n, 1, 1)) * wp + cols + dx[:, t].view(n, 1, 1)
        acc += float(weights[t]) * flat.gather(2, idx.view(n, 1, -1).expand(n, c, -1)).view(
            n, c, h, w
        )
    q = torch.floor(acc + 0.5).clamp_(0, 65535)
    return torch.div(q, 257, rounding_mode="floor").to(torch.uint8)


# ---------------------------------------------------------------- Pillow resampling


def _pil_filters() -> dict[str, tuple[Callable[[float], float], float]]:
    def box(v):
        return 1.0 if -0.5 < v <= 0.5 else 0.0

    def bilinear(v):
        v = abs(v)
        return 1.0 - v if v < 1.0 else 0.0

    def bicubic(v, a=-0.5):
        v = abs(v)
        if v < 1.0:
            return ((a + 2.0) * v - (a + 3.0)) * v * v + 1
        if v < 2.0:
            return (((v - 5) * v + 8) * v - 4) * a
        return 0.0

    def sinc(v):
        if v == 0.0:
            return 1.0
        v *= math.pi
        return math.sin(v) / v

    def lanczos(v):
        return sinc(v) * sinc(v / 3) if -3.0 <= v < 3.0 else 0.0

    def hamming(v):
        v = abs(v)
        if v == 0.0:
            return 1.0
        if v >= 1.0:
            return 0.0
        v *= math.pi
        return math.sin(v) / v * (0.54 + 0.46 * math.cos(v))

    return {
        "box": (box, 0.5),
        "bilinear": (bilinear, 1.0),
        "bicubic": (bicubic, 2.0),
        "lanczos": (lanczos, 3.0),
        "hamming": (hamming, 1.0),
    }


PIL_FILTERS = _pil_filters()
_PRECISION_BITS = 32 - 8 - 2  # Pillow's fixed-point precision for 8-bit images


@functools.lru_cache(maxsize=64)
def _pil_matrix(in_size: int, out_size: int, name: str) -> np.ndarray:
    """(out, in) matrix of Pillow's integer resampling coefficients (``precompute_coeffs``
    then ``normalize_coeffs_8bpc``), as float64 holding integers."""
    fn, support = PIL_FILTERS[name]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support *= filterscale
    m = np.zeros((out_size, in_size), np.float64)
    for xx in range(out_size):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size) - xmin
        ws = [fn((x + xmin - center + 0.5) / filterscale) for x in range(xmax)]
        total = sum(ws)
        for x, wv in enumerate(ws):
            v = wv / total if total != 0.0 else wv
            m[xx, xmin + x] = int(v * (1 << _PRECISION_BITS) + (0.5 if v >= 0 else -0.5))
    m.setflags(write=False)
    return m


def _pil_pass(x: torch.Tensor, dim: int, size: int, name: str) -> torch.Tensor:
    m = torch.tensor(_pil_matrix(x.shape[dim], size, name), device=x.device)
    y = torch.matmul(x, m.T) if dim == -1 else torch.matmul(m, x)
    y = torch.floor((y + (1 << (_PRECISION_BITS - 1))) / (1 << _PRECISION_BITS))
    return y.clamp_(0, 255)


def pil_resize(x: torch.Tensor, size: tuple[int, int], name: str) -> torch.Tensor:
    """Pillow's ``Image.resize((w, h), filter)`` of a uint8 batch, bit for bit.

    Pillow resamples 8-bit images with integer coefficients (22 fractional bits), the
    horizontal pass first, rounding to uint8 after each pass; the same integer sums are
    exact in float64 (every partial sum stays below 2**53), so the result equals Pillow's
    on any device. ``size`` is (height, width).
    """
    if name not in PIL_FILTERS:
        raise ValueError(f"no batched Pillow resampling for {name!r}")
    h, w = size
    y = x.to(torch.float64)
    if w != x.shape[-1]:
        y = _pil_pass(y, -1, w, name)
    if h != x.shape[-2]:
        y = _pil_pass(y, -2, h, name)
    return y.to(torch.uint8)
