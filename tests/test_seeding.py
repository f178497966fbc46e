"""The seed rule's generators: ``make_rng(int)`` is numpy's
``Generator(PCG64(SeedSequence(seed)))`` state for state, though built without numpy's
``SeedSequence`` for seeds below 2**64 (robustlab._seed_words)."""

from __future__ import annotations

import numpy as np
import pytest

from robustlab._seed_words import SeedWords
from robustlab.seeding import derive_seed, make_rng

EDGES = [0, 1, 2, 2**31, 2**32 - 1, 2**32, 2**32 + 1, 2**63 - 1, 2**63, 2**64 - 1]


def _numpy(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def test_the_state_is_numpys_on_many_seeds():
    seeds = np.random.default_rng(20261129).integers(0, 2**64, 20000, dtype=np.uint64)
    small = np.random.default_rng(7).integers(0, 2**32, 5000, dtype=np.uint64)
    for s in [*EDGES, *(int(v) for v in seeds), *(int(v) for v in small)]:
        assert make_rng(s).bit_generator.state == _numpy(s).bit_generator.state, s


def test_the_seed_rules_streams_draw_the_same_values():
    for sample in ("bird/a.png", "dog/b.JPEG", "ünïcode/ç.png"):
        for level in (1, 5, "0.10"):
            s = derive_seed(0, sample, "frost", level)
            a, b = make_rng(s), _numpy(s)
            assert np.array_equal(a.standard_normal(100), b.standard_normal(100))
            assert np.array_equal(a.integers(0, 255, 50), b.integers(0, 255, 50))
            assert a.random() == b.random()


def test_other_seeds_and_inputs_keep_numpys_route():
    for s in (2**64, 2**100 + 12345, -1, np.int64(42)):
        want = int(s) & (2**128 - 1)
        assert make_rng(s).bit_generator.state == _numpy(want).bit_generator.state
    g = np.random.default_rng(3)
    assert make_rng(g) is g
    # another request of words than PCG64's goes to numpy's SeedSequence
    assert np.array_equal(
        SeedWords(99).generate_state(8, np.uint32),
        np.random.SeedSequence(99).generate_state(8, np.uint32),
    )
    with pytest.raises(ValueError, match="2\\*\\*64"):
        SeedWords(2**64)
    with pytest.raises(ValueError, match="seed must be an int"):
        make_rng(1.5)
