"""The batched elastic_transform's stages against the exact path's kernels, bit for bit.

tests/test_batched_matched.py checks the whole corruption on real photos with replayed
draws; these push each stage past what the corruption's own parameters reach (sources
several image sizes away, non-square images) so that every border branch runs.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import on_device

from robustlab.shifts.batched import digital as bd
from robustlab.shifts.batched._ops import unit
from robustlab.shifts.corruptions import elastic_transform as et


def _chw(a: np.ndarray) -> torch.Tensor:
    return on_device(torch.from_numpy(np.ascontiguousarray(a)).permute(2, 0, 1)[None])


def _hwc(t: torch.Tensor) -> np.ndarray:
    return t[0].permute(1, 2, 0).cpu().numpy()


@pytest.mark.parametrize(
    "m",
    [
        [[1, 0, 0], [0, 1, 0]],
        [[1, 0, 3.3], [0, 1, -2.71]],
        # rotation and shrink about the centre: sources far outside on every side
        [[0.31, -0.27, 20.5], [0.22, 0.35, -7.25]],
        # a near-singular stretch: sources many periods away
        [[4.1, 2.9, -130.0], [-3.3, 5.2, 77.0]],
    ],
)
def test_warp_is_opencv_34s_fixed_point_warp(m):
    x = np.random.default_rng(0).integers(0, 256, (37, 52, 3), dtype=np.uint8)
    m = np.asarray(m, np.float64)
    exact = np.empty(x.shape, np.float32)
    et._warp_affine(x, et._F32_SCALE, m, et._WTAB, exact)
    ours = bd._warp_affine(unit(_chw(x)), on_device(torch.from_numpy(m))[None])
    np.testing.assert_array_equal(_hwc(ours), exact)


@pytest.mark.parametrize("reach", [0.7, 6.0, 150.0])
def test_displacement_is_scipys_reflect_sampling(reach):
    rng = np.random.default_rng(1)
    img = rng.random((29, 41, 3)).astype(np.float32) * np.float32(1.2) - np.float32(0.1)
    dx = rng.uniform(-reach, reach, (29, 41)).astype(np.float32)
    dy = rng.uniform(-reach, reach, (29, 41)).astype(np.float32)
    # exactly on and next to the edges, where scipy's branches meet
    dx[0, :4] = [-1.0, -1e-16, -41.0, 41.0]
    dy[-1, :3] = [1.0, -29.0, 58.0]
    exact = np.empty(img.shape, np.uint8)
    et._displace(img, dx, dy, exact)
    ours = bd._displace(
        _chw(img), on_device(torch.from_numpy(dx))[None], on_device(torch.from_numpy(dy))[None]
    )
    np.testing.assert_array_equal(_hwc(ours), exact)


@pytest.mark.parametrize("sigma", [244 * 0.01, 1.2, 5.0])
def test_small_kernels_smooth_in_the_exact_order(sigma):
    # radius <= 16: the exact path sums directly, and so does the batched one, same order
    field = np.random.default_rng(2).uniform(-1, 1, (23, 70))
    ours = bd.gaussian_reflect(on_device(torch.from_numpy(field))[None], sigma)[0].cpu().numpy()
    np.testing.assert_array_equal(ours, et.gaussian_reflect(field, sigma))


def test_replayed_draws_give_the_exact_image_in_legacy_mode():
    # RandomState seeds take the exact path's direct sums at every radius
    from robustlab.shifts.registry import get_shift

    sh = get_shift("elastic_transform", batched=True)
    parts = sh.parts
    assert parts is not None
    x = np.random.default_rng(3).integers(0, 256, (30, 44, 3), dtype=np.uint8)
    for lv in (1, 3):
        exact = sh.fn(x, sh.params[lv], np.random.RandomState(lv), None)
        draws = parts.replay(x, sh.params[lv], np.random.RandomState(lv))
        np.testing.assert_array_equal(_hwc(parts.apply(_chw(x), sh.params[lv], draws)), exact)
