"""The record of a workflow that writes a folder (generate, synth, mine): its identity,
its status and the bookkeeping around every run into it.

A database run has its record in DuckDB (:func:`robustlab.records.identity.make_record`); a
folder's record is a JSON file inside the folder (``manifest.json`` for generate and synth,
``mining.json`` for a mined subset), and the rules are the same for every such folder, so
they live here once:

- **Identity before the first file.** What decides the files is written (under the
  folder's lock) before any file is, so a killed run's files are never of unknown making;
  a later run whose identity differs is refused naming each change
  (:func:`refuse_changes`), one whose identity is a hash compares the hash
  (:func:`identity_hash`).
- **One entry per run, with its status.** :class:`FolderRun` is a run's entry in the
  ``runs`` list: ``running`` when written, then ``complete`` or ``interrupted``
  (:meth:`FolderRun.track`), ``killed`` when a later run finds its process gone
  (:func:`robustlab.records.manifest.mark_dead_runs`). A run merged twice replaces its own entry.
- **Counts from disk.** ``written`` is what the folder holds when the run ends
  (:func:`count_files`), not a sum of what processes reported.
- **Merged, not overwritten.** Each update re-reads the record under the lock and merges
  into what is there *now* (:func:`update_record`), so two runs into one folder keep both
  entries.

The record's name, bytes and readers are :mod:`robustlab.records.manifest`'s (``json_bytes``: the
byte format every existing folder has; ``write_manifest``, ``read_record``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from robustlab.errors import InputChangedError
from robustlab.records.manifest import mark_dead_runs, this_process, write_manifest
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.records.identity import run_id

RUNNING, COMPLETE, INTERRUPTED = "running", "complete", "interrupted"

# Libraries whose behaviour shapes a folder's pixels: record key -> distributions to try.
LIBRARIES = {
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
    "pillow": ("pillow",),
    "scikit-image": ("scikit-image",),
    "numba": ("numba",),
}


def now() -> str:
    """UTC time to the second, the timestamps of every folder record."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def library_versions(extra: Iterable[str] = ()) -> dict[str, str | None]:
    """Versions of the libraries whose behaviour shapes a folder's files (robustlab,
    python, :data:`LIBRARIES`, then the distributions ``extra``; None when missing)."""
    from importlib import metadata

    from robustlab.version import __version__

    out: dict[str, str | None] = {
        "robustlab": __version__,
        "python": platform.python_version(),
    }
    wanted = {**LIBRARIES, **{d: (d,) for d in extra}}
    for key, dists in wanted.items():
        out[key] = None
        for d in dists:
            try:
                out[key] = metadata.version(d)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def identity_hash(identity: dict[str, Any]) -> str:
    """The hash that names an identity (a mining's id): the same rule as a run id."""
    return run_id(identity)


def refuse_changes(where: Path | str, changes: Sequence[str], *, made: str, hint: str) -> None:
    """Refuse to add files made another way to a folder.

    Args:
        where: The folder (a path or URL), named in the message.
        changes: One phrase per difference from the folder's identity (empty: compatible).
        made: How the folder was made, e.g. ``"was generated with other inputs"``.
        hint: The next thing to try (a new folder).

    Raises:
        InputChangedError: ``"<where> <made>: <change>; <change>"``.
    """
    if changes:
        raise InputChangedError(f"{where} {made}: " + "; ".join(changes), hint=hint)


def update_record(folder: LocalFolder | UrlFolder, merge: Callable[[dict | None], dict]) -> dict:
    """Read the folder's ``manifest.json`` under its lock, merge, write it back; returns
    what was written. ``merge`` gets the record on disk *now* (None: none yet) and runs
    under the lock, so it may also write the folder's other index files."""
    with folder.lock():
        data = merge(folder.load_manifest())
        write_manifest(folder, data)
    return data


class FolderRun:
    """One run's entry in its folder's ``runs`` list, and its clock.

    ``fields`` follow ``id``, ``started_at``, ``host`` and ``pid`` in the caller's order
    (``status`` among them, :data:`RUNNING`); :meth:`finish` appends ``finished_at``,
    ``status``, ``seconds`` and the run's counts.
    """

    def __init__(self, *, clock_from: float | None = None, **fields: Any) -> None:
        # The run's seconds count from ``clock_from`` (the call's start, planning included).
        self.started = time.perf_counter() if clock_from is None else clock_from
        self.record: dict[str, Any] = {
            "id": uuid.uuid4().hex[:12],
            "started_at": now(),
            **this_process(),  # a later run tells a killed one by its gone process
            **fields,
        }

    @property
    def id(self) -> str:
        return self.record["id"]

    @property
    def status(self) -> str:
        return self.record["status"]

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @contextlib.contextmanager
    def track(self, finish: Callable[[str], None]) -> Iterator[FolderRun]:
        """Run the body; then ``finish(status)``, always: ``complete`` when the body
        returned, ``interrupted`` when it raised (Ctrl-C, a bug, a full disk), so the
        folder's record says how the run ended and a rerun resumes from the files."""
        status = INTERRUPTED
        try:
            yield self
            status = COMPLETE
        finally:
            finish(status)

    def finish(self, status: str, **counts: Any) -> None:
        """Record the end: ``finished_at``, ``status``, ``seconds``, then ``counts``."""
        self.record.update(
            finished_at=now(), status=status, seconds=round(self.elapsed(), 3), **counts
        )

    def runs(self, previous: Iterable[dict]) -> list[dict]:
        """``previous`` entries (dead ``running`` ones marked ``killed``, this run's own
        earlier entry dropped) followed by this run's entry as it stands now."""
        kept = [r for r in mark_dead_runs(list(previous)) if r.get("id") != self.id]
        return [*kept, dict(self.record)]


def count_files(
    folder: LocalFolder | UrlFolder | Path, subfolders: Sequence[str], accept: Callable[[str], bool]
) -> int:
    """Files under ``subfolders`` of a folder (local or URL) whose name ``accept`` takes:
    what the folder holds, whoever wrote it."""
    if isinstance(folder, UrlFolder):
        return sum(
            1 for rel in folder.files_under(list(subfolders)) if accept(rel.rsplit("/", 1)[-1])
        )
    root = folder.root if isinstance(folder, LocalFolder) else Path(folder)
    n = 0
    for sub in subfolders:
        for _, _, files in os.walk(root / sub):
            n += sum(1 for f in files if accept(f))
    return n


__all__ = [
    "RUNNING",
    "COMPLETE",
    "INTERRUPTED",
    "FolderRun",
    "count_files",
    "identity_hash",
    "library_versions",
    "now",
    "refuse_changes",
    "update_record",
]
