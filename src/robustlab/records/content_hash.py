"""Content hashes of input files, cached so that a rerun does not read them again.

Why: a run's identity must change when a photo or a mask changes, even when the file keeps
its name and byte size. Hashing the bytes is the only sure way; reading 50,000 photos on
every rerun is not acceptable, so each hash is cached under the file's *stat signature*:
absolute path, size, ``mtime_ns``, ``ctime_ns`` and inode. ``ctime`` and the inode are in
the key because ``cp -p`` / ``rsync -t`` preserve ``mtime``: a same-size replacement with a
copied ``mtime`` still gets a new ``ctime`` (which user space cannot set) or a new inode.

"Racily clean" entries (the git term): a file changed within the same timestamp tick as the
moment it was hashed could keep its whole signature. An entry whose file ``ctime`` is not
safely older than the moment of hashing is therefore never trusted; the file is hashed
again (and cached for good once its timestamps are old enough).

The cache is a small SQLite file, ``$ROBUSTLAB_CACHE_DIR`` or
``$XDG_CACHE_HOME/robustlab`` or ``~/.cache/robustlab``, file ``content-hashes.sqlite``.
A cache that cannot be opened or written (read-only home, corrupted file) is never a reason
to fail: hashing goes on without it, with one warning.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_FILE = "content-hashes.sqlite"
DIGEST_SIZE = 16  # bytes: 32 hex digits
CHUNK = 1 << 20
RACY_NS = 100_000_000  # 0.1 s: far above any file system's timestamp tick
MISSING = "missing"  # the hash of a file that cannot be read


def cache_dir() -> Path:
    """Where the hash cache lives (see the module docstring for the order of lookup)."""
    env = os.environ.get("ROBUSTLAB_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "robustlab"


def hash_bytes_of(path: str | bytes | os.PathLike) -> str:
    """BLAKE2b (128-bit) of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.blake2b(digest_size=DIGEST_SIZE)
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


@dataclass
class HashStats:
    """What one :meth:`ContentHasher.hash_files` call did (for logs, tests, benchmarks).

    Attributes:
        files: Paths asked for.
        cached: Answered from the cache without opening the file.
        read: Files whose bytes were read and hashed.
        bytes_read: Bytes hashed.
    """

    files: int = 0
    cached: int = 0
    read: int = 0
    bytes_read: int = 0


class ContentHasher:
    """Hashes files by content, through the persistent cache.

    Args:
        directory: Cache folder (default :func:`cache_dir`); ``None`` after construction
            failure means "no cache".
        threads: Threads reading files on a cache miss (hashlib releases the GIL, so
            reading and hashing overlap on local disks and hide latency on network ones).
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, threads: int = 4):
        self.threads = max(1, int(threads))
        self.path: Path | None = Path(directory or cache_dir()) / CACHE_FILE
        self.stats = HashStats()
        self._db: sqlite3.Connection | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30)
            # The path is a BLOB of its file-system bytes: names need not be valid UTF-8.
            db.execute(
                "CREATE TABLE IF NOT EXISTS hashes (path BLOB PRIMARY KEY, size INTEGER,"
                " mtime_ns INTEGER, ctime_ns INTEGER, inode INTEGER,"
                " hashed_at_ns INTEGER, digest TEXT)"
            )
            db.commit()
            self._db = db
        except (OSError, sqlite3.Error) as exc:
            log.warning("content-hash cache %s unusable (%s); hashing without it", self.path, exc)
            self.path = None

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> ContentHasher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def hash_files(self, paths: Sequence[str | os.PathLike | None]) -> list[str | None]:
        """Content hash per path, in order (``None`` for a ``None`` path, :data:`MISSING`
        for a file that cannot be read).

        ``self.stats`` is reset and then describes this call.
        """
        self.stats = stats = HashStats(files=sum(p is not None for p in paths))
        out: list[str | None] = [None] * len(paths)
        sigs: dict[int, tuple[bytes, tuple[int, int, int, int]]] = {}
        for i, p in enumerate(paths):
            if p is None:
                continue
            key = os.fsencode(os.path.abspath(os.fspath(p)))
            try:
                st = os.stat(key)
            except OSError:
                out[i] = MISSING
                continue
            sigs[i] = (key, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        known = self._lookup({key for key, _ in sigs.values()})
        todo = []
        for i, (key, sig) in sigs.items():
            hit = known.get(key)
            if hit is not None and hit[0] == sig and sig[2] < hit[1] - RACY_NS:
                out[i] = hit[2]
                stats.cached += 1
            else:
                todo.append(i)
        if todo:
            started = time.time_ns()
            with ThreadPoolExecutor(self.threads) as pool:
                digests = list(pool.map(lambda i: _try_hash(sigs[i][0]), todo))
            rows = []
            for i, digest in zip(todo, digests):
                out[i] = digest
                if digest != MISSING:
                    key, sig = sigs[i]
                    stats.read += 1
                    stats.bytes_read += sig[0]
                    rows.append((key, *sig, started, digest))
            self._store(rows)
        return out

    def _lookup(self, keys: set[bytes]) -> dict[bytes, tuple[tuple[int, int, int, int], int, str]]:
        if self._db is None or not keys:
            return {}
        found = {}
        try:
            ordered = sorted(keys)
            for j in range(0, len(ordered), 500):  # SQLite's host-parameter limit
                part = ordered[j : j + 500]
                q = (
                    "SELECT path, size, mtime_ns, ctime_ns, inode, hashed_at_ns, digest"
                    f" FROM hashes WHERE path IN ({','.join('?' * len(part))})"
                )
                for path, size, mt, ct, ino, at, digest in self._db.execute(q, part):
                    found[path] = ((size, mt, ct, ino), at, digest)
        except sqlite3.Error as exc:
            self._disable(exc)
            return {}
        return found

    def _store(self, rows: list) -> None:
        if self._db is None or not rows:
            return
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?, ?, ?)", rows
                )
        except sqlite3.Error as exc:
            self._disable(exc)

    def _disable(self, exc: Exception) -> None:
        log.warning("content-hash cache %s unusable (%s); hashing without it", self.path, exc)
        self.close()
        self.path = None


def _try_hash(path: bytes) -> str:
    try:
        return hash_bytes_of(path)
    except OSError:
        return MISSING


def hash_files(paths: Sequence[str | os.PathLike | None]) -> list[str | None]:
    """Content hashes of ``paths`` through the default cache (see :class:`ContentHasher`)."""
    with ContentHasher() as hasher:
        out = hasher.hash_files(paths)
        s = hasher.stats
    if s.read:
        log.info(
            "hashed %d input files (%.1f MB); %d from the cache",
            s.read,
            s.bytes_read / 1e6,
            s.cached,
        )
    return out


__all__ = ["ContentHasher", "HashStats", "hash_files", "hash_bytes_of", "cache_dir", "MISSING"]
