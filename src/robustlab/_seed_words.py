"""numpy's ``SeedSequence(seed).generate_state(4, uint64)`` for one 64-bit seed, compiled.

Why: every cell draws from ``PCG64(SeedSequence(derive_seed(...)))`` (the seed rule), and
numpy builds that in about 15-20 us on this project's CPUs, mostly in Python-level
bookkeeping of ``SeedSequence`` and ``generate_state``: at 32x32 a fifth of a corruption's
cost. The words come out of a fixed sequence of 32-bit multiplies, xors and shifts
(numpy's ``_bit_generator.pyx``: ``hashmix`` and ``mix`` over a pool of four words, then
the output hash), so this repeats them exactly, in unsigned 32-bit arithmetic, the same
on every CPU. ``PCG64`` takes any :class:`numpy.random.bit_generator.ISeedSequence`, so
:class:`SeedWords` hands it the words and the generator's state is numpy's own (checked on
tens of thousands of seeds, the edge cases included: tests/test_seeding.py).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.random.bit_generator import ISeedSequence

# numpy's SeedSequence constants (the pool of 4 words, 32-bit hash constants).
_INIT_A = np.uint32(0x43B0D7E5)
_MULT_A = np.uint32(0x931E8875)
_INIT_B = np.uint32(0x8B51F9DD)
_MULT_B = np.uint32(0x58F38DED)
_MIX_L = np.uint32(0xCA01F9DD)
_MIX_R = np.uint32(0x4973F715)
_SHIFT = np.uint32(16)
_LOW = (1 << 32) - 1


@njit(cache=True, nogil=True)
def _words(lo, hi, n_entropy):
    """The four uint64 words for entropy ``[lo]`` (``n_entropy`` 1) or ``[lo, hi]``."""
    entropy = np.zeros(4, np.uint32)
    entropy[0] = np.uint32(lo)
    entropy[1] = np.uint32(hi)
    pool = np.zeros(4, np.uint32)
    hash_const = _INIT_A
    for i in range(4):  # hashmix of each entropy word (zeros past the entropy)
        value = entropy[i] if i < n_entropy else np.uint32(0)
        value = np.uint32(value ^ hash_const)
        hash_const = np.uint32(hash_const * _MULT_A)
        value = np.uint32(value * hash_const)
        pool[i] = np.uint32(value ^ (value >> _SHIFT))
    for i_src in range(4):  # every word mixed into every other
        for i_dst in range(4):
            if i_src != i_dst:
                value = np.uint32(pool[i_src] ^ hash_const)
                hash_const = np.uint32(hash_const * _MULT_A)
                value = np.uint32(value * hash_const)
                value = np.uint32(value ^ (value >> _SHIFT))
                mixed = np.uint32(np.uint32(_MIX_L * pool[i_dst]) - np.uint32(_MIX_R * value))
                pool[i_dst] = np.uint32(mixed ^ (mixed >> _SHIFT))
    out = np.empty(8, np.uint32)
    hash_const = _INIT_B
    for i in range(8):  # generate_state: the pool cycled through the output hash
        value = np.uint32(pool[i % 4] ^ hash_const)
        hash_const = np.uint32(hash_const * _MULT_B)
        value = np.uint32(value * hash_const)
        out[i] = np.uint32(value ^ (value >> _SHIFT))
    return out.view(np.uint64)


class SeedWords(ISeedSequence):
    """What ``PCG64`` asks of a seed sequence, for one seed below 2**64: its four words.

    ``Generator.spawn`` needs a real ``SeedSequence`` and is not offered; nothing in
    robustlab spawns (every stream is keyed by the seed rule instead).
    """

    __slots__ = ("seed", "_words")

    def __init__(self, seed: int):
        if not 0 <= seed <= 0xFFFFFFFFFFFFFFFF:
            raise ValueError(f"a seed from 0 to 2**64 - 1, not {seed}")
        self.seed = seed
        hi = seed >> 32
        self._words = _words(seed & _LOW, hi, 2 if hi else 1)

    def generate_state(self, n_words, dtype=np.uint32):
        if n_words != 4 or np.dtype(dtype) != np.uint64:
            return np.random.SeedSequence(self.seed).generate_state(n_words, dtype)
        return self._words.copy()


def pcg64(seed: int) -> np.random.Generator:
    """``Generator(PCG64(SeedSequence(seed)))``, the same state, for ``0 <= seed < 2**64``."""
    return np.random.Generator(np.random.PCG64(SeedWords(seed)))
