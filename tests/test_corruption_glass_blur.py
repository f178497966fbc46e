"""glass_blur: the numba shuffle against the reference's loop, on sizes the fixtures lack.

The fidelity suite checks 224x224 outputs byte for byte. Here the reference algorithm is
written out plainly (one ``randint`` call per pixel, the tuple "swap" on numpy rows with its
view aliasing, scipy's gaussian_filter as scikit-image calls it) and compared on
non-square images, and the draw-stream assumption behind the vectorised draw is checked.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter

import robustlab

PARAMS = {1: (0.7, 1, 2), 2: (0.9, 2, 1), 3: (1, 2, 3), 4: (1.1, 3, 2), 5: (1.5, 4, 2)}


def _skimage_gaussian(img, sigma):
    # skimage.filters.gaussian(img, sigma, channel_axis=-1) on float input
    return gaussian_filter(img, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)


def _reference_loop(x, severity, rs):
    sigma, delta, iterations = PARAMS[severity]
    h_max, w_max = x.shape[:2]
    x = np.uint8(_skimage_gaussian(x / 255.0, sigma) * 255)
    for _ in range(iterations):
        for h in range(h_max - delta, delta, -1):
            for w in range(w_max - delta, delta, -1):
                dx, dy = rs.randint(-delta, delta, size=(2,))
                hp, wp = h + dy, w + dx
                x[h, w], x[hp, wp] = x[hp, wp], x[h, w]  # views: really a copy
    return np.clip(_skimage_gaussian(x / 255.0, sigma), 0, 1) * 255


@pytest.mark.parametrize("severity,shape", [(1, (41, 67)), (3, (60, 45)), (5, (33, 90))])
def test_matches_plain_reference_loop_on_other_sizes(photo, severity, shape):
    x = photo[: shape[0], : shape[1]].copy()
    ref = np.uint8(_reference_loop(x, severity, np.random.RandomState(42)))
    out = robustlab.corrupt(x, "glass_blur", severity, seed=np.random.RandomState(42))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("delta", [1, 2, 3, 4])
def test_one_vectorised_draw_equals_per_pixel_draws(delta):
    a = np.random.RandomState(7)
    per_pixel = np.array([a.randint(-delta, delta, size=(2,)) for _ in range(500)])
    b = np.random.RandomState(7)
    at_once = b.randint(-delta, delta, size=(500, 2))
    np.testing.assert_array_equal(per_pixel, at_once)
    assert a.randint(2**31) == b.randint(2**31), "streams must be left in the same state"


@pytest.mark.parametrize("severity", [1, 5])
def test_generator_path_is_as_strong_as_legacy(photo, severity):
    """Generators draw the same kind of offsets: the change is as large as in legacy mode."""
    x = photo.astype(int)
    gen = [robustlab.corrupt(photo, "glass_blur", severity, seed=k) for k in (1, 2)]
    assert not np.array_equal(gen[0], gen[1])
    legacy = robustlab.corrupt(photo, "glass_blur", severity, seed=np.random.RandomState(1))
    d_gen = np.abs(gen[0].astype(int) - x).mean()
    d_legacy = np.abs(legacy.astype(int) - x).mean()
    assert abs(d_gen - d_legacy) < 0.1 * d_legacy, (d_gen, d_legacy)
