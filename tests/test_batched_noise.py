"""The batched shot noise's vectorised binary search against the exact path's numba one
(a guide table and a linear walk).

Random draws rarely land on a table entry or next to one, so the matched-draws test
(test_batched_matched.py) says little about ties and ends; here every grey level meets
its own table entries, the doubles on either side of them, 0, the largest double
below 1, and the exact path's guide-table bin edges.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import on_device

from robustlab.shifts.batched.noise import shot_noise
from robustlab.shifts.corruptions.shot_noise import _inverse_cdf, guide, tables
from robustlab.shifts.registry import get_shift


@pytest.mark.parametrize("photons", sorted(set(get_shift("shot_noise").params.values())))
def test_search_gives_the_exact_paths_count_at_ties_and_ends(photons):
    cdf, values = tables(photons)
    u = np.concatenate(
        [
            cdf,
            np.nextafter(cdf, 0.0),
            np.nextafter(cdf, 1.0),
            np.zeros((256, 1)),
            np.full((256, 1), np.nextafter(1.0, 0.0)),
            # the exact path's guide-table bin edges g / 256 and the doubles just below
            np.broadcast_to(np.arange(256) / 256.0, (256, 256)),
            np.broadcast_to(np.nextafter(np.arange(256) / 256.0, 0.0), (256, 256)),
        ],
        axis=1,
    )
    u = np.minimum(u, np.nextafter(1.0, 0.0))  # uniforms are below 1
    grey = np.repeat(np.arange(256, dtype=np.uint8)[:, None], u.shape[1], axis=1)
    exact = _inverse_cdf(
        grey.ravel(), u.ravel(), cdf, guide(photons), values, np.empty(grey.size, np.uint8)
    )
    # the apply is per value: one "image" of 256 rows, one grey level per row
    x = on_device(torch.from_numpy(grey))[None, None]
    ours = shot_noise(x, photons, {"u": on_device(torch.from_numpy(u))[None, None]})
    assert np.array_equal(ours.cpu().numpy().ravel(), exact)
    assert exact.min() == 0 and exact.max() == 255  # both ends of the search were reached
