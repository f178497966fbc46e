"""contrast: pull every channel towards its image mean (ImageNet-C, digital family).

Reference: ``x = img / 255.``; ``m`` = per-channel mean of ``x`` (numpy's float64
reduction); output ``clip((x - m) * c + m, 0, 1) * 255``, truncated to uint8. The output
of a channel depends only on the input value of that channel, so after computing ``m``
exactly as the reference does, a 256-entry table per channel gives the same bytes without
any full-size float arithmetic.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift

_LEVELS = np.arange(256, dtype=np.float64) / 255.0


@register_shift(
    "contrast",
    family="digital",
    params={1: 0.4, 2: 0.3, 3: 0.2, 4: 0.1, 5: 0.05},
    tags=("imagenet-c",),
    deterministic=True,
)
def contrast(x, factor, rng, ctx):
    """Contrast scaled by ``factor`` around the per-channel mean intensity."""
    x = np.asarray(x)
    # the mean must be numpy's float64 reduction over x / 255 (not an exact integer
    # mean): a last-bit difference in it can flip a truncated output value
    means = np.mean(x / 255.0, axis=(0, 1))
    lut = np.clip((_LEVELS[None, :] - means[:, None]) * factor + means[:, None], 0, 1) * 255
    lut = lut.astype(np.uint8)  # (3, 256): row = channel
    return lut[np.arange(3), x]
