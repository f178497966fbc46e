"""elastic_transform's building blocks against independent implementations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.ndimage import gaussian_filter, map_coordinates

import robustlab
from robustlab.shifts.corruptions import elastic_transform as et


@pytest.mark.parametrize("shape", [(224, 224), (37, 90)])
@pytest.mark.parametrize("sigma", [244 * 0.7, 244 * 0.08, 244 * 0.01])
def test_smoothing_equals_scipy_gaussian_filter(shape, sigma):
    # scipy >= 1.13 sums in another order than 1.11 (which the direct route follows),
    # so current scipy agrees to rounding, not bit for bit
    u = np.random.default_rng(0).uniform(-1, 1, shape)
    ref = gaussian_filter(u, sigma, mode="reflect", truncate=3)
    direct = et.gaussian_reflect(u, sigma)
    dct = et.gaussian_reflect_dct(u, sigma)
    scale = np.abs(ref).max()
    assert np.abs(direct - ref).max() <= 1e-13 * scale
    assert np.abs(dct - ref).max() <= 1e-13 * scale


def test_displacement_equals_scipy_map_coordinates():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (40, 57, 3), dtype=np.uint8)
    img = x.astype(np.float32) / np.float32(255)
    # large displacements so that coordinates leave the image on every side
    dx = rng.uniform(-6, 6, (40, 57)).astype(np.float32)
    dy = rng.uniform(-6, 6, (40, 57)).astype(np.float32)
    ours = np.empty_like(x)
    et._displace(img, dx, dy, ours)
    xx, yy, zz = np.meshgrid(np.arange(57), np.arange(40), np.arange(3))
    coords = (
        (yy + dy[..., None]).reshape(-1, 1),
        (xx + dx[..., None]).reshape(-1, 1),
        zz.reshape(-1, 1),
    )
    ref = map_coordinates(img, coords, order=1, mode="reflect").reshape(img.shape)
    np.testing.assert_array_equal(ours, (np.clip(ref, 0, 1) * 255).astype(np.uint8))


def _warp(x, m):
    out = np.empty(x.shape, np.float32)
    et._warp_affine(
        np.ascontiguousarray(x), et._F32_SCALE, np.asarray(m, np.float64), et._WTAB, out
    )
    return out


def test_warp_identity_and_integer_shift():
    x = np.random.default_rng(2).integers(0, 256, (30, 45, 3), dtype=np.uint8)
    f = et._F32_SCALE[x]
    np.testing.assert_array_equal(_warp(x, [[1, 0, 0], [0, 1, 0]]), f)
    # dst(x, y) = src(x - 3, y + 2): reflect-101 beyond the edges
    out = _warp(x, [[1, 0, 3], [0, 1, -2]])
    rows = np.abs(np.arange(30) + 2)
    rows = np.where(rows > 29, 58 - rows, rows)
    cols = np.abs(np.arange(45) - 3)
    np.testing.assert_array_equal(out, f[rows][:, cols])


def test_triangle_is_centred_on_non_square_images():
    # (x, y) order for OpenCV: centre (W // 2, H // 2), half-size min(H, W) // 3
    np.testing.assert_array_equal(
        et.affine_points(100, 300), np.float32([[183, 83], [183, 17], [117, 17]])
    )
    np.testing.assert_array_equal(
        et.affine_points(224, 224), np.float32([[186, 186], [186, 38], [38, 38]])
    )


@pytest.mark.parametrize("severity", [1, 2])
def test_dct_route_changes_no_output_value(photo, monkeypatch, severity):
    # Generators take the DCT route at large sigma; forcing the direct sums must give
    # the same image (the ~1e-16 difference vanishes in the float32 displacements)
    fast = robustlab.corrupt(photo, "elastic_transform", severity, seed=11)
    monkeypatch.setattr(et, "_DCT_MIN_RADIUS", 10**9)
    direct = robustlab.corrupt(photo, "elastic_transform", severity, seed=11)
    np.testing.assert_array_equal(fast, direct)
