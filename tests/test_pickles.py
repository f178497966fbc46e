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


def _as_python_2(obj) -> bytes:
    """``obj`` pickled as Python 2 wrote it: every ``bytes`` (an array's data, its order
    mark) a Python 2 string (SHORT_BINSTRING), not Python 3's ``_codecs.encode(text,
    'latin1')`` call."""
    import pickletools

    blob = pickle.dumps(obj, protocol=2)
    ops = list(pickletools.genops(blob))
    out, i, codecs_memo = bytearray(), 0, None
    while i < len(ops):
        (op, arg, pos), end = ops[i], ops[i + 1][2] if i + 1 < len(ops) else len(blob)
        if op.name == "GLOBAL" and arg == "_codecs encode":
            # GLOBAL, BINPUT m, BINUNICODE text, BINPUT, BINUNICODE 'latin1', BINPUT,
            # TUPLE2, BINPUT, REDUCE: the string; the result's BINPUT stays.
            codecs_memo, text, skip = ops[i + 1][1], ops[i + 2][1], 9
        elif op.name == "BINGET" and arg == codecs_memo:
            # BINGET m, BINUNICODE text, BINPUT, BINGET 'latin1', TUPLE2, BINPUT, REDUCE.
            text, skip = ops[i + 1][1], 7
        else:
            out += blob[pos:end]
            i += 1
            continue
        raw = text.encode("latin1")
        out += b"U" + bytes([len(raw)]) + raw
        i += skip
    return bytes(out)


def test_a_python_2_pickle_reads_as_numpy_reads_it_with_latin1(tmp_path):
    """ICONS-50's Icons-50.npy may come from Python 2: its arrays' bytes are Python 2
    strings, which only numpy's prescribed ``latin1`` decodes."""
    import pickletools

    obj = np.empty((), dtype=object)
    obj[()] = {"image": np.array([200, 1], dtype=np.uint8), "style": ["apple"]}
    blob = _as_python_2(obj)
    assert "SHORT_BINSTRING" in {op.name for op, _, _ in pickletools.genops(blob)}
    assert b"_codecs" not in blob
    with pytest.raises(UnicodeDecodeError):
        pickle.loads(blob, encoding="ASCII")
    path = tmp_path / "py2.npy"
    with open(path, "wb") as fh:
        np.lib.format.write_array_header_1_0(
            fh, {"descr": "|O", "fortran_order": False, "shape": ()}
        )
        fh.write(blob)
    want = np.load(path, allow_pickle=True, encoding="latin1").item()
    got = load_npy_object(path)
    assert np.array_equal(got["image"], [200, 1]) and got["style"] == ["apple"]
    _equal(got, want)
