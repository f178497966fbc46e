"""elastic_transform: random affine warp, then a smooth random displacement field.

ImageNet-C, digital family. Reference (imagenet-c 0.0.3), with ``(alpha, sigma, affine)``
= 244 x the table below (244 is a typo for 224 in the original, kept because it defines
the benchmark):

1. ``img = float32(x) / 255``; in (row, col) terms ``center = float32((H, W)) // 2``,
   ``s = min(H, W) // 3``; ``pts1 = float32([center + s, [c0 + s, c1 - s], center - s])``,
   ``pts2 = pts1 + uniform(-affine, affine, (3, 2)).astype(float32)``;
   ``img = cv2.warpAffine(img, cv2.getAffineTransform(pts1, pts2), (W, H),
   borderMode=BORDER_REFLECT_101)`` (bilinear).
2. ``dx = float32(gaussian(uniform(-1, 1, (H, W)), sigma, mode='reflect', truncate=3) *
   alpha)``, then ``dy`` the same way (dx is drawn first).
3. ``map_coordinates(img, (row + dy, col + dx, channel), order=1, mode='reflect')``,
   ``clip(., 0, 1) * 255`` in float32, truncated to uint8.

Exactness (bit-identical to the reference for ``RandomState`` seeds, fixtures checked):

* ``cv2.getAffineTransform`` gives the same matrix in every OpenCV version, so it is used
  as is. ``cv2.warpAffine`` is not: OpenCV 4.11+ interpolates floats differently from
  the 3.4 the reference ran (differences up to 0.02). :func:`_warp_affine` repeats 3.4's
  algorithm: the inverse matrix in double, source positions in fixed point (1/1024,
  rounded to 1/32 pixel, ``cvRound`` half-to-even), 32x32 table of float32 bilinear
  weights, reflect-101 border, float32 sum ``((v00*w0 + v01*w1) + v10*w2) + v11*w3``.
* ``gaussian`` (scikit-image -> scipy.ndimage): one symmetric 1-D correlation per axis
  (rows, then columns) in double, ``x[i]*w0`` plus ``(x[i-k] + x[i+k])*w_k`` for k from
  the radius down to 1, with the line extended by repeated reflection
  (``d c b a | a b c d | d c b a``) since at severity 1 the kernel (radius 513) is longer
  than the image. scipy >= 1.13 sums in another order; this follows scipy 1.11.
  With a ``Generator`` (no reference stream to follow) large kernels go through the DCT
  instead (:func:`gaussian_reflect_dct`, same filter, ~1e-16 apart, much cheaper).
* ``map_coordinates(order=1, mode='reflect')``: scipy's boundary mapping of the
  coordinate, weights ``w0 = 1 - frac``, ``w1 = 1 - w0``, and the sum over the corners in
  C order; the channel coordinate is an integer, so only four corners count.

All randomness comes from :func:`draw` (jitter, then the raw x and y fields), which the
batched version's replay also calls, so the two paths share one draw order.

Any size: everything above already follows the image's shape except that the reference
passes (row, col) points to OpenCV, which takes (x, y); here the triangle is centred on
(x, y) = (W // 2, H // 2), which is the same on square images and keeps the warp
centred on the image otherwise. The displacement parameters stay in pixels, as in the
reference (and as every other corruption's pixel parameters: blur radii, glass blur
offsets), so a larger image gets a proportionally finer warp.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np
from numba import njit

from robustlab.seeding import is_legacy
from robustlab.shifts.corruptions._draws import uniform
from robustlab.shifts.corruptions._gauss import gaussian_weights
from robustlab.shifts.corruptions._scratch import scratch
from robustlab.shifts.registry import register_shift

_K = 244  # the reference's scale of the table (a typo for 224 that defines the benchmark)
_F32_SCALE = np.arange(256, dtype=np.float32) / np.float32(255)

# OpenCV 3.4 warpAffine constants (imgproc/imgwarp.cpp): INTER_BITS = 5, AB_BITS = 10.
_INTER_BITS = 5
_INTER_TAB = 1 << _INTER_BITS
_AB_BITS = 10
_ROUND_DELTA = (1 << _AB_BITS) // _INTER_TAB // 2


def _bilinear_table() -> np.ndarray:
    """OpenCV's float bilinear weights, indexed by ``fy * 32 + fx``: (1024, 4) float32."""
    f = np.arange(_INTER_TAB, dtype=np.float32) * np.float32(1.0 / _INTER_TAB)
    one = np.float32(1.0)
    ty = np.stack([one - f, f], 1)  # (32, 2)
    tab = (ty[:, None, :, None] * ty[None, :, None, :]).astype(np.float32)  # fy, fx, ky, kx
    return tab.reshape(_INTER_TAB * _INTER_TAB, 4)


_WTAB = _bilinear_table()


@njit(cache=True, nogil=True)
def _reflect101(p, n):
    """OpenCV ``borderInterpolate(p, n, BORDER_REFLECT_101)``."""
    if n == 1:
        return 0
    while p < 0 or p >= n:
        if p < 0:
            p = -p
        else:
            p = 2 * n - 2 - p
    return p


@njit(cache=True, nogil=True)
def _warp_affine(src, levels, m, wtab, out):
    """OpenCV 3.4 ``warpAffine(levels[src], m, INTER_LINEAR, BORDER_REFLECT_101)``, float32.

    ``src`` is the uint8 image and ``levels[v]`` its float32 value ``v / 255``, so the
    float image is never materialised.
    """
    h, w, ch = src.shape
    # the inverse map, as warpAffine computes it when WARP_INVERSE_MAP is not set
    d = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    d = 1.0 / d if d != 0 else 0.0
    a11 = m[1, 1] * d
    a22 = m[0, 0] * d
    m0 = a11
    m1 = m[0, 1] * -d
    m3 = m[1, 0] * -d
    m4 = a22
    m2 = -m0 * m[0, 2] - m1 * m[1, 2]
    m5 = -m3 * m[0, 2] - m4 * m[1, 2]
    scale = float(1 << 10)
    adelta = np.empty(w, np.int64)
    bdelta = np.empty(w, np.int64)
    for x in range(w):
        adelta[x] = np.int64(np.rint(m0 * x * scale))
        bdelta[x] = np.int64(np.rint(m3 * x * scale))
    for y in range(h):
        x0 = np.int64(np.rint((m1 * y + m2) * scale)) + 16
        y0 = np.int64(np.rint((m4 * y + m5) * scale)) + 16
        for x in range(w):
            xx = (x0 + adelta[x]) >> 5
            yy = (y0 + bdelta[x]) >> 5
            sx = xx >> 5
            sy = yy >> 5
            wt = wtab[(yy & 31) * 32 + (xx & 31)]
            c0 = _reflect101(sx, w)
            c1 = _reflect101(sx + 1, w)
            r0 = _reflect101(sy, h)
            r1 = _reflect101(sy + 1, h)
            for k in range(ch):
                t = levels[src[r0, c0, k]] * wt[0] + levels[src[r0, c1, k]] * wt[1]
                t = t + levels[src[r1, c0, k]] * wt[2]
                t = t + levels[src[r1, c1, k]] * wt[3]
                out[y, x, k] = t


@njit(cache=True, nogil=True)
def _smooth_rows_reflect(src, dst, wts, scale):
    """Correlate each row with the symmetric kernel, scipy 1.11 order, 'reflect' border.

    Each result is stored as ``result * scale`` in ``dst``'s dtype: with ``scale`` 1.0
    and a float64 ``dst`` the filter itself; with the displacement's alpha and a
    float32 ``dst`` the reference's ``(gaussian(...) * alpha).astype(float32)`` in one
    pass (the same double product, rounded once to float32).
    """
    n_rows, n = src.shape
    r = (wts.shape[0] - 1) // 2
    period = 2 * n
    padded = np.empty(n + 2 * r, np.float64)
    acc = np.empty(n, np.float64)
    for i in range(n_rows):
        row = src[i]
        for p in range(n + 2 * r):
            q = (p - r) % period
            padded[p] = row[q] if q < n else row[period - 1 - q]
        c = wts[r]
        for j in range(n):
            acc[j] = padded[j + r] * c
        for d in range(r, 0, -1):
            c = wts[r - d]
            lo = padded[r - d : r - d + n]
            hi = padded[r + d : r + d + n]
            for j in range(n):
                acc[j] += (lo[j] + hi[j]) * c
        out = dst[i]
        for j in range(n):
            out[j] = acc[j] * scale


@njit(cache=True, nogil=True)
def _smooth_cols_reflect(src, dst, wts):
    """The same correlation along axis 0, vectorised across each row."""
    n, m = src.shape
    r = (wts.shape[0] - 1) // 2
    period = 2 * n
    acc = np.empty(m, np.float64)
    for i in range(n):
        c = wts[r]
        s0 = src[i]
        for j in range(m):
            acc[j] = s0[j] * c
        for d in range(r, 0, -1):
            c = wts[r - d]
            q = (i - d) % period
            lo = src[q] if q < n else src[period - 1 - q]
            q = (i + d) % period
            hi = src[q] if q < n else src[period - 1 - q]
            for j in range(m):
                acc[j] += (lo[j] + hi[j]) * c
        out = dst[i]
        for j in range(m):
            out[j] = acc[j]


def gaussian_reflect(field: np.ndarray, sigma: float, truncate: float = 3.0) -> np.ndarray:
    """``scipy.ndimage.gaussian_filter(field, sigma, mode='reflect', truncate=truncate)``.

    2-D float64, axis 0 first, then axis 1, with scipy 1.11's operation order (the cost
    grows with the radius: about 4x the time of the DCT route at severity 1).
    """
    return _gaussian_reflect_into(field, sigma, 1.0, np.empty(np.shape(field)), truncate)


def _gaussian_reflect_into(field, sigma: float, scale: float, out, truncate: float = 3.0):
    """:func:`gaussian_reflect` times ``scale``, stored in ``out`` (float32 or float64).

    A sigma of (nearly) zero filters nothing, as scipy skips such an axis: the small-image
    presets' severity 1 has sigma 0 and alpha 0 (a pure affine warp).
    """
    field = np.ascontiguousarray(field, dtype=np.float64)
    if sigma <= _NO_SMOOTHING:
        np.multiply(field, scale, out=out, casting="same_kind")
        return out
    wts = gaussian_weights(sigma, truncate)
    tmp = scratch("elastic.smooth", field.shape, np.float64)
    _smooth_cols_reflect(field, tmp, wts)  # axis 0
    _smooth_rows_reflect(tmp, out, wts, float(scale))  # axis 1
    return out


@functools.lru_cache(maxsize=16)
def _dct_response(n: int, sigma: float, truncate: float) -> np.ndarray:
    """The kernel's gain on the DCT-II basis of a length-``n`` half-sample-symmetric line."""
    wts = gaussian_weights(sigma, truncate)
    r = (len(wts) - 1) // 2
    k = np.arange(n)[:, None]
    d = np.arange(1, r + 1)[None, :]
    gain = wts[r] + 2 * (wts[r + 1 :][None, :] * np.cos(np.pi * k * d / n)).sum(1)
    gain.setflags(write=False)
    return gain


def gaussian_reflect_dct(field: np.ndarray, sigma: float, truncate: float = 3.0) -> np.ndarray:
    """The same filter through the DCT: 'reflect' is the DCT-II's symmetric extension.

    Exact in real arithmetic; in floating point it differs from the direct sums by about
    1e-16 (far below the float32 the displacements are stored in; no stored value changed
    in tests). Cost does not depend on the radius, which makes the large-sigma
    severities several times cheaper. Used for ``Generator`` seeds only, where there is
    no reference stream to reproduce.
    """
    from scipy import fft  # lazy: only this path needs it

    h, w = field.shape
    y = fft.dct(field, type=2, axis=0, norm="ortho")
    y *= _dct_response(h, float(sigma), float(truncate))[:, None]
    y = fft.dct(y, type=2, axis=1, norm="ortho")
    y *= _dct_response(w, float(sigma), float(truncate))[None, :]
    y = fft.idct(y, type=2, axis=1, norm="ortho")
    return fft.idct(y, type=2, axis=0, norm="ortho")


# scipy's gaussian_filter leaves an axis alone when its sigma is at most this.
_NO_SMOOTHING = 1e-15
# Above this kernel radius the DCT route can be cheaper than the direct sums.
_DCT_MIN_RADIUS = 16


def _dct_is_cheaper(h: int, w: int, radius: int) -> bool:
    """Whether the DCT route beats the direct sums for an ``h x w`` field: the sums cost
    about 1.4 ns per pixel and tap, the four transforms about 200 us of scipy's fixed cost
    plus 50 ns per pixel (measured on 32x32 and 64x64 fields). ImageNet-C's 224 px cells
    take the same route as before (radius 7: sums; 59 and 512: DCT); the small presets'
    (radius 6 to 19 at 32 px) take the sums."""
    return radius > _DCT_MIN_RADIUS and (2 * radius + 1 - 40) * h * w > 150_000


@njit(cache=True, nogil=True)
def _reflect_coord(v, n):
    """scipy ``map_coordinate(v, n, NI_EXTEND_REFLECT)`` (n > 1)."""
    sz2 = 2.0 * n
    if v < 0:
        if v < -sz2:
            v = sz2 * np.float64(np.int64(-v / sz2)) + v
        if v < -n:
            v = v + sz2
        else:
            v = (1e-15 if v > -1e-15 else -v) - 1
    elif v > n - 1:
        v -= sz2 * np.float64(np.int64(v / sz2))
        if v >= n:
            v = sz2 - v - 1
    return v


@njit(cache=True, nogil=True)
def _reflect_index(i, n):
    """The same mapping for an integer index (scipy's edge offsets)."""
    return np.int64(_reflect_coord(np.float64(i), n))


@njit(cache=True, nogil=True)
def _displace(img, dx, dy, out):
    """``uint8(clip(map_coordinates(img, (row+dy, col+dx, ch), order=1, 'reflect'), 0, 1) * 255)``.

    Row by row in three passes over the columns, so that the coordinate arithmetic
    runs vectorised apart from the gathers: the source positions (reflected only in
    rows that have one outside the image), then their floors, weights and corner
    indices, then the four-corner sums per channel. Each value goes through the same
    double operations in the same order as a per-pixel loop would (and as scipy does).
    """
    h, w, ch = img.shape
    one = np.float32(1.0)
    zero = np.float32(0.0)
    k255 = np.float32(255.0)
    last_row = np.float64(h - 1)
    last_col = np.float64(w - 1)
    cy = np.empty(w, np.float64)
    cx = np.empty(w, np.float64)
    wy0 = np.empty(w, np.float64)
    wy1 = np.empty(w, np.float64)
    wx0 = np.empty(w, np.float64)
    wx1 = np.empty(w, np.float64)
    y0 = np.empty(w, np.int64)
    y1 = np.empty(w, np.int64)
    x0 = np.empty(w, np.int64)
    x1 = np.empty(w, np.int64)
    for i in range(h):
        row = np.float64(i)
        dyr = dy[i]
        dxr = dx[i]
        outside = 0
        for j in range(w):
            a = row + np.float64(dyr[j])
            b = np.float64(j) + np.float64(dxr[j])
            cy[j] = a
            cx[j] = b
            outside += (a < 0.0) | (a > last_row) | (b < 0.0) | (b > last_col)
        if outside:  # _reflect_coord is the identity inside [0, n - 1]
            for j in range(w):
                cy[j] = _reflect_coord(cy[j], h)
                cx[j] = _reflect_coord(cx[j], w)
        for j in range(w):
            fy = np.floor(cy[j])
            fx = np.floor(cx[j])
            a = 1.0 - (cy[j] - fy)
            wy0[j] = a
            wy1[j] = 1.0 - a
            b = 1.0 - (cx[j] - fx)
            wx0[j] = b
            wx1[j] = 1.0 - b
            y0[j] = np.int64(fy)
            x0[j] = np.int64(fx)
            y1[j] = np.int64(fy) + 1
            x1[j] = np.int64(fx) + 1
        for j in range(w):
            if y0[j] < 0 or y1[j] >= h:
                y0[j] = _reflect_index(y0[j], h)
                y1[j] = _reflect_index(y1[j], h)
            if x0[j] < 0 or x1[j] >= w:
                x0[j] = _reflect_index(x0[j], w)
                x1[j] = _reflect_index(x1[j], w)
        orow = out[i]
        for j in range(w):
            # unsigned: spares numba's wrap-around test of a signed index on each read
            r0 = np.uint64(y0[j])
            r1 = np.uint64(y1[j])
            q0 = np.uint64(x0[j])
            q1 = np.uint64(x1[j])
            p00 = img[r0, q0]
            p01 = img[r0, q1]
            p10 = img[r1, q0]
            p11 = img[r1, q1]
            a0 = wy0[j]
            a1 = wy1[j]
            b0 = wx0[j]
            b1 = wx1[j]
            o = orow[j]
            for k in range(ch):
                t = (np.float64(p00[k]) * a0) * b0
                t += (np.float64(p01[k]) * a0) * b1
                t += (np.float64(p10[k]) * a1) * b0
                t += (np.float64(p11[k]) * a1) * b1
                v = np.float32(t)
                v = min(max(v, zero), one) * k255
                o[k] = np.uint8(v)


@functools.lru_cache(maxsize=64)
def affine_points(h: int, w: int) -> np.ndarray:
    """The reference's triangle (float32, OpenCV (x, y) order), centred on the image.

    Read-only, cached per size (building it is a dozen small numpy calls, about 5 us).
    """
    center = np.float32([w, h]) // 2
    s = min(h, w) // 3
    pts = np.float32([center + s, [center[0] + s, center[1] - s], center - s])
    pts.setflags(write=False)
    return pts


def draw(rng, h: int, w: int, affine: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All of the shift's randomness, in the reference's order.

    Returns:
        The triangle jitter (3, 2) float32 (OpenCV (x, y) order, added to
        :func:`affine_points`), then the raw fields of the x and the y displacement, each
        (h, w) float64 uniform on [-1, 1) before smoothing (x drawn first).
    """
    jitter = rng.uniform(-affine, affine, size=(3, 2)).astype(np.float32)
    field_x = uniform(rng, -1, 1, (h, w))  # rng.uniform's values, without its per-value call
    field_y = uniform(rng, -1, 1, (h, w))
    return jitter, field_x, field_y


def _scaled(k: float, table) -> list[tuple[float, float, float]]:
    """``(k * alpha, k * sigma, k * affine)`` per level, the products the scripts compute
    (``IMSIZE * 0.08``, ``360 * 0.1``), so the pixels parameters are the same doubles."""
    return [(k * a, k * s, k * f) for a, s, f in table]


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = _scaled(
    32, [(0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03)]
)
_64PX = _scaled(
    64, [(0, 0, 0.08), (0.05, 0.3, 0.06), (0.1, 0.08, 0.06), (0.1, 0.03, 0.03), (0.16, 0.03, 0.02)]
)
_299PX = _scaled(
    360, [(2, 0.7, 0.1), (2, 0.08, 0.2), (0.05, 0.01, 0.02), (0.07, 0.01, 0.02), (0.12, 0.01, 0.02)]
)
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "elastic_transform",
    family="digital",
    # (alpha, sigma, affine) in pixels: the reference's 244 x (2, .7, .1) ... (.12, .01, .02)
    params={
        1: (_K * 2, _K * 0.7, _K * 0.1),
        2: (_K * 2, _K * 0.08, _K * 0.2),
        3: (_K * 0.05, _K * 0.01, _K * 0.02),
        4: (_K * 0.07, _K * 0.01, _K * 0.02),
        5: (_K * 0.12, _K * 0.01, _K * 0.02),
    },
    tags=("imagenet-c",),
    presets=PRESETS,
)
def elastic_transform(x, params, rng, ctx):
    """Elastic: a random affine warp followed by a Gaussian-smoothed random displacement."""
    alpha, sigma, affine = params
    x = np.asarray(x)
    h, w = x.shape[:2]
    jitter, field_x, field_y = draw(rng, h, w, affine)
    pts1 = affine_points(h, w)
    warped = scratch("elastic.warped", x.shape, np.float32)
    _warp_affine(x, _F32_SCALE, cv2.getAffineTransform(pts1, pts1 + jitter), _WTAB, warped)
    if not is_legacy(rng) and _dct_is_cheaper(h, w, int(3.0 * sigma + 0.5)):
        dx = (gaussian_reflect_dct(field_x, sigma) * alpha).astype(np.float32)
        dy = (gaussian_reflect_dct(field_y, sigma) * alpha).astype(np.float32)
    else:
        dx = _gaussian_reflect_into(
            field_x, sigma, alpha, scratch("elastic.dx", (h, w), np.float32)
        )
        dy = _gaussian_reflect_into(
            field_y, sigma, alpha, scratch("elastic.dy", (h, w), np.float32)
        )
    out = np.empty(x.shape, np.uint8)
    _displace(warped, dx, dy, out)
    return out
