"""numpy's ``uniform(low, high, size)`` from ``random(size)``: the same values, cheaper.

Both generator types compute ``uniform`` as ``low + (high - low) * u`` for one
``u = random()`` per value (numpy's C ``random_uniform``; the legacy ``RandomState`` the
same), but call a C function per value to do it, which costs about 40 % more than
filling with ``random`` and scaling the whole array (two in-place numpy passes, the
same two rounded double operations). Same stream consumption, same doubles: checked on
millions of values for both generator types (tests/test_corruption_scratch.py).
"""

from __future__ import annotations

import numpy as np


def random(rng, size) -> np.ndarray:
    """``size`` doubles uniform on [0, 1): ``random`` of a Generator, ``random_sample`` of a
    RandomState (the ``u`` that their ``uniform`` scales)."""
    if isinstance(rng, np.random.Generator):
        return np.asarray(rng.random(size), dtype=np.float64)
    return np.asarray(rng.random_sample(size), dtype=np.float64)


def uniform(rng, low: float, high: float, size) -> np.ndarray:
    """``rng.uniform(low, high, size)``, value for value, for a Generator or RandomState."""
    low = float(low)
    u = random(rng, size)
    u *= float(high) - low
    u += low
    return u
