"""shot_noise's fast Generator path (inverse-CDF tables) against numpy's Poisson sampler.

The legacy ``RandomState`` path is checked bit for bit in test_corruptions_fidelity.py;
here the table path must produce the same output distribution as the reference formula
``uint8(clip(poisson(v / 255 * c) / c, 0, 1) * 255)`` drawn with numpy's own sampler.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2

from robustlab.shifts.registry import get_shift

LEVELS = np.array([0, 1, 17, 64, 128, 200, 254, 255], dtype=np.uint8)
N = 40000  # samples per grey level


@pytest.mark.parametrize("severity", range(1, 6))
def test_table_sampler_matches_numpy_poisson(severity):
    shift = get_shift("shot_noise")
    c = shift.params[severity]
    img = np.repeat(LEVELS, N).reshape(len(LEVELS), N, 1).repeat(3, axis=2)
    ours = shift.apply(img, severity, np.random.default_rng(severity))
    lam = img[..., 0] / 255.0 * c
    ref = np.uint8(
        np.clip(np.random.default_rng(100 + severity).poisson(lam) / float(c), 0, 1) * 255
    )
    for row, v in enumerate(LEVELS):
        a = np.bincount(ours[row, :, 0], minlength=256)
        b = np.bincount(ref[row], minlength=256)
        keep = (a + b) > 0
        if keep.sum() == 1:  # black: both deterministic, must agree
            assert np.array_equal(a, b), v
            continue
        # two-sample chi-square homogeneity test over the output values
        a, b = a[keep], b[keep]
        expected_a = (a + b) / 2
        stat = (((a - expected_a) ** 2 + (b - expected_a) ** 2) / expected_a).sum()
        p = chi2.sf(stat, keep.sum() - 1)
        assert p > 1e-4, f"grey {v}, severity {severity}: p = {p:.2e}"
    assert ours[0].max() == 0  # v = 0 has mean 0: never any photon
