"""Datasets released as Python pickles (ICONS-50's ``Icons-50.npy``, CIFAR-100's python
release), read without running their code.

Unpickling can call any importable function, so a doctored data file could run commands
when it is read. These files hold only builtin containers, strings, numbers and numpy
arrays; the unpickler here resolves only the few globals that rebuilding those needs and
refuses any other with :class:`UnsafePickle`, naming what the file asked for. That is
the rule ``torch.load(weights_only=True)`` applies to checkpoints
(:mod:`robustlab.models.weights`).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

# (module, name) of the globals that rebuild numpy arrays, dtypes and scalars (protocol 5
# arrays through ``_frombuffer``; protocol 2 bytes from Python 3 through
# ``_codecs.encode``); numpy 2 pickles name ``numpy._core``, numpy 1 ``numpy.core``.
_ALLOWED = {
    (f"numpy.{core}.{module}", name)
    for core in ("core", "_core")
    for module, name in (
        ("multiarray", "_reconstruct"),
        ("multiarray", "scalar"),
        ("numeric", "_frombuffer"),
    )
} | {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}


class UnsafePickle(pickle.UnpicklingError):
    """The pickle asks for a global that a data file does not need (it could run code)."""


class _DataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise UnsafePickle(
                f"it asks for {module}.{name}, which a data file does not need "
                "(unpickling it could run any code)"
            )
        return super().find_class(module, name)


def load_data_pickle(fh, *, encoding: str = "ASCII") -> Any:
    """Unpickle builtin containers and numpy arrays from ``fh``, nothing else.

    ``encoding`` is :func:`pickle.load`'s (``"bytes"`` for Python 2 pickles such as
    CIFAR's).

    Raises:
        UnsafePickle: the pickle names any other global.
        pickle.UnpicklingError, EOFError, ValueError: not a readable pickle.
    """
    return _DataUnpickler(fh, encoding=encoding).load()


def load_npy_object(path: str | Path) -> Any:
    """The object stored in a ``.npy`` file of dtype object (``np.save`` of a dict), as
    ``np.load(path, allow_pickle=True, encoding="latin1").item()`` gives it, through
    :func:`load_data_pickle`. ``latin1`` is what numpy prescribes for a file saved by
    Python 2 (its arrays' bytes are Python 2 strings, which ASCII cannot decode); for a
    Python 3 file the encoding changes nothing.

    Raises:
        UnsafePickle: as :func:`load_data_pickle`.
        ValueError: not a ``.npy`` file, or not one object.
    """
    fmt = np.lib.format
    with open(path, "rb") as fh:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy format version {version} is not supported")
        if dtype != np.dtype(object):
            raise ValueError(f"it holds a {dtype} array of shape {shape}, not a pickled object")
        array = load_data_pickle(fh, encoding="latin1")
    if not isinstance(array, np.ndarray) or array.size != 1:
        raise ValueError("it does not hold one pickled object")
    return array.reshape(()).item()
