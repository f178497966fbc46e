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
from numba import njit

from robustlab.shifts.registry import register_shift


@njit(cache=True, nogil=True)
def _salt_and_pepper(flat, u, amount, out):
    half = amount / 2
    for i in range(flat.shape[0]):
        if u[i] < half:
            out[i] = 0
        elif u[i] < amount:
            out[i] = 255
        else:
            out[i] = flat[i]
    return out


def draw(rng, n: int) -> np.ndarray:
    """``n`` uniforms on [0, 1) (float64), one per value of the HxWx3 array in C order."""
    return rng.random(n)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.01, 0.02, 0.03, 0.05, 0.07]
_64PX = [0.01, 0.02, 0.05, 0.08, 0.14]
_299PX = [0.04, 0.07, 0.1, 0.18, 0.28]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "impulse_noise",
    monotone=True,
    family="noise",
    params={1: 0.03, 2: 0.06, 3: 0.09, 4: 0.17, 5: 0.27},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def impulse_noise(x, amount, rng, ctx):
    """Salt and pepper: a fraction ``amount`` of the values set to 0 or 255 (half each)."""
    x = np.ascontiguousarray(x, dtype=np.uint8)
    u = draw(rng, x.size)
    return _salt_and_pepper(x.reshape(-1), u, float(amount), np.empty(x.size, np.uint8)).reshape(
        x.shape
    )
