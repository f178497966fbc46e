"""snow's grey, OpenCV's float RGB-to-grey with its fused multiply-adds, on every CPU."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import skip_unless_opencv_fuses

from robustlab.shifts.corruptions.snow import _grey


def _fused_in_double(x: np.ndarray) -> np.ndarray:
    """``fma(b, .114, fma(r, .299, g * .587))`` in float32, each fused step as a float64
    product and sum rounded once to float32: an independent route to the same values (a
    float32 product is exact in double; a double rounding could differ, too rarely to
    expect on these inputs)."""
    k = [np.float64(np.float32(c)) for c in (0.299, 0.587, 0.114)]
    d = x.astype(np.float64)
    acc = (d[..., 1].astype(np.float32) * np.float32(0.587)).astype(np.float64)
    acc = (d[..., 0] * k[0] + acc).astype(np.float32).astype(np.float64)
    return (d[..., 2] * k[2] + acc).astype(np.float32)


def _images():
    rng = np.random.default_rng(4)
    yield rng.random((61, 83, 3), dtype=np.float32)
    yield rng.integers(0, 256, (64, 64, 3)).astype(np.float32) / np.float32(255)


@pytest.mark.parametrize("x", list(_images()))
def test_grey_is_the_fused_formula(x):
    ours = _grey(x, np.empty(x.shape[:2], np.float32))
    np.testing.assert_array_equal(ours.view(np.uint32), _fused_in_double(x).view(np.uint32))
    # and not the unfused one, which differs in the last bit at many pixels
    plain = x[..., 0] * np.float32(0.299) + x[..., 1] * np.float32(0.587)
    plain = plain + x[..., 2] * np.float32(0.114)
    assert (plain != ours).mean() > 0.05


@pytest.mark.parametrize("x", list(_images()))
def test_grey_is_opencvs_where_opencv_fuses(x):
    """The reference ran OpenCV with IPP on a CPU with FMA; where this one does too, the
    library's own grey is ours bit for bit (with IPP's SSE4.2 code, or without IPP, 19 %
    of the values differ: the CPU-dependence this kernel removes)."""
    skip_unless_opencv_fuses()
    ours = _grey(x, np.empty(x.shape[:2], np.float32))
    np.testing.assert_array_equal(ours, cv2.cvtColor(x, cv2.COLOR_RGB2GRAY))
