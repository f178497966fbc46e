"""Data pickles (ICONS-50's Icons-50.npy, CIFAR-100's python release) are read without
running code: arrays, containers and strings come back as pickle gives them; anything that
names another global is refused before it is called."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest
from conftest import RunsACommand

from robustlab.data.pickles import UnsafePickle, load_data_pickle, load_npy_object


def _data():
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, (3, 3, 8, 8), dtype=np.uint8),
        "class": np.array([0, 1, 1]),
        "style": ["apple", "google", "microsoft"],
        "score": np.float32(0.5),
        b"raw": (b"bytes", 1.5, None, True),
    }


def _equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], np.ndarray):
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k])
        else:
            assert a[k] == b[k]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_arrays_and_containers_read_as_pickle_reads_them(protocol):
    blob = pickle.dumps(_data(), protocol=protocol)
    _equal(load_data_pickle(io.BytesIO(blob)), pickle.loads(blob))


def test_npy_of_a_dict_reads_as_numpy_reads_it(tmp_path):
    np.save(tmp_path / "d.npy", _data(), allow_pickle=True)
    _equal(
        load_npy_object(tmp_path / "d.npy"), np.load(tmp_path / "d.npy", allow_pickle=True).item()
    )


def test_a_pickle_that_would_run_a_command_is_refused_uncalled(tmp_path):
    marker = tmp_path / "ran"
    blob = pickle.dumps({"image": RunsACommand(marker)})
    assert pickle.loads(blob) == {"image": 0} and marker.exists()  # what plain pickle does
    marker.unlink()
    with pytest.raises(UnsafePickle, match=r"asks for (posix|os|nt)\.system"):
        load_data_pickle(io.BytesIO(blob))
    np.save(tmp_path / "bad.npy", {"image": RunsACommand(marker)}, allow_pickle=True)
    with pytest.raises(UnsafePickle, match="could run any code"):
        load_npy_object(tmp_path / "bad.npy")
    assert not marker.exists()


def test_an_npy_of_numbers_is_not_an_object(tmp_path):
    np.save(tmp_path / "n.npy", np.arange(3))
    with pytest.raises(ValueError, match="not a pickled object"):
        load_npy_object(tmp_path / "n.npy")
    (tmp_path / "t.npy").write_bytes(b"not numpy")
    with pytest.raises(ValueError):
        load_npy_object(tmp_path / "t.npy")
