"""clipped_zoom against scipy.ndimage.zoom(order=1), the reference's implementation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import zoom as scipy_zoom

from robustlab.shifts.corruptions._zoom import clipped_zoom, clipped_zoom_sum

# every factor zoom_blur uses, plus snow's
FACTORS = sorted(
    {
        float(z)
        for stop, step in [(1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03)]
        for z in np.arange(1, stop, step)
    }
    | {2.0, 2.5, 3.0, 4.0, 4.5}
)


def scipy_clipped_zoom(img, z):
    """The reference's crop / zoom / trim, applied per axis."""
    h, w = img.shape[:2]
    ch, cw = int(np.ceil(h / z)), int(np.ceil(w / z))
    top, left = (h - ch) // 2, (w - cw) // 2
    out = scipy_zoom(img[top : top + ch, left : left + cw], (z, z, 1), order=1)
    t, lft = (out.shape[0] - h) // 2, (out.shape[1] - w) // 2
    return out[t : t + h, lft : lft + w]


@pytest.mark.parametrize(
    "shape", [(224, 224, 3), (224, 224, 1), (36, 61, 3), (139, 160, 1), (33, 512, 3)]
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bit_identical_to_scipy(shape, dtype):
    img = np.random.default_rng(sum(shape)).random(shape).astype(dtype)
    for z in FACTORS:
        ours = clipped_zoom(img, z)
        ref = scipy_clipped_zoom(img, z)
        assert ours.dtype == ref.dtype and ours.shape == img.shape
        np.testing.assert_array_equal(ours, ref, err_msg=f"zoom {z}")


def test_last_line_outside_is_zero_like_scipy():
    # side 139 at arange's 1.16: scipy maps the last kept line a hair past the input and
    # fills it with 0 (mode 'constant'); the reference's output has that black line too
    z = np.arange(1, 1.31, 0.02)[8]
    img = np.ones((139, 139, 3), np.float32)
    ours = clipped_zoom(img, z)
    np.testing.assert_array_equal(ours, scipy_clipped_zoom(img, z))
    assert (ours[-1] == 0).all() and (ours[:-1, :-1] == 1).all()


@pytest.mark.parametrize("shape", [(64, 80, 3), (139, 139, 3), (50, 37, 1)])
@pytest.mark.parametrize(
    "stop,step", [(1.11, 0.01), (1.16, 0.01), (1.21, 0.02), (1.26, 0.02), (1.31, 0.03)]
)
def test_sum_matches_sequential_float32_adds(shape, stop, step):
    # every factor list of zoom_blur through the one-call sum (stacked tables, joint runs
    # read straight from the image), on sizes with and without a last line outside the image
    img = np.random.default_rng(sum(shape)).random(shape).astype(np.float32)
    factors = np.arange(1, stop, step)
    expected = np.zeros_like(img)
    for z in factors:
        expected += scipy_clipped_zoom(img, z)
    np.testing.assert_array_equal(clipped_zoom_sum(img, factors), expected)
    # the work arrays are reused between calls: a second call gives the same bytes
    np.testing.assert_array_equal(clipped_zoom_sum(img, factors), expected)


@pytest.mark.parametrize(
    "img,z",
    [
        (np.zeros((8, 8, 3), np.uint8), 1.1),
        (np.zeros((8, 8), np.float32), 1.1),
        (np.zeros((8, 8, 3), np.float32), 0.9),
    ],
)
def test_bad_input_raises(img, z):
    with pytest.raises(ValueError, match="clipped_zoom"):
        clipped_zoom(img, z)
