"""Content hashes of the files ``generate`` writes, recorded as they are written.

Why: a generated folder's manifest says how its files were made, not what they hold now.
A file replaced afterwards (by hand, by a tool, by a copy into the folder), even under its
name and modification time, must never be scored as the shift its path names. So each
worker hashes the bytes it writes (BLAKE2b, 128 bits: the digest of
:mod:`robustlab.records.content_hash`, so a file's recorded hash equals the hash of the file
while it is untouched), the driver appends them to the run's journal as each image's cells
come back, and whoever reads the folder later compares:

- ``evaluate`` hashes the bytes it reads of each cell (it reads them anyway: no extra pass)
  and skips a cell whose bytes differ, with the reason;
- a ``generate`` rerun checks the files it finds before it counts them as done, and draws
  the ones that differ again (their seed makes the same bytes as the first time).

Where: ``<out>/.hashes/<run id>.jsonl``, one JSON line per written file,
``[sample id, shift, level, digest]`` (a later run's line wins). One journal per run, so
concurrent runs never write one file; the manifest's ``output_hashes`` key says that the
folder keeps them (a folder made before had no such key: see :func:`recorded_digests`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from robustlab.cells import level_key
from robustlab.errors import environment_problem
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.records.content_hash import DIGEST_SIZE

log = logging.getLogger(__name__)

HASHES = ".hashes"  # hidden: never listed as data, never counted as a cell file
KEY = "output_hashes"  # the manifest's key; its value names the folder and the digest
RECORD = {
    "folder": HASHES,
    "digest": f"blake2b-{8 * DIGEST_SIZE}",
    "line": "[sample id, shift, level, digest]",
}


def digest(data: bytes) -> str:
    """The content hash of a file's bytes (the same as ``content_hash.hash_bytes_of``)."""
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).hexdigest()


def journal_name(run_id: str) -> str:
    return f"{HASHES}/{run_id}.jsonl"


class Journal:
    """One generate run's journal of the files it wrote.

    A local folder gets each image's lines appended and flushed as they come back, so a
    killed run loses only the hashes of the images in flight (their files, found without
    a hash by the rerun, are drawn again). A URL folder (an object store cannot append)
    gets the journal written whole when the run ends; a killed run's files are drawn again.
    """

    def __init__(self, folder: LocalFolder | UrlFolder, run_id: str):
        self.folder = folder
        self.rel = journal_name(run_id)
        self.lines: list[str] = []
        self._fh: Any = None
        if isinstance(folder, LocalFolder):
            path = folder.location_of(self.rel)
            with self._writing():
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(path, "a", encoding="utf-8")

    def add(self, sample_id: str, entries: Iterable[tuple[str, str, str]]) -> None:
        """Record ``(shift, level, digest)`` of files written for one sample."""
        lines = [json.dumps([sample_id, sh, level_key(lv), d]) + "\n" for sh, lv, d in entries]
        if not lines:
            return
        if self._fh is not None:
            with self._writing():
                self._fh.writelines(lines)
                self._fh.flush()
        else:
            self.lines.extend(lines)

    def close(self) -> None:
        if self._fh is not None:
            with self._writing():
                self._fh.close()
            self._fh = None
        elif self.lines:
            self.folder.write(self.rel, "".join(self.lines).encode())

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A full disk or a folder that became read-only is the machine's problem, said in
        one line (:func:`robustlab.errors.environment_problem`), not a traceback."""
        try:
            yield
        except OSError as exc:
            problem = environment_problem(exc, f"cannot write {self.folder.location_of(self.rel)}")
            if problem is exc:
                raise
            raise problem from None


class Digests:
    """Recorded digest per (sample id, shift, level), held compactly: per sample one
    ``bytes`` of 16-byte raw digests, a slot per cell (zeros: none recorded), so a folder
    of 50,000 photos x 75 cells needs 60 MB, wherever the object is sent."""

    def __init__(self, cells: Sequence[tuple[str, Any]]):
        self.slots = {(str(sh), level_key(lv)): i for i, (sh, lv) in enumerate(cells)}
        self.rows: dict[str, bytearray] = {}

    def set(self, sample_id: str, shift: str, level: Any, hexdigest: str) -> None:
        slot = self.slots.get((str(shift), level_key(level)))
        if slot is None or len(hexdigest) != 2 * DIGEST_SIZE:
            return
        row = self.rows.get(sample_id)
        if row is None:
            row = self.rows[sample_id] = bytearray(DIGEST_SIZE * len(self.slots))
        row[slot * DIGEST_SIZE : (slot + 1) * DIGEST_SIZE] = bytes.fromhex(hexdigest)

    def get(self, sample_id: str, shift: str, level: Any) -> str | None:
        slot = self.slots.get((str(shift), level_key(level)))
        row = self.rows.get(sample_id)
        if slot is None or row is None:
            return None
        raw = bytes(row[slot * DIGEST_SIZE : (slot + 1) * DIGEST_SIZE])
        return raw.hex() if any(raw) else None


def records_hashes(manifest: dict | None) -> bool:
    """Whether the folder's files were written with their hashes recorded."""
    return bool((manifest or {}).get(KEY))


def recorded_digests(
    root: Path | LocalFolder | UrlFolder, manifest: dict, cells: Sequence[tuple[str, Any]]
) -> Digests:
    """The digests the folder's journals record for ``cells``, each run's journal in the
    order of the manifest's runs (a later line wins). A folder made before robustlab kept
    journals has none: every digest is then unknown (see the callers for what that means)."""
    out = Digests(cells)
    folder = root if isinstance(root, (LocalFolder, UrlFolder)) else LocalFolder(Path(root))
    for run in manifest.get("runs") or []:
        rid = run.get("id") if isinstance(run, dict) else None
        data = folder.read(journal_name(str(rid))) if rid else None
        for line in (data or b"").decode("utf-8", "replace").splitlines():
            try:
                sid, sh, lv, d = json.loads(line)
            except (ValueError, TypeError):
                continue  # a line cut by a kill -9 mid-write: that file is drawn again
            out.set(str(sid), str(sh), lv, str(d))
    return out


__all__ = [
    "Digests",
    "Journal",
    "KEY",
    "RECORD",
    "digest",
    "journal_name",
    "recorded_digests",
    "records_hashes",
]
