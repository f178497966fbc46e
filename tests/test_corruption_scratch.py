"""The corruptions' reusable work arrays and per-level lookup (shifts/corruptions/_scratch),
and the cheaper uniform draws (_draws)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from robustlab.shifts.corruptions._draws import random, uniform
from robustlab.shifts.corruptions._scratch import MAX_BYTES, lookup, scratch


def test_same_key_and_shape_gives_the_same_buffer_back():
    a = scratch("test.a", (5, 7), np.float64)
    assert scratch("test.a", (5, 7), np.float64) is a
    assert scratch("test.b", (5, 7), np.float64) is not a  # two keys: two buffers
    b = scratch("test.a", (5, 8), np.float64)  # another shape replaces it
    assert b.shape == (5, 8) and b is not a
    c = scratch("test.a", (5, 8), np.float32)  # so does another dtype
    assert c.dtype == np.float32 and c is not b


def test_large_buffers_are_not_kept():
    n = MAX_BYTES // 8 + 1
    assert scratch("test.big", (n,), np.float64) is not scratch("test.big", (n,), np.float64)


def test_threads_get_their_own_buffers():
    mine = scratch("test.t", (3,), np.int64)
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(scratch("test.t", (3,), np.int64)))
    t.start()
    t.join()
    assert theirs[0] is not mine


def test_lookup_equals_numpy_indexing():
    x = np.random.default_rng(0).integers(0, 256, (37, 41, 3)).astype(np.uint8)
    for table in (np.arange(256) / 255.0, (np.arange(256) / 255.0).astype(np.float32)):
        ours = lookup(x, table)
        assert ours.dtype == table.dtype and ours.shape == x.shape
        np.testing.assert_array_equal(ours, table[x])
    out = np.empty(x.shape, np.float64)
    assert lookup(x, np.arange(256) / 255.0, out) is out


@pytest.mark.parametrize("make", [np.random.default_rng, np.random.RandomState])
@pytest.mark.parametrize("low,high", [(-1.0, 1.0), (-100.0, 100.0), (-0.7, 0.7), (3.0, 5.5)])
def test_uniform_is_numpys_uniform_value_for_value(make, low, high):
    theirs, ours = make(11), make(11)
    expected = theirs.uniform(low, high, size=(300, 700))
    got = uniform(ours, low, high, (300, 700))
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(random(ours, 5), random(theirs, 5))  # same stream left


def test_lookup_of_other_dtypes_is_numpys_indexing():
    table = np.arange(256) / 255.0
    x = np.array([[0, 7, 255]], dtype=np.int64)
    np.testing.assert_array_equal(lookup(x, table), table[x])
    with pytest.raises(IndexError):
        lookup(np.array([0.5, 1.0]), table)  # floats are no indices, as before
