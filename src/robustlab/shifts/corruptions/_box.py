"""Pillow's ``Image.resize(size, Image.BOX)`` for uint8 RGB arrays, byte for byte, in numba.

Why: pixelate is two BOX resizes, and through Pillow each costs an image object, a
conversion in and out of Pillow's 4-byte pixel layout and a table build, which at 32 and
64 px weighs more than the averaging itself: pixelate was the one corruption no faster
than the reference (which holds a Pillow image already), and slower at 32 px.

What Pillow does (libImaging/Resample.c; the same in Pillow 10.4, which made the reference
fixtures, and 13.0), repeated here:

* Per axis, for output line ``xx`` of ``out`` from ``n`` input lines: ``scale = n /
  out``, ``support = 0.5 * max(scale, 1)``, ``center = (xx + 0.5) * scale``, the input
  lines ``[int(center - support + 0.5), int(center + support + 0.5))`` clamped to the
  image, each weighted ``box((x - center + 0.5) * (1 / max(scale, 1)))`` where ``box(t)`` is 1
  for ``-0.5 < t <= 0.5`` and 0 elsewhere, divided by their sum (all in double), then
  fixed point: ``int(0.5 + w * 2**22)``.
* The horizontal pass first (8-bit intermediate), then the vertical one; each output
  value is ``(2**21 + sum(v * k)) >> 22`` in integers, capped at 255 (BOX weights are
  never negative, so the sum is). A pass whose size does not change is skipped by
  Pillow; here it runs as the identity it is (one weight of 2**22 per line).

tests/test_corruption_box.py compares with Pillow on many sizes and every scale the
corruption tables use.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from robustlab.shifts.corruptions._scratch import scratch

_PRECISION_BITS = 22  # Pillow's 32 - 8 - 2


@functools.lru_cache(maxsize=256)
def box_table(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(first, count, weights)`` for one axis: the first input line and the number of
    lines of each output line, and their fixed-point weights (``(n_out, ksize)`` int64,
    zero past ``count``). Read-only, cached: pixelate asks for the same few sizes."""
    scale = float(n_in) / n_out
    filterscale = max(scale, 1.0)
    support = 0.5 * filterscale
    ss = 1.0 / filterscale
    ksize = int(np.ceil(support)) * 2 + 1
    first = np.zeros(n_out, np.int64)
    count = np.zeros(n_out, np.int64)
    weights = np.zeros((n_out, ksize), np.int64)
    for xx in range(n_out):
        center = (xx + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in) - lo
        w = [1.0 if -0.5 < (x + lo - center + 0.5) * ss <= 0.5 else 0.0 for x in range(hi)]
        total = sum(w)  # left to right, as Pillow's running sum of 1.0s and 0.0s
        if total != 0.0:
            w = [v / total for v in w]
        first[xx] = lo
        count[xx] = hi
        weights[xx, :hi] = [int(0.5 + v * (1 << _PRECISION_BITS)) for v in w]
    for a in (first, count, weights):
        a.setflags(write=False)
    return first, count, weights


@functools.lru_cache(maxsize=256)
def _value_table(n_in: int, n_out: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`box_table` of the columns, per interleaved value: ``(offsets, weights)``,
    each ``(ksize, n_out * channels)``, tap ``t`` of value ``xx * channels + c`` reading
    ``row[offsets[t, ...]]`` (``(first + t) * channels + c``). Taps past a column's count
    get weight 0 and a valid offset, which adds an exact integer 0: every value then has
    the same number of taps and the loop over values has no inner branch."""
    first, count, weights = box_table(n_in, n_out)
    taps = np.arange(weights.shape[1])
    cols = np.minimum(first[None, :] + taps[:, None], n_in - 1)  # (ksize, n_out)
    chan = np.arange(channels)
    offsets = (cols[:, :, None] * channels + chan).reshape(len(taps), -1).astype(np.uint64)
    w = np.repeat(weights.T, channels, axis=1)  # zero past each count already
    for a in (offsets, w):
        a.setflags(write=False)
    return offsets, np.ascontiguousarray(w)


@njit(cache=True, nogil=True)
def _pass_cols(src, dst, offsets, weights):
    """Resample the columns of (rows, cols * C) ``src`` into ``dst`` (rows, out cols * C)."""
    half = np.int64(1) << np.int64(_PRECISION_BITS - 1)
    n = dst.shape[1]
    acc = np.empty(n, np.int64)
    for i in range(dst.shape[0]):
        row = src[i]
        for j in range(n):
            acc[j] = half
        for t in range(offsets.shape[0]):
            off = offsets[t]
            k = weights[t]
            for j in range(n):
                acc[j] += np.int64(row[off[j]]) * k[j]
        o = dst[i]
        for j in range(n):
            o[j] = min(acc[j] >> np.int64(_PRECISION_BITS), 255)


@njit(cache=True, nogil=True)
def _pass_rows(src, dst, first, count, weights):
    """Resample axis 0 of (rows, cols * C) ``src`` into ``dst`` (out rows, cols * C)."""
    half = np.int64(1) << np.int64(_PRECISION_BITS - 1)
    n = dst.shape[1]
    acc = np.empty(n, np.int64)
    for yy in range(dst.shape[0]):
        lo = first[yy]
        for j in range(n):
            acc[j] = half
        for t in range(count[yy]):
            k = weights[yy, t]
            row = src[lo + t]
            for j in range(n):
                acc[j] += np.int64(row[j]) * k
        o = dst[yy]
        for j in range(n):
            o[j] = min(acc[j] >> np.int64(_PRECISION_BITS), 255)


def box_resize(
    x: np.ndarray,
    width: int,
    height: int,
    out: np.ndarray | None = None,
    work: str = "box.tmp",
) -> np.ndarray:
    """``np.asarray(Image.fromarray(x).resize((width, height), Image.BOX))`` for an HxWxC
    uint8 array, the same bytes; ``out`` (height x width x C uint8) is filled when given.

    ``work`` names the intermediate's scratch buffer: a caller that resizes twice per
    call (pixelate: down, then up) gives each resize its own name, so that neither
    finds the other's shape there and allocates afresh every time."""
    x = np.ascontiguousarray(x, dtype=np.uint8)
    h, w, ch = x.shape
    if out is None:
        out = np.empty((height, width, ch), np.uint8)
    rows = box_table(h, height)
    # the horizontal pass reads only the input rows the vertical one uses, as Pillow's
    top = int(rows[0][0])
    bottom = int(rows[0][-1] + rows[1][-1])
    tmp = scratch(work, (bottom - top, width, ch), np.uint8)
    _pass_cols(
        x[top:bottom].reshape(bottom - top, w * ch),
        tmp.reshape(bottom - top, width * ch),
        *_value_table(w, width, ch),
    )
    _pass_rows(
        tmp.reshape(bottom - top, width * ch),
        out.reshape(height, width * ch),
        rows[0] - top,
        rows[1],
        rows[2],
    )
    return out
