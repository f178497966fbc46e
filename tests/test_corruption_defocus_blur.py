"""defocus_blur's kernel and filtering against OpenCV and a direct convolution."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import robustlab
from robustlab.shifts.corruptions.defocus_blur import disk_kernel

PARAMS = [(3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)]


@pytest.mark.parametrize("radius,alias", PARAMS)
def test_kernel_is_the_smoothed_disk(radius, alias):
    grid = np.arange(-8, 9) if radius <= 8 else np.arange(-radius, radius + 1)
    xx, yy = np.meshgrid(grid, grid)
    disk = ((xx**2 + yy**2) <= radius**2).astype(np.float32)
    disk /= disk.sum()
    ksize = (3, 3) if radius <= 8 else (5, 5)
    current = cv2.GaussianBlur(disk, ksize=ksize, sigmaX=alias)  # today's OpenCV rounds differently
    ours = disk_kernel(radius, alias)
    assert ours.dtype == np.float32 and ours.shape == disk.shape
    np.testing.assert_allclose(ours, current, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(
        ours, ours[::-1, ::-1]
    )  # mirror-symmetric (not transpose: passes round differently)
    # the reference quirk is kept: for r >= 8 the disk reaches the grid edge and the
    # reflect-101 border of the smoothing adds mass (sum 1.011 at r=8, 1.013 at r=10)
    assert abs(float(ours.sum(dtype=np.float64)) - float(current.sum(dtype=np.float64))) < 1e-6


def test_filtering_equals_direct_convolution():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    k = disk_kernel(4, 0.5).astype(np.float64)
    r = k.shape[0] // 2
    f = x / 255.0
    pad = np.pad(f, ((r, r), (r, r), (0, 0)), mode="reflect")  # = OpenCV reflect-101
    direct = np.zeros_like(f)
    for i in range(k.shape[0]):
        for j in range(k.shape[1]):
            direct += k[i, j] * pad[i : i + 40, j : j + 50]
    expected = np.clip(direct, 0, 1) * 255
    out = robustlab.corrupt(x, "defocus_blur", 2)
    # truncation can flip where the two summation orders straddle an integer
    assert np.abs(out.astype(float) - expected).max() < 1.0 + 1e-9
    assert (out == expected.astype(np.uint8)).mean() > 0.99


@pytest.mark.parametrize("severity", [1, 5])
def test_flat_image_stays_flat(severity):
    gain = float(disk_kernel(*PARAMS[severity - 1]).sum(dtype=np.float64))
    for v in (0, 1, 128, 255):
        out = robustlab.corrupt(np.full((64, 64, 3), v, np.uint8), "defocus_blur", severity)
        expected = min(v * gain, 255)
        assert np.abs(out.astype(float) - expected).max() <= 1
