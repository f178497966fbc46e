"""The ImageMagick-compatible motion blur in robustlab.shifts.corruptions._motion.

The fidelity suite compares motion_blur and snow with the reference outputs at 224x224;
these tests pin the kernel geometry, check the fast row loop against a plain per-tap
implementation of the same rules on other shapes and angles, and compare with values
ImageMagick itself produced.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from robustlab.shifts.corruptions._motion import (
    motion_blur_uint8,
    motion_kernel,
    optimal_kernel_width,
)


def _plain_blur(img, radius, sigma, angle):
    """Per-tap, clamped-index version: q16 = v * 257, double sums in tap order, Q16
    rounding, then ImageMagick's depth reduction to 8 bits (truncation)."""
    w, dx, dy = motion_kernel(radius, sigma, angle)
    src = img.astype(np.float64) * 257.0
    h, wd = img.shape[:2]
    acc = np.zeros_like(src)
    for t in range(len(w)):
        rows = np.clip(np.arange(h) + dy[t], 0, h - 1)
        cols = np.clip(np.arange(wd) + dx[t], 0, wd - 1)
        acc = acc + w[t] * src[rows][:, cols]
    q = np.where(acc <= 0, 0, np.where(acc >= 65535, 65535, np.floor(acc + 0.5)))
    return (q // 257).astype(np.uint8)


@pytest.mark.parametrize("radius,sigma", [(10, 3), (15, 5), (20, 15), (12, 8), (3.5, 0.7)])
def test_kernel_is_one_sided_normalised_gaussian(radius, sigma):
    w, _, _ = motion_kernel(radius, sigma, 0.0)
    assert len(w) == 2 * math.ceil(radius) + 1 == optimal_kernel_width(radius, sigma)
    assert abs(w.sum() - 1.0) < 1e-12
    assert np.all(np.diff(w) < 0), "weights must fall off away from the pixel itself"
    ratio = w[1:] / w[0]
    expected = np.exp(-(np.arange(1, len(w)) ** 2) / (2 * sigma**2))
    np.testing.assert_allclose(ratio, expected, rtol=1e-12)


def test_kernel_width_without_radius_follows_sigma():
    # radius 0: the width grows with sigma until the tail weight is below one Q16 step
    widths = [optimal_kernel_width(0, s) for s in (0.5, 1, 2, 4)]
    assert widths == sorted(widths) and widths[0] >= 3 and widths[-1] > widths[0]
    assert optimal_kernel_width(0, 0) == 3


@pytest.mark.parametrize(
    "angle,expect_dx,expect_dy",
    [
        (0.0, lambda i: i, lambda i: 0),
        (90.0, lambda i: 0, lambda i: i),
        (180.0, lambda i: -i, lambda i: 0),
        (-90.0, lambda i: 0, lambda i: -i),
        # 45 degrees: i / sqrt(2) rounded with ceil(v - 0.5); never an exact half
        (45.0, lambda i: round(i / math.sqrt(2)), lambda i: round(i / math.sqrt(2))),
    ],
)
def test_tap_offsets_follow_the_angle(angle, expect_dx, expect_dy):
    _, dx, dy = motion_kernel(15, 5, angle)
    idx = range(len(dx))
    assert list(dx) == [expect_dx(i) for i in idx]
    assert list(dy) == [expect_dy(i) for i in idx]


@pytest.mark.parametrize("angle", [-135.0, -100.3, -45.0, -12.7, 0.0, 33.3, 90.0, 171.0])
def test_fast_loop_matches_plain_version(photo, angle):
    rgb = photo[:150, :97].copy()
    np.testing.assert_array_equal(
        motion_blur_uint8(rgb, 15, 5, angle), _plain_blur(rgb, 15, 5, angle)
    )
    grey = np.ascontiguousarray(photo[40:80, :, 1])
    np.testing.assert_array_equal(
        motion_blur_uint8(grey, 12, 8, angle), _plain_blur(grey, 12, 8, angle)
    )


def test_radius_larger_than_image():
    x = np.random.default_rng(0).integers(0, 256, (32, 33, 3), dtype=np.uint8)
    np.testing.assert_array_equal(motion_blur_uint8(x, 40, 15, 30.0), _plain_blur(x, 40, 15, 30.0))


@pytest.mark.parametrize("value", [0, 1, 100, 254, 255])
def test_flat_image_unchanged(value):
    x = np.full((40, 50, 3), value, np.uint8)
    np.testing.assert_array_equal(motion_blur_uint8(x, 20, 15, 17.0), x)


def test_step_edge_matches_imagemagick():
    # A 4x40 grey step (0 left of column 20, 255 from it) blurred with MotionBlurImage
    # radius 10, sigma 3, angle 0 by ImageMagick 6.9.11-60 Q16 through Wand, read back from
    # its PNG (run in the reference environment of benchmarks/setup_reference_env.sh).
    # Rounding instead of ImageMagick's truncation to 8 bits would give 1 3 7 15 30 54 91 139.
    x = np.zeros((4, 40), np.uint8)
    x[:, 20:] = 255
    row = [0] * 12 + [2, 6, 14, 29, 54, 90, 138, 195] + [255] * 20
    out = motion_blur_uint8(x, 10, 3, 0.0)
    assert out.tolist() == [row] * 4


def test_rejects_non_uint8():
    with pytest.raises(ValueError, match="uint8"):
        motion_blur_uint8(np.zeros((8, 8), np.float32), 10, 3, 0.0)


@pytest.mark.parametrize("radius,sigma", [(10, 3), (15, 5), (12, 8), (14, 12)])
def test_tap_offsets_are_the_rounded_direction_at_every_angle(radius, sigma):
    """The offsets, computed in one numba call, against ImageMagick's expression in
    Python doubles, ``ceil(i * width * cos(a) / hypot(...) - 0.5)``, at angles that put
    many of them on a rounding edge (multiples of 0.5 degree) and at random ones."""
    angles = np.concatenate(
        [np.arange(-180, 180.5, 0.5), np.random.default_rng(1).uniform(-180, 180, 500)]
    )
    for angle in angles:
        w, dx, dy = motion_kernel(radius, sigma, float(angle))
        n = len(w)
        rad = math.pi * float(angle) / 180.0
        px, py = n * math.sin(rad), n * math.cos(rad)
        norm = math.hypot(px, py)
        assert list(dx) == [math.ceil(i * py / norm - 0.5) for i in range(n)], angle
        assert list(dy) == [math.ceil(i * px / norm - 0.5) for i in range(n)], angle
