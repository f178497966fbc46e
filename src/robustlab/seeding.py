"""The seed rule: every random draw comes from a generator keyed by what it is for.

``derive_seed(global_seed, sample_id, shift, level)`` hashes its arguments with BLAKE2b,
so the generator for one image cell never depends on worker count, order, machine or
Python's per-process hash salt.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

# The seed rule's range: every global seed (--seed, --split-seed, --bootstrap-seed, the
# Python API's seed=) is a whole number 0 <= seed <= MAX_SEED, because the results
# database stores it in a BIGINT column (signed 64 bits) and generators take no sign.
MAX_SEED = 2**63 - 1
SEED_RANGE = "a whole number from 0 to 2**63 - 1 (9223372036854775807)"


def seed_problem(value: Any) -> str | None:
    """What is wrong with ``value`` as a global seed, or None when it is one.

    The one seed rule (range, type, message) of every command and function that takes a
    seed, from argument parsing down to the database column: an int (numpy's included,
    never a bool, a float or a string) from 0 to :data:`MAX_SEED`.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return f"must be {SEED_RANGE}, got {value!r} ({type(value).__name__})"
    if not 0 <= int(value) <= MAX_SEED:
        return f"must be {SEED_RANGE}, got {int(value)}"
    return None


def check_seed(value: Any, what: str = "seed") -> int:
    """``value`` as an int when it obeys the seed rule (:func:`seed_problem`).

    Raises:
        InputError: one line naming ``what`` (``seed``, ``--split-seed``, a manifest's seed)
            and the rule.
    """
    problem = seed_problem(value)
    if problem is not None:
        from robustlab.errors import InputError

        raise InputError(
            f"{what} {problem}", hint="pass a whole number in that range, such as --seed 0"
        )
    return int(value)


def derive_seed(global_seed: int, sample_id: str, shift: str, level: object) -> int:
    """A 64-bit seed for one (sample, shift, level) cell."""
    key = f"{int(global_seed)}\x1f{sample_id}\x1f{shift}\x1f{level}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")


def make_rng(seed: int | np.random.Generator | np.random.RandomState | None):
    """A generator from an int seed; Generators and RandomStates pass through unchanged.

    An int gives a PCG64 ``numpy.random.Generator`` (the same stream on every platform). A
    ``RandomState`` is kept as is: shifts then draw in the reference code's order
    (legacy-compatible mode). ``None`` draws fresh OS entropy.
    """
    if isinstance(seed, (np.random.Generator, np.random.RandomState)):
        return seed
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        value = int(seed) & (2**128 - 1)
        if value <= 0xFFFFFFFFFFFFFFFF:  # every derived seed: numpy's state, built faster
            from robustlab._seed_words import pcg64

            return pcg64(value)
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(value)))
    raise ValueError(
        f"seed must be an int, a numpy Generator or a numpy RandomState, not {type(seed).__name__}"
    )


def randint(rng, low: int, high: int | None = None, size=None):
    """Integers in [low, high) from either generator type.

    ``RandomState.randint`` and ``Generator.integers`` differ only in name here, and the
    legacy path must call ``randint`` to consume the same stream as the reference code.
    """
    if isinstance(rng, np.random.RandomState):
        return rng.randint(low, high, size=size)
    return rng.integers(low, high, size=size)


def is_legacy(rng) -> bool:
    """True for a ``RandomState``: the shift must reproduce the reference's draw order."""
    return isinstance(rng, np.random.RandomState)
