"""Center zoom used by zoom_blur and snow, following the reference's ``clipped_zoom``.

The reference crops the central ``ceil(side / z)`` square, zooms it with
``scipy.ndimage.zoom(order=1)`` and trims the excess around the center. Here height and
width are handled separately so non-square images work; on square images the numbers
are the reference's.

Why not just call scipy: zoom_blur needs 11 to 16 zooms per call and scipy's generic
N-d spline code spends most of its time on bookkeeping. Linear zoom is separable in its
*geometry*, so the source rows/columns and weights of every output row/column are
computed once per axis (cheap, length H and W) and a numba loop does the 4-tap sums.

Bit-exactness with ``scipy.ndimage.zoom(img, (z, z, 1), order=1)`` (mode ``'constant'``,
``grid_mode=False``) comes from repeating scipy's arithmetic exactly:

* per axis scipy maps output index ``k`` to ``cc = k * ((n_in - 1) / (n_out - 1))`` in
  double precision; a ``cc`` that rounds past ``n_in - 1`` is outside the image and the
  whole output line is the constant 0 (this does happen for the last line, e.g. side 139
  at arange's 1.16 or side 36 at 1.2, and survives the trim);
* the weights are ``w0 = 1 - (cc - floor(cc))`` and ``w1 = 1 - w0`` (scipy derives the
  last spline weight as 1 minus the others, which is not always ``cc - floor(cc)``);
* the interpolated value is ``t = 0.0`` plus, for the 2x2x2 corners in C order (last
  axis fastest), ``value * w_row * w_col * w_chan``. The channel axis has zoom 1, so its
  weights are exactly 1 and 0: the 0-weighted corners add +0.0 and the 1-weighted ones
  leave the product unchanged, leaving ``((v00*wr0)*wc0 + (v01*wr0)*wc1 + (v10*wr1)*wc0)
  + (v11*wr1)*wc1`` summed left to right in double, stored in the input's dtype;
* a corner past the last line (only reached with weight 0) is read from a valid line,
  which cannot change the sum for finite input.

Checked against scipy 1.11 (the reference environment) and scipy 1.17 on random
float32/float64 images of many sizes and all zoom factors used by zoom_blur and snow:
identical output (tests/test_zoom.py). Speed at 224x224x3 float32, one zoom, CPU time on
the shared dev machine: scipy 8.8 ms, here 0.7 ms.

Two ways to read the corners, each where it is faster:

* one zoom (:func:`clipped_zoom`, snow's factors 2 to 4.5): every source row in use is
  first gathered into column order once, since each is read by several output rows and
  its columns repeat every few values;
* zoom_blur's sum (:func:`clipped_zoom_sum`, factors 1 to 1.31, all in one numba call):
  the corners are read straight from the image along "joint runs", stretches of output
  values whose two source columns both advance by one. At these factors a run is long
  (a column repeats every 4 to 100), the loop over it vectorises, and the gather pass
  is not needed: 1.8x faster at 32 px, 1.2x at 64 and 224 px, the same at 299 px.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from robustlab.shifts.corruptions._scratch import scratch


@functools.lru_cache(maxsize=1024)
def _axis_table(n: int, zoom_factor: float):
    """Source lines and weights for the ``n`` output lines kept along one axis.

    Returns ``(i0, i1, w0, w1, inside)``: the two source lines of each output line (as
    indices into the full axis, crop offset included), their double weights, and whether
    scipy treats the line as inside the image (outside lines are 0). Read-only arrays,
    cached: zoom_blur asks for the same few (side, factor) tables for every image, and
    building one took about as long as a third of a zoom.
    """
    crop = int(np.ceil(n / float(zoom_factor)))
    top = (n - crop) // 2
    out_len = int(round(crop * zoom_factor))  # scipy: int(round(in_len * zoom))
    trim = (out_len - n) // 2
    step = (crop - 1) / (out_len - 1) if out_len > 1 else 1.0
    k = np.arange(trim, trim + n, dtype=np.float64)
    cc = k * step
    inside = cc <= crop - 1
    start = np.floor(cc)
    w0 = 1.0 - (cc - start)
    w1 = 1.0 - w0
    s = start.astype(np.int64)
    i0 = np.clip(s, 0, crop - 1) + top
    i1 = np.clip(s + 1, 0, crop - 1) + top  # only clipped where its weight is 0
    for a in (i0, i1, w0, w1, inside):
        a.setflags(write=False)
    return i0, i1, w0, w1, inside


def _runs(*offsets: np.ndarray) -> np.ndarray:
    """Stretches where every one of ``offsets`` (equally long source offsets) advances by
    one: rows ``(start, each array's source start, length)``.

    A zoom by a factor >= 1 repeats a source column now and then and otherwise walks
    the row in order, so the gather ``row[idx]`` is a few contiguous copies: about 4 to
    100 pixels each for the factors zoom_blur uses.
    """
    cut = np.flatnonzero(np.any([np.diff(g) != 1 for g in offsets], axis=0)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [len(offsets[0])]])
    return np.stack([starts, *(g[starts] for g in offsets), ends - starts], 1).astype(np.int64)


def _expanded(n: int, zoom_factor: float, channels: int):
    """:func:`_axis_table` of the columns, expanded to ``n * channels`` interleaved values:
    ``(g0, g1, w0, w1, kept)``, the source offsets ``col * channels + channel`` of the two
    corners of each value, their weights, and how many values are inside (a prefix: the
    positions grow along the axis, so only trailing columns can fall outside)."""
    c0, c1, w0, w1, inside = _axis_table(n, zoom_factor)
    kept = int(inside.sum())
    if not inside[:kept].all():  # cannot happen: cc grows with k
        raise RuntimeError(f"zoom: the inside columns of ({n}, {zoom_factor}) are not a prefix")
    chan = np.arange(channels)
    g0 = (c0[:, None] * channels + chan).ravel()
    g1 = (c1[:, None] * channels + chan).ravel()
    return g0, g1, np.repeat(w0, channels), np.repeat(w1, channels), kept * channels


@functools.lru_cache(maxsize=1024)
def _column_table(n: int, zoom_factor: float, channels: int):
    """:func:`_expanded` with each corner's offsets as :func:`_runs`: ``(runs0, runs1, w0,
    w1, kept)``, read-only (the single zoom's gather)."""
    g0, g1, w0, w1, kept = _expanded(n, zoom_factor, channels)
    out = (_runs(g0), _runs(g1), w0, w1)
    for a in out:
        a.setflags(write=False)
    return (*out, kept)


@njit(cache=True, nogil=True)
def _gather_runs(src, dst, runs):
    """``dst[k] = src[idx[k]]`` with ``idx`` given as :func:`_runs` (contiguous copies).

    Unsigned offsets: numba checks a signed index for wrap-around on every access, which
    kept these copies scalar and made them slower than the per-value gather they replace.
    """
    for q in range(runs.shape[0]):
        k0 = np.uint64(runs[q, 0])
        p0 = np.uint64(runs[q, 1])
        for t in range(np.uint64(runs[q, 2])):
            dst[k0 + t] = src[p0 + t]


@njit(cache=True, nogil=True)
def _zoom_rows(img, out, ga, gb, r0, r1, rw0, rw1, rin, runs0, runs1, gw0, gw1, kept):
    """Write the zoomed image into ``out``.

    ``img`` and ``out`` are (H, W*C) views; the column tables are expanded to W*C values
    (source offsets ``col*C + channel``, as runs), the first ``kept`` of them inside.
    First every source row in use is gathered into column order, ``ga[r, k] = img[r,
    g0[k]]`` and ``gb[r, k] = img[r, g1[k]]`` (once per source row, not once per output
    row, in contiguous runs), so the sums below read memory in order and vectorise. Each
    value is then scipy's ``(a0*wr0)*wc0 + (a1*wr0)*wc1 + (b0*wr1)*wc0 + (b1*wr1)*wc1``
    in double, left to right, stored in ``out``'s dtype. Outside rows and columns are 0.
    """
    h = out.shape[0]
    n = out.shape[1]
    for r in range(r0[0], r1[h - 1] + 1):
        _gather_runs(img[r], ga[r], runs0)
        _gather_runs(img[r], gb[r], runs1)
    for i in range(h):
        orow = out[i]
        if not rin[i]:
            orow[:] = 0
            continue
        wa = rw0[i]
        wb = rw1[i]
        a0 = ga[r0[i]]
        a1 = gb[r0[i]]
        b0 = ga[r1[i]]
        b1 = gb[r1[i]]
        for k in range(kept):
            x0 = gw0[k]
            x1 = gw1[k]
            orow[k] = (
                (np.float64(a0[k]) * wa) * x0
                + (np.float64(a1[k]) * wa) * x1
                + (np.float64(b0[k]) * wb) * x0
                + (np.float64(b1[k]) * wb) * x1
            )
        for k in range(kept, n):
            orow[k] = 0


@njit(cache=True, nogil=True)
def _zoom_sum_rows(img, out, line, identity, r0, r1, rw0, rw1, rin, runs, nruns, gw0, gw1):
    """``out += zoom_f(img)`` for every factor ``f`` in order, in one call.

    ``img`` and ``out`` are (H, W*C) views. Per factor (one row of each stacked table):
    the row tables of :func:`_axis_table`, the column weights expanded to W*C values and
    the first ``nruns[f]`` joint runs of both corners (:func:`_runs`: output start, start
    of each corner's source columns, length; they cover the inside values only, so
    outside columns and rows add nothing). Each value is scipy's sum (see :func:`_zoom_rows`)
    stored in ``out``'s dtype (``line``, a buffer of that dtype, does the rounding) and
    then added to ``out`` in that dtype, exactly like ``out += clipped_zoom(img, f)``. An
    ``identity`` factor (1.0) adds ``img`` itself, as numpy's ``out += img`` does.
    Offsets are unsigned: numba checks a signed index for wrap-around on every access,
    which keeps a loop scalar.
    """
    h = out.shape[0]
    for f in range(identity.shape[0]):
        if identity[f]:
            for i in range(h):
                orow = out[i]
                irow = img[i]
                for k in range(orow.shape[0]):
                    orow[k] += irow[k]
            continue
        fruns = runs[f]
        x0s = gw0[f]
        x1s = gw1[f]
        for i in range(h):
            if not rin[f, i]:
                continue
            wa = rw0[f, i]
            wb = rw1[f, i]
            ra = img[r0[f, i]]
            rb = img[r1[f, i]]
            orow = out[i]
            for q in range(nruns[f]):
                k0 = np.uint64(fruns[q, 0])
                p0 = np.uint64(fruns[q, 1])
                p1 = np.uint64(fruns[q, 2])
                for t in range(np.uint64(fruns[q, 3])):
                    k = k0 + t
                    x0 = x0s[k]
                    x1 = x1s[k]
                    line[k] = (
                        (np.float64(ra[p0 + t]) * wa) * x0
                        + (np.float64(ra[p1 + t]) * wa) * x1
                        + (np.float64(rb[p0 + t]) * wb) * x0
                        + (np.float64(rb[p1 + t]) * wb) * x1
                    )
                    orow[k] += line[k]


@functools.lru_cache(maxsize=64)
def _sum_tables(h: int, w: int, channels: int, factors: tuple[float, ...]):
    """What :func:`_zoom_sum_rows` needs for these factors, one row per factor: which
    are exactly 1 (the image itself, bit for bit: weights 1 and 0), the row tables, the
    joint runs of the inside values (padded to the longest list) and their count, and
    the column weights expanded to ``w * channels`` values."""
    rows = [_axis_table(h, z) for z in factors]
    runs, w0s, w1s = [], [], []
    for z in factors:
        g0, g1, w0, w1, kept = _expanded(w, z, channels)
        runs.append(_runs(g0[:kept], g1[:kept]) if kept else np.zeros((0, 4), np.int64))
        w0s.append(w0)
        w1s.append(w1)
    padded = np.zeros((len(factors), max(len(r) for r in runs), 4), np.int64)
    for f, r in enumerate(runs):
        padded[f, : len(r)] = r
    out = [np.array([z == 1.0 for z in factors])]
    out += [np.stack([r[i] for r in rows]) for i in range(5)]
    out += [padded, np.array([len(r) for r in runs], np.int64), np.stack(w0s), np.stack(w1s)]
    for a in out:
        a.setflags(write=False)
    return tuple(out)


def _check(img: np.ndarray, zoom_factor: float) -> None:
    if img.ndim != 3 or img.dtype not in (np.float32, np.float64):
        raise ValueError(
            f"clipped_zoom needs an HxWxC float32/float64 array, got {img.dtype} {img.shape}"
        )
    if not zoom_factor >= 1.0:
        raise ValueError(f"clipped_zoom needs a zoom factor >= 1, got {zoom_factor!r}")


def clipped_zoom(img: np.ndarray, zoom_factor: float) -> np.ndarray:
    """Zoom ``img`` (HxWxC float) about its center by ``zoom_factor`` >= 1, same size out.

    Bit-identical to the reference's crop + ``scipy.ndimage.zoom(order=1)`` + trim on
    square images; non-square images are cropped, zoomed and trimmed per axis.
    """
    img = np.ascontiguousarray(img)
    _check(img, zoom_factor)
    out = np.empty_like(img)
    h, w, ch = img.shape
    shape = (h, w * ch)
    _zoom_rows(
        img.reshape(shape),
        out.reshape(shape),
        scratch(f"zoom.a.{img.dtype.char}", shape, img.dtype),
        scratch(f"zoom.b.{img.dtype.char}", shape, img.dtype),
        *_axis_table(h, float(zoom_factor)),
        *_column_table(w, float(zoom_factor), ch),
    )
    return out


def clipped_zoom_sum(img: np.ndarray, zoom_factors) -> np.ndarray:
    """``sum(clipped_zoom(img, z) for z in zoom_factors)``, added in order in img's dtype.

    The same values as starting from zeros and doing ``out += clipped_zoom(img, z)``
    for each factor (zoom_blur's loop), without the temporary arrays. A tuple of Python
    floats is used as given (zoom_blur caches its tuples: converting 26 numpy floats and
    checking each took a tenth of a 32x32 zoom blur).
    """
    img = np.ascontiguousarray(img)
    factors = zoom_factors if type(zoom_factors) is tuple else tuple(map(float, zoom_factors))
    _check(img, next((z for z in factors if not z >= 1.0), 1.0))  # the first bad factor, if any
    h, w, ch = img.shape
    shape = (h, w * ch)
    out = np.zeros_like(img)
    if not factors:
        return out
    _zoom_sum_rows(
        img.reshape(shape),
        out.reshape(shape),
        scratch(f"zoom.line.{img.dtype.char}", (w * ch,), img.dtype),
        *_sum_tables(h, w, ch, factors),
    )
    return out
