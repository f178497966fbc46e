"""fog: add a diamond-square plasma fractal, then rescale (ImageNet-C, weather family).

Reference: ``x = img / 255.``; ``m = x.max()``; ``x += c * plasma_fractal(256, decay)[:224,
:224, None]``; output ``clip(x * m / (m + c), 0, 1) * 255``, truncated to uint8.

The plasma fractal (diamond-square on a periodic ``size x size`` map, ``map[0, 0] = 0``,
``wibble`` starting at 100 and divided by ``decay`` after each level) draws, per level and
in this order, ``uniform(-wibble, wibble)`` arrays for the square centres, the diamond
points of the rows (``map[::s, s/2::s]``) and those of the columns (``map[s/2::s, ::s]``).
None of the draws depend on map values, so all levels are drawn first, with exactly the
reference's calls, and one numba loop then fills the map with the reference's
expressions: square centre ``((c00 + c10) + (c01 + c11)) / 4 + wibble * u``, row diamond
``((d + d_up) + (c + c_right)) / 4 + wibble * u``, column diamond ``((d + d_left) + (c +
c_down)) / 4 + wibble * u`` (neighbours wrap around, as with ``np.roll``), and finally
``(map - min) / max``. Same doubles, same order: the output is bit-identical to the
reference for ``RandomState`` seeds, and a ``Generator`` makes the same kind of draws.

Any size: the map is 256 for images up to 256 pixels on their longer side (so 224x224
reproduces the reference) and the next power of two above the longer side otherwise,
the common generalisation; the image takes the map's top-left corner.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit

from robustlab.shifts.corruptions._draws import random
from robustlab.shifts.registry import register_shift

_MIN_MAP = 256
_SCALE = np.arange(256) / 255.0


def map_size(h: int, w: int) -> int:
    """256, or the next power of two >= the longer side of larger images."""
    side = max(int(h), int(w))
    return max(_MIN_MAP, 1 << (side - 1).bit_length())


def levels(size: int, decay: float) -> list[tuple[int, float]]:
    """``(step, wibble)`` of each diamond-square level of a ``size`` map, coarsest first:
    the step halves from ``size`` down to 2 while the wibble, from 100, is divided by
    ``decay``."""
    out = []
    step, wibble = size, 100.0
    while step >= 2:
        out.append((step, wibble))
        step //= 2
        wibble /= decay
    return out


def draw(rng, size: int, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """The reference's uniform draws, level by level, and the wibble of each level.

    Returns:
        ``(u, wibbles)``: all draws concatenated (per level: square centres, row
        diamonds, column diamonds, each ``(n, n)`` in C order with ``n = size // step``,
        from ``uniform(-wibble, wibble)``), and the wibble of each level. The batched
        version replays them (:mod:`robustlab.shifts.batched.weather`).
    """
    # the reference's 3 draws per level follow each other with nothing in between, so
    # one array of raw uniforms, scaled per draw, holds the same values in the same
    # order (rng.uniform is low + (high - low) * u; see _draws)
    counts, wibbles = _plan(int(size), float(decay))
    u = random(rng, int(counts.sum()))
    _scale_levels(u, counts, wibbles)
    return u, wibbles


@functools.lru_cache(maxsize=64)
def _plan(size: int, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """Draws per level (``3 n^2``) and the wibbles of :func:`levels`, read-only, per map."""
    steps = levels(size, decay)
    counts = np.array([3 * (size // step) ** 2 for step, _ in steps], np.int64)
    wibbles = np.array([wibble for _, wibble in steps])
    for a in (counts, wibbles):
        a.setflags(write=False)
    return counts, wibbles


@njit(cache=True, nogil=True)
def _scale_levels(u, counts, wibbles):
    """``u = u * (w - -w) + -w`` per level's segment, in place: the two rounded double
    operations of ``uniform(-w, w)``, in one call instead of two numpy calls per level."""
    pos = 0
    for level in range(counts.shape[0]):
        w = wibbles[level]
        span = w - -w
        for i in range(pos, pos + counts[level]):
            u[i] = u[i] * span + -w
        pos += counts[level]


@njit(cache=True, nogil=True)
def _fill(size, u, wibbles):
    """Diamond-square with pre-drawn uniforms ``u``; returns the map scaled to [0, 1]."""
    m = np.empty((size, size), np.float64)
    m[0, 0] = 0.0
    pos = 0
    step = size
    level = 0
    while step >= 2:
        n = size // step
        half = step // 2
        wib = wibbles[level]
        # square centres: mean of the four corners (roll -1 on rows, then on columns)
        for i in range(n):
            i1 = (i + 1) % n
            for j in range(n):
                j1 = (j + 1) % n
                acc = (m[i * step, j * step] + m[i1 * step, j * step]) + (
                    m[i * step, j1 * step] + m[i1 * step, j1 * step]
                )
                m[i * step + half, j * step + half] = acc / 4 + wib * u[pos + i * n + j]
        pos += n * n
        # diamonds on the corner rows: centre above (roll +1 on rows) and corner right
        for i in range(n):
            iu = (i - 1) % n
            for j in range(n):
                j1 = (j + 1) % n
                acc = (
                    m[i * step + half, j * step + half] + m[iu * step + half, j * step + half]
                ) + (m[i * step, j * step] + m[i * step, j1 * step])
                m[i * step, j * step + half] = acc / 4 + wib * u[pos + i * n + j]
        pos += n * n
        # diamonds on the corner columns: centre to the left and corner below
        for i in range(n):
            i1 = (i + 1) % n
            for j in range(n):
                jl = (j - 1) % n
                acc = (
                    m[i * step + half, j * step + half] + m[i * step + half, jl * step + half]
                ) + (m[i * step, j * step] + m[i1 * step, j * step])
                m[i * step + half, j * step] = acc / 4 + wib * u[pos + i * n + j]
        pos += n * n
        step //= 2
        level += 1
    m -= m.min()
    return m / m.max()


def plasma_fractal(size: int, decay: float, rng) -> np.ndarray:
    """A ``size x size`` (power of two) plasma fractal in [0, 1], drawn from ``rng``."""
    if size < 2 or size & (size - 1):
        raise ValueError(f"plasma map size must be a power of two >= 2, got {size}")
    u, wibbles = draw(rng, size, decay)
    return _fill(size, u, wibbles)


@njit(cache=True, nogil=True)
def _apply(x, plasma, c, levels, out):
    """``uint8(clip((x/255 + c*p) * m / (m + c), 0, 1) * 255)`` with m = max(x/255)."""
    h, w, ch = x.shape
    top = 0
    for i in range(h):
        for j in range(w):
            for k in range(ch):
                if x[i, j, k] > top:
                    top = x[i, j, k]
    mx = levels[top]
    den = mx + c
    for i in range(h):
        for j in range(w):
            add = c * plasma[i, j]
            for k in range(ch):
                v = (levels[x[i, j, k]] + add) * mx / den
                v = min(max(v, 0.0), 1.0) * 255
                out[i, j, k] = np.uint8(v)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(0.2, 3, 32), (0.5, 3, 32), (0.75, 2.5, 32), (1, 2, 32), (1.5, 1.75, 32)]
_64PX = [(0.4, 3, 64), (0.7, 3, 64), (1, 2.5, 64), (1.5, 2, 64), (2, 1.75, 64)]
_299PX = [(1.5, 2, 512), (2, 2, 512), (2.5, 1.8, 512), (2.5, 1.6, 512), (3, 1.5, 512)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "fog",
    monotone=True,
    family="weather",
    # (fog strength c, wibble decay of the plasma fractal)
    params={1: (1.5, 2.0), 2: (2.0, 2.0), 3: (2.5, 1.7), 4: (2.5, 1.5), 5: (3.0, 1.4)},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def fog(x, params, rng, ctx):
    """Fog: a plasma fractal added with strength c, then rescaled to keep the maximum.

    ``params`` is ``(c, decay)``, or ``(c, decay, size)`` where a preset's generator fixes
    the map size (``plasma_fractal(mapsize=32)`` in make_cifar_c.py): the draws depend on
    it, so it is a parameter of the table, not derived from the image. An image larger
    than that map gets the next power of two above its longer side, as without one.
    """
    c, decay = params[:2]
    x = np.asarray(x)
    h, w = x.shape[:2]
    size = map_size(h, w)
    if len(params) > 2 and int(params[2]) >= max(h, w):
        size = int(params[2])
    plasma = plasma_fractal(size, decay, rng)
    out = np.empty(x.shape, np.uint8)
    _apply(x, plasma, float(c), _SCALE, out)
    return out
