"""The numba HSV kernel behind brightness/saturate against scikit-image's round trip.

The reference computes ``hsv2rgb(adjust(rgb2hsv(x / 255.)))`` with scikit-image; our
kernel must give the same uint8 bytes for every colour, ties and greys included.
"""

from __future__ import annotations

import numpy as np
import pytest
from skimage.color import hsv2rgb, rgb2hsv

from robustlab.shifts.corruptions._hsv import hsv_adjust
from robustlab.shifts.registry import get_shift

PARAMS = [(1.0, 0.0, v) for v in get_shift("brightness").params.values()] + [
    (a, b, 0.0) for a, b in get_shift("saturate").params.values()
]


def _skimage(img, s_scale, s_shift, v_shift):
    hsv = rgb2hsv(img / 255.0)
    if v_shift:
        hsv[..., 2] = np.clip(hsv[..., 2] + v_shift, 0, 1)
    else:
        hsv[..., 1] = np.clip(hsv[..., 1] * s_scale + s_shift, 0, 1)
    return np.uint8(np.clip(hsv2rgb(hsv), 0, 1) * 255)


def _tricky_colours():
    """Greys, black, white, pure and tied hues, near-wrap hues (h close to 0 and 1)."""
    v = np.arange(256)
    rows = [np.stack([v, v, v], -1)]  # greys
    for a in (0, 1, 128, 254, 255):
        rows += [
            np.stack([np.full(256, 255), v, np.full(256, a)], -1),
            np.stack([np.full(256, 255), np.full(256, a), v], -1),  # h just below 1
            np.stack([v, np.full(256, 255), np.full(256, 255)], -1),  # g == b == max
            np.stack([np.full(256, 255), np.full(256, 255), v], -1),
        ]  # r == g == max
    return np.concatenate(rows).astype(np.uint8)[None]


@pytest.mark.parametrize("s_scale,s_shift,v_shift", PARAMS)
def test_matches_skimage_on_random_and_tricky_colours(s_scale, s_shift, v_shift):
    rng = np.random.default_rng(0)
    img = np.concatenate(
        [rng.integers(0, 256, size=(1, 60000, 3), dtype=np.uint8), _tricky_colours()], axis=1
    )
    np.testing.assert_array_equal(
        hsv_adjust(img, s_scale, s_shift, v_shift), _skimage(img, s_scale, s_shift, v_shift)
    )


@pytest.mark.slow
def test_matches_skimage_for_every_24bit_colour():
    g, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    for r in range(256):
        img = np.stack([np.full_like(g, r), g, b], -1).astype(np.uint8)
        for p in PARAMS:
            np.testing.assert_array_equal(
                hsv_adjust(img, *p), _skimage(img, *p), err_msg=f"r={r} {p}"
            )
