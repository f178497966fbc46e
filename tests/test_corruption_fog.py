"""fog's plasma fractal against a plain numpy transcription of the reference algorithm."""

from __future__ import annotations

import numpy as np
import pytest

import robustlab
from robustlab.shifts.corruptions.fog import map_size, plasma_fractal


def numpy_plasma(size, decay, rs):
    """Diamond-square exactly as the reference writes it: np.roll and strided slices."""
    m = np.empty((size, size))
    m[0, 0] = 0
    step, wibble = size, 100.0

    def wibbled(a):
        return a / 4 + wibble * rs.uniform(-wibble, wibble, a.shape)

    while step >= 2:
        h = step // 2
        corners = m[0:size:step, 0:size:step]
        sq = corners + np.roll(corners, -1, axis=0)
        sq += np.roll(sq, -1, axis=1)
        m[h:size:step, h:size:step] = wibbled(sq)
        dr = m[h:size:step, h:size:step]
        ul = m[0:size:step, 0:size:step]
        m[0:size:step, h:size:step] = wibbled(
            (dr + np.roll(dr, 1, axis=0)) + (ul + np.roll(ul, -1, axis=1))
        )
        m[h:size:step, 0:size:step] = wibbled(
            (dr + np.roll(dr, 1, axis=1)) + (ul + np.roll(ul, -1, axis=0))
        )
        step //= 2
        wibble /= decay
    m -= m.min()
    return m / m.max()


@pytest.mark.parametrize("size,decay", [(256, 2.0), (256, 1.4), (32, 1.7), (512, 1.5)])
def test_plasma_matches_numpy_transcription(size, decay):
    ours = plasma_fractal(size, decay, np.random.RandomState(size + int(decay * 10)))
    ref = numpy_plasma(size, decay, np.random.RandomState(size + int(decay * 10)))
    np.testing.assert_array_equal(ours, ref)
    assert ours.min() == 0 and ours.max() == 1


def test_generator_draws_the_same_way():
    # same algorithm, Generator stream: uniform(-w, w) arrays level by level
    ours = plasma_fractal(64, 2.0, np.random.default_rng(3))
    assert ours.shape == (64, 64) and ours.min() == 0 and ours.max() == 1
    np.testing.assert_array_equal(ours, plasma_fractal(64, 2.0, np.random.default_rng(3)))


@pytest.mark.parametrize(
    "h,w,size",
    [
        (32, 32, 256),
        (224, 224, 256),
        (256, 100, 256),
        (257, 10, 512),
        (300, 600, 1024),
        (1024, 1024, 1024),
    ],
)
def test_map_size(h, w, size):
    assert map_size(h, w) == size


def test_bad_map_size():
    with pytest.raises(ValueError, match="power of two"):
        plasma_fractal(300, 2.0, np.random.default_rng(0))


def test_large_non_square_image(photo):
    big = np.ascontiguousarray(np.tile(photo, (2, 3, 1))[:400, :650])  # map 1024
    out = robustlab.corrupt(big, "fog", 3, seed=5)
    assert out.shape == big.shape
    # fog compresses the image's own contrast (x * m / (m + c)) but leaves it visible
    assert out.astype(float).std() < big.astype(float).std()
    assert np.corrcoef(out.astype(float).ravel(), big.astype(float).ravel())[0, 1] > 0.2
