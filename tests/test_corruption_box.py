"""pixelate's BOX resize (robustlab.shifts.corruptions._box) against Pillow's, byte for byte.

Sizes: every side and scale that pixelate's tables give at the presets' and ImageNet-C's
sizes (down and back up), odd non-square images, enlargements and reductions by large and
non-integer factors, and the identity; real photos and random noise (every value on
both sides of every rounding).
"""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robustlab.shifts.corruptions._box import box_resize
from robustlab.shifts.registry import get_shift


def _pillow(x: np.ndarray, width: int, height: int) -> np.ndarray:
    return np.asarray(Image.fromarray(x).resize((width, height), Image.BOX))


def _scales() -> list[float]:
    shift = get_shift("pixelate")
    return sorted({float(c) for t in [shift.params, *shift.presets.values()] for c in t.values()})


@pytest.mark.parametrize("side", [32, 64, 224, 299])
def test_pixelates_sizes_equal_pillows(side, photo):
    rng = np.random.default_rng(side)
    real = np.asarray(Image.fromarray(photo).resize((side, side), Image.BILINEAR))
    noise = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
    for x in (real, noise):
        for c in _scales():
            small = int(side * c)
            down = box_resize(x, small, small)
            assert np.array_equal(down, _pillow(x, small, small)), (side, c)
            assert np.array_equal(box_resize(down, side, side), _pillow(down, side, side))


@pytest.mark.parametrize(
    "shape,size",
    [
        ((37, 53, 3), (11, 29)),
        ((53, 37, 3), (53, 36)),
        ((37, 53, 3), (100, 7)),
        ((5, 300, 3), (299, 5)),
        ((300, 5, 3), (1, 1)),
        ((31, 31, 3), (31, 31)),
        ((17, 23, 1), (40, 9)),
        ((64, 64, 3), (21, 43)),
    ],
)
def test_any_shape_and_size_equal_pillows(shape, size):
    x = np.random.default_rng(sum(shape) + sum(size)).integers(0, 256, shape, dtype=np.uint8)
    # one channel as Pillow's "L" image (RGBA is not compared: Pillow premultiplies alpha)
    ref = np.asarray(Image.fromarray(x[..., 0] if shape[2] == 1 else x).resize(size, Image.BOX))
    assert np.array_equal(box_resize(x, *size), ref.reshape(size[1], size[0], shape[2]))
