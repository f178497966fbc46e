"""shot_noise: Poisson (photon) noise (ImageNet-C, noise family).

Reference: ``poisson(x / 255 * c) / c`` clipped to [0, 1], times 255; a lower photon
count ``c`` means stronger noise.

Two paths, same distribution:

* ``RandomState`` (legacy mode): one ``rng.poisson`` over the HxWx3 array, the
  reference's only draw, so outputs match the reference bit for bit.
* ``Generator``: numpy's Poisson sampler costs ~60 ns per value (a log-gamma per draw
  for large means), which made this the slowest noise. But the mean takes only 256
  values (``v / 255 * c`` for uint8 ``v``) and every count ``k >= c`` clips to 255, so
  the output is the inverse CDF of one uniform per value: the smallest ``k < c`` with
  ``P(K <= k) > u``, else ``c``. The CDF table (256 x c, from ``scipy.special.pdtr``) is
  built once per severity. This is an exact Poisson sample (up to the double precision
  of the CDF), not an approximation of it.

  The lookup is a guide table (Chen & Asau's method): the uniform's bin
  ``g = floor(u * 256)`` (exact, 256 is a power of two) gives the smallest count whose
  CDF exceeds ``g / 256``, which is never past the answer, and a linear search walks up
  from there, usually zero or one step. It returns what a binary search over the row
  returns (the smallest ``k`` with ``cdf[k] > u``) but without its 6 unpredictable
  branches per value: 2.1 ms -> about 0.4 ms per 224x224 image.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import njit

from robustlab.seeding import is_legacy
from robustlab.shifts.registry import register_shift


_GUIDE_BINS = 256  # a power of two, so that u * _GUIDE_BINS and g / _GUIDE_BINS are exact


@cache
def tables(photons: int) -> tuple[np.ndarray, np.ndarray]:
    """(cdf, values): ``cdf[v, k] = P(Poisson(v / 255 * c) <= k)`` for ``k < c``, and
    ``values[k]``, the uint8 the reference produces for count ``k`` (``k = c`` for all
    larger counts, which clip to 255)."""
    from scipy.special import pdtr  # only the Generator path needs it

    lam = (np.arange(256) / 255.0) * photons
    cdf = pdtr(np.arange(photons)[None, :], lam[:, None])
    cdf.setflags(write=False)
    values = (np.clip(np.arange(photons + 1) / float(photons), 0, 1) * 255).astype(np.uint8)
    values.setflags(write=False)
    return cdf, values


@cache
def guide(photons: int) -> np.ndarray:
    """``guide[v, g]``: the smallest ``k`` with ``cdf[v, k] > g / 256`` (else ``c``).

    A lower bound of the answer for every ``u`` in bin ``g``; with a CDF that is not
    monotone (it is for every ``c`` used, checked here) the walk up from it could stop
    at another ``k`` than a search over the whole row would, so that is refused.
    uint8 while every count fits (``c`` <= 255: ImageNet-C's and the 64 px tables, a
    table a quarter of the L1 cache), uint16 above (CIFAR-10-C's 500 photons): counts
    wrapped modulo 256 were still lower bounds, so the samples were right, but the walk
    up from them took hundreds of steps (0.44 against 0.03 ms per 32x32 image).
    """
    cdf, _ = tables(photons)
    if not (np.diff(cdf, axis=1) >= 0).all():
        raise RuntimeError(f"shot_noise: the Poisson CDF table for c={photons} is not monotone")
    edges = np.arange(_GUIDE_BINS, dtype=np.float64) / _GUIDE_BINS
    dtype = np.uint8 if photons <= np.iinfo(np.uint8).max else np.uint16
    g = (cdf[:, None, :] <= edges[None, :, None]).sum(axis=2).astype(dtype)
    g.setflags(write=False)
    return g


@njit(cache=True, nogil=True)
def _inverse_cdf(flat, u, cdf, guide, values, out):
    """``out[i] = values[smallest k with cdf[flat[i], k] > u[i], else c]``."""
    # unsigned indices: numba tests a signed one for wrap-around on every access
    n_k = np.uint64(cdf.shape[1])
    bins = guide.shape[1]
    one = np.uint64(1)
    for i in range(flat.shape[0]):
        v = flat[i]
        x = u[i]
        k = np.uint64(guide[v, np.uint64(x * bins)])
        while k < n_k and cdf[v, k] <= x:
            k += one
        out[i] = values[k]
    return out


def draw(rng, n: int) -> np.ndarray:
    """The ``Generator`` path's draws: ``n`` uniforms on [0, 1) (float64), one per value
    of the HxWx3 array in C order, each turned into a count by the inverse CDF."""
    return rng.random(n)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [500, 250, 100, 75, 50]
_64PX = [250, 100, 50, 30, 15]
_299PX = [50, 20, 10, 5, 3]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "shot_noise",
    monotone=True,
    family="noise",
    params={1: 60, 2: 25, 3: 12, 4: 5, 5: 3},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def shot_noise(x, photons, rng, ctx):
    """Poisson noise with ``photons`` expected counts at full intensity."""
    if is_legacy(rng):
        x = np.asarray(x) / 255.0
        return np.clip(rng.poisson(x * photons) / float(photons), 0, 1) * 255
    x = np.ascontiguousarray(x, dtype=np.uint8)
    cdf, values = tables(int(photons))
    flat = x.reshape(-1)
    u = draw(rng, flat.shape[0])
    out = _inverse_cdf(flat, u, cdf, guide(int(photons)), values, np.empty_like(flat))
    return out.reshape(x.shape)
