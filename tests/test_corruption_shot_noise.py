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


def _photon_counts() -> list[int]:
    """Every photon count of ImageNet-C's table and of every preset's (CIFAR-10-C: 500)."""
    shift = get_shift("shot_noise")
    tables = [shift.params, *shift.presets.values()]
    return sorted({int(c) for table in tables for c in table.values()})


@pytest.mark.parametrize("photons", _photon_counts())
def test_guide_is_the_first_count_past_each_bin_edge(photons):
    """The guide holds, per grey level and bin, the smallest count whose CDF exceeds the
    bin's lower edge: the walk's start. A count that does not fit the table's dtype
    (CIFAR-10-C's 500 photons in uint8) wraps to a far lower start, which still samples
    right but walks hundreds of steps per value."""
    from robustlab.shifts.corruptions.shot_noise import guide, tables

    cdf, _ = tables(photons)
    edges = np.arange(256) / 256.0
    want = (cdf[:, None, :] <= edges[None, :, None]).sum(axis=2)
    assert np.array_equal(guide(photons).astype(np.int64), want)
