"""impulse_noise: salt-and-pepper noise (ImageNet-C, noise family).

The reference calls scikit-image ``random_noise(mode='s&p', amount=p)``, which draws from
its own generator: each value (per channel) is replaced with probability ``p``, by 1 or 0
with equal chance. That cannot be reproduced draw for draw, so this is a statistically
identical version that draws only from the generator passed in: one uniform ``u`` per
value, pepper (0) where ``u < p / 2``, salt (255) where ``p / 2 <= u < p``. Unchanged
values pass through unmodified, as in the reference (``v / 255 * 255 == v`` exactly for
all uint8 ``v``).
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift


@register_shift(
    "impulse_noise",
    family="noise",
    params={1: 0.03, 2: 0.06, 3: 0.09, 4: 0.17, 5: 0.27},
    tags=("imagenet-c",),
)
def impulse_noise(x, amount, rng, ctx):
    """Salt and pepper: a fraction ``amount`` of the values set to 0 or 255 (half each)."""
    u = rng.random(x.shape)
    out = np.array(x, dtype=np.uint8, copy=True)
    out[u < amount / 2] = 0
    out[(u >= amount / 2) & (u < amount)] = 255
    return out
