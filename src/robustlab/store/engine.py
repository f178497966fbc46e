"""One DuckDB instance per process, into which each operation attaches the database file.

robustlab never keeps a results database open between operations (other processes share
the file; see :mod:`robustlab.store.connection`). Opening it with ``duckdb.connect`` for
every operation created a whole DuckDB instance each time, which costs about 40 ms of CPU
(its catalogue of built-in functions) before the first byte of the file is read, and a
report or a test suite makes thousands of short operations. An ``ATTACH`` of the file into
an instance that stays alive costs about 4 ms, and gives the same file semantics: DuckDB's
own lock on the file is taken by ``ATTACH`` and released by ``DETACH``, which also
checkpoints the write-ahead log as closing the instance did (benchmarks/README.md,
"store_connect.py").

Each operation gets a cursor (a connection of its own to the instance) whose default
database is the attached file, so queries name their tables as before. A file is attached
once per process at a time: operations that overlap in one process (readers of a folder
without a lock file, in two threads) share the attachment, and the last one detaches it.
A forked child never touches (nor frees) its parent's instance: it makes its own.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
from collections.abc import Callable
from pathlib import Path

from robustlab.errors import StoreError

_guard = threading.Lock()
_pid: int | None = None
_instances: dict[int, object] = {}  # threads -> in-memory DuckDB connection
_attached: dict[str, list] = {}  # real path -> [alias, read_only, users]
_aliases = itertools.count()


def _abandon_inherited() -> None:
    """In a forked child: leave the parent's instances alone for good. Using one is unsafe
    (DuckDB's threads and locks did not come along) and freeing one crashes the child
    (a segmentation fault, seen with DuckDB 2.0), so each keeps a reference it never drops.
    """
    global _pid
    for base in _instances.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(base))
    _instances.clear()
    _attached.clear()
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_abandon_inherited)


def _instance(duckdb, threads: int):
    """The process's DuckDB instance for ``threads`` (a new one after a fork)."""
    if _pid != os.getpid():
        _abandon_inherited()  # a fork the hook did not see
    base = _instances.get(threads)
    if base is None:
        base = _instances[threads] = duckdb.connect(":memory:", config={"threads": threads})
    return base


def attach(duckdb, path: Path, *, read_only: bool, threads: int = 1) -> tuple[object, Callable]:
    """A cursor whose default database is the file ``path``, and the function that ends it
    (rolls back an unfinished transaction, closes the cursor, detaches the file when no
    other operation of this process uses it).

    Raises the ``duckdb.Error`` of the ``ATTACH`` (a busy, damaged or foreign file) for the
    caller to retry or translate, having attached nothing.
    """
    key = os.path.realpath(path)
    with _guard:
        base = _instance(duckdb, threads)
        cur = base.cursor()  # type: ignore[attr-defined]
        try:
            entry = _attached.get(key)
            if entry is None:
                alias = f"robustlab_db{next(_aliases)}"
                mode = " (READ_ONLY)" if read_only else ""
                cur.execute(f"ATTACH {quote(path)} AS {alias}{mode}")
                entry = _attached[key] = [alias, read_only, 0]
            elif entry[1] and not read_only:
                raise StoreError(
                    f"{path} is open read-only in this process and cannot be written now",
                    hint="write after the reading operation has finished",
                )
            entry[2] += 1
        except BaseException:
            cur.close()
            raise
    try:
        cur.execute(f"USE {entry[0]}")
        # No progress bar: DuckDB draws one on the terminal for a query over 2 s (the
        # report's reads of many full runs), in the middle of robustlab's output.
        cur.execute("SET enable_progress_bar = false")
    except BaseException:
        _release(duckdb, base, cur, key, entry)
        raise

    def release() -> None:
        _release(duckdb, base, cur, key, entry)

    return cur, release


def _release(duckdb, base, cur, key: str, entry: list) -> None:
    try:
        try:
            cur.execute("ROLLBACK")  # what closing a connection did to an open transaction
        except duckdb.Error:
            pass  # none was open: the usual case
        cur.close()
    finally:
        with _guard:
            entry[2] -= 1
            if entry[2] == 0 and _attached.get(key) is entry:
                del _attached[key]
                base.execute(f"DETACH {entry[0]}")


def quote(text) -> str:
    """``text`` as an SQL string literal (a file path, a run id)."""
    return "'" + str(text).replace("'", "''") + "'"
