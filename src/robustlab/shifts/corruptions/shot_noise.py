"""shot_noise: Poisson (photon) noise (ImageNet-C, noise family).

Reference: ``poisson(x / 255 * c) / c`` clipped to [0, 1]; a lower photon count ``c``
means stronger noise. The draw is one ``rng.poisson`` over the whole HxWx3 array, the
reference's only random call, so a ``RandomState`` reproduces it exactly.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift


@register_shift(
    "shot_noise",
    family="noise",
    params={1: 60, 2: 25, 3: 12, 4: 5, 5: 3},
    tags=("imagenet-c",),
)
def shot_noise(x, photons, rng, ctx):
    """Poisson noise with ``photons`` expected counts at full intensity."""
    x = np.asarray(x) / 255.0
    return np.clip(rng.poisson(x * photons) / float(photons), 0, 1) * 255
