"""The one inter-process file lock: the database's and a generated folder's manifest's.

DuckDB lets only one process at a time open a database file for writing (and none may read
it meanwhile). robustlab therefore never keeps a connection open: every read or write is a
short connect-work-close transaction taken under an exclusive OS lock on a sidecar file
``<db>.lock`` (removed again by whoever releases it, so none is left behind). Waiting
processes retry with exponential backoff instead of failing, so two ``robustlab evaluate``
processes writing to the same file interleave their batches. A generated folder's manifest
is read, merged and written under the same lock (:func:`robustlab.records.manifest.manifest_lock`).

Why not the ``filelock`` package: it leaves its lock file behind (a ``<db>.lock`` beside a
shared database, which a read-only results folder cannot even hold), and removing the file
on release is only safe with the re-check this module does (see :func:`file_lock`). The OS
calls are the same on both sides (``flock`` here, ``msvcrt.locking`` on Windows).
"""

from __future__ import annotations

import errno
import os
import time
from contextlib import contextmanager
from pathlib import Path

from robustlab.errors import StoreError

if os.name == "nt":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
            return True
        except OSError:
            return False

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)  # type: ignore[attr-defined]

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class LockTimeout(StoreError, RuntimeError):
    """The lock stayed busy for longer than the caller was willing to wait."""


def backoff_delays(first: float = 0.002, cap: float = 0.25):
    """Exponentially growing waits (``first``, 2*``first``, ... up to ``cap`` seconds)."""
    delay = first
    while True:
        yield delay
        delay = min(cap, delay * 2)


# Why a lock file cannot be made: the folder is read-only or not ours.
_NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


DB_HINT = "wait for the other robustlab process, or pass another --db"


@contextmanager
def file_lock(
    path: str | Path, timeout: float = 600.0, *, required: bool = True, hint: str = DB_HINT
):
    """Hold an exclusive lock on ``path`` (created if needed) for the ``with`` block.

    The lock file is removed when the holder releases it, so no 0-byte ``<db>.lock`` is
    left next to the database. Removing a lock file is safe only with a check on the other
    side: a process that was waiting on the removed file (the old inode) finds, once it
    holds its lock, that ``path`` no longer names that file, and starts over on the new
    one. So at any moment at most one process holds a lock on the file ``path`` names.
    (On Windows an open file cannot be removed; the file stays there.)

    Args:
        path: The lock file.
        timeout: Seconds to keep retrying before raising :class:`LockTimeout`.
        required: False for readers: when the lock file cannot be created because the
            folder is not writable, an existing one is locked read-only, and without one
            the block runs unlocked. Nobody can write a database in such a folder, so
            there is no writer to keep out.
        hint: The timeout error's hint (what the user can do about the other holder).

    Raises:
        OSError: the lock file cannot be opened (and ``required`` is true).
    """
    path = Path(path)
    deadline = time.monotonic() + timeout
    delays = backoff_delays()
    while True:
        writable = True
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            if required or exc.errno not in _NOT_WRITABLE:
                raise
            writable = False
            try:
                fd = os.open(path, os.O_RDONLY)  # flock works on a read-only descriptor
            except OSError:
                yield
                return
        try:
            while not _try_lock(fd):
                if time.monotonic() > deadline:
                    raise LockTimeout(
                        f"{path} has been locked by another process for more than {timeout:.0f} s",
                        hint=hint,
                    )
                time.sleep(next(delays))
            if not _names(path, fd):
                # The holder before us removed the file we waited on: take the new one.
                _unlock(fd)
                continue
            try:
                yield
            finally:
                if writable and os.name != "nt":
                    try:
                        os.unlink(path)  # still locked: nobody can hold the new file yet
                    except OSError:
                        pass  # a read-only folder now, or gone: the lock still ends below
                _unlock(fd)
            return
        finally:
            os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the open file ``fd`` (not removed or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)
