"""Atomic writes: a file robustlab writes is absent or complete, never half written.

Why one home: every writer (a generated cell, a report, a checkpoint, an export's shard,
a mask, the demo's copies) needs the same three things, and each copy of them once chose
its own temp name: the bytes go to a hidden temp file beside the target
(``.<name>.<pid>.rltmp``, :func:`temp_name`, short enough for NAME_MAX) and are renamed
over it (:func:`atomic_write`, or :func:`atomic_path` for a writer that needs a file name
of its own); a temp file whose writer is gone is stale (:func:`is_stale_temp`) and a rerun
deletes it (:func:`remove_temp_files`). This module needs nothing of robustlab's records,
so the safety rules (:mod:`robustlab.files.safety`) and the manifest sit above it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from robustlab.processes import process_alive

TEMP_SUFFIX = ".rltmp"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://|::")


def is_url(out: Any) -> bool:
    """Whether ``out`` names an fsspec URL (``proto://...`` or a chained ``a::b://``):
    such an output is written through :mod:`robustlab.files.outputs`, and no local path
    rule applies to it."""
    return isinstance(out, str) and bool(_URL.search(out))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that the file is either absent or complete.

    The bytes go to a hidden temp file in the same folder (same file system, so
    ``os.replace`` is an atomic rename); a crash before the rename leaves only the temp
    file, which :func:`remove_temp_files` cleans and :func:`discover` ignores.
    """
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A hidden temp path beside ``path`` for a writer that needs a file name of its own
    (``torch.save``, PIL, DuckDB's ``COPY``, a memory map, a file copy): renamed over
    ``path`` when the block ends, removed when it raises, so ``path`` is never half
    written. The one temp-file rule of every robustlab writer (:func:`temp_name`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temp_name(path.name))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def fsync_path(path: Path, *, folder: bool = False) -> None:
    """Flush ``path``'s written bytes to disk (a file someone is about to name complete),
    or, with ``folder=True``, a folder's entries (the renames into it), where a folder
    cannot be opened or synced on this file system that is not an error."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if folder:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not folder:
            raise
    finally:
        os.close(fd)


# Longest file name (bytes) most file systems take (ext4, xfs, btrfs: NAME_MAX).
NAME_MAX = 255


def temp_name(name: str) -> str:
    """``.<name>.<pid>.rltmp``; a name too long for that (a legal 250-byte file name
    grows past NAME_MAX with the prefix and suffix, and its write failed with "File name
    too long") keeps only a digest of itself: the temp name only has to be unique per
    final name and per writer, and to carry the pid for :func:`_writer_alive`."""
    tail = f".{os.getpid()}{TEMP_SUFFIX}"
    if len(os.fsencode(name)) + 1 + len(tail) > NAME_MAX:
        name = hashlib.sha256(os.fsencode(name)).hexdigest()[:32]
    return f".{name}{tail}"


def is_stale_temp(name: str) -> bool:
    """Whether ``name`` is a temp file (:func:`temp_name`) whose writer no longer runs."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX) and not _writer_alive(name)


def is_stale_array_temp(name: str) -> bool:
    """Whether ``name`` is the temp file of a ``.npy`` array (the release layout's
    ``<corruption>.npy``, ``labels.npy``) whose writer no longer runs."""
    return is_stale_temp(name) and name[1 : -len(TEMP_SUFFIX)].rsplit(".", 1)[0].endswith(".npy")


def remove_temp_files(out: Path, shift_names: Sequence[str]) -> int:
    """Delete the temp files an interrupted run left under the given shift folders, and
    the release arrays' at the top of ``out`` (a run killed while writing CIFAR-10-C's
    ``<corruption>.npy`` left up to 150 MB per file there). The manifest's own temp file
    is left: it is a few KB, and the manifest is written under its lock, which a sweep
    outside that lock must not race.

    A temp file's name carries the writer's pid (:func:`atomic_write`); one whose writer
    is still alive belongs to a concurrent run into the same folder and is left alone.
    """
    try:
        stale = [e.path for e in os.scandir(out) if is_stale_array_temp(e.name)]
    except OSError:
        stale = []
    for name in shift_names:
        base = out / name
        if base.is_dir():
            for dirpath, _, files in os.walk(base):
                stale += [os.path.join(dirpath, f) for f in files if is_stale_temp(f)]
    n = 0
    for path in stale:
        try:
            os.unlink(path)
            n += 1
        except OSError:
            pass
    return n


def _writer_alive(temp_name: str) -> bool:
    """Whether the process named in ``.<file>.<pid>.rltmp`` still runs (not this one)."""
    pid = temp_name[: -len(TEMP_SUFFIX)].rsplit(".", 1)[-1]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    return process_alive(int(pid))
