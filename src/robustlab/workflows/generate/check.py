"""A rerun of ``generate`` checks the files it finds before it counts them as done.

A file counts as done only when its bytes are the ones a run of this folder wrote (the
hash recorded in its journal, :mod:`robustlab.files.hashes`). One that differs (replaced
by hand or by a tool, under the same name and modification time) or that no journal
records (written by a run killed before its hash was recorded), or that is a link, is
removed here so that the run draws it again: its seed gives the bytes the first run wrote.
The hashes are read through the content-hash cache (:mod:`robustlab.records.content_hash`),
so a rerun reads each file once, and later reruns only the files changed since.

A folder generated before robustlab recorded hashes has none to compare with: its files
are taken as they are and their hashes recorded now (one line says so), so that every
later run and evaluation checks them.

In a folder behind a URL only the objects no journal records are drawn again (found by
listing); their bytes are not read back (that would cost what generating them did), so an
object replaced there is found by ``evaluate``, which checks each file it reads.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import level_key
from robustlab.files.hashes import Journal, recorded_digests, records_hashes
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.pipeline import cell_path

if TYPE_CHECKING:  # a field's type only
    from robustlab.workflows.generate.plan import GeneratePlan

log = logging.getLogger(__name__)


def check_written(
    plan: GeneratePlan, folder: LocalFolder | UrlFolder, prev: dict | None, journal: Journal
) -> list[str]:
    """Remove the planned cells' files that are not what generate wrote; returns their
    paths (relative to the folder), which this run draws again.

    Args:
        plan: The :class:`~robustlab.workflows.generate.plan.GeneratePlan`.
        folder: The output folder (only a local one is checked).
        prev: Its manifest before this run (None: a new folder, nothing to check).
        journal: This run's journal, where an earlier version's files are recorded.
    """
    if prev is None:
        return []
    if isinstance(folder, UrlFolder):
        return _unrecorded_objects(plan, folder, prev)
    from robustlab.records.content_hash import hash_files

    found = list(_found(plan, folder.root))
    stale = [path for *_, path, link in found if link]  # never generate's own file
    files = [(sid, shift, level, path) for sid, shift, level, path, link in found if not link]
    on_disk = hash_files([path for *_, path in files])
    if records_hashes(prev):
        recorded = recorded_digests(folder, prev, plan.cells)
        stale += [
            path
            for (sid, shift, level, path), now in zip(files, on_disk)
            if now != recorded.get(sid, shift, level)
        ]
    else:
        _adopt(folder, files, on_disk, journal)
    for path in stale:
        path.unlink(missing_ok=True)
    rels = [path.relative_to(folder.root).as_posix() for path in stale]
    if rels:
        log.warning(
            "%d file(s) in %s were not what generate wrote (replaced, or written by a "
            "killed run before their hashes were recorded), drawn again: %s%s",
            len(rels),
            folder,
            ", ".join(rels[:3]),
            f" and {len(rels) - 3} more" if len(rels) > 3 else "",
        )
    return rels


def _unrecorded_objects(plan: Any, folder: UrlFolder, prev: dict) -> list[str]:
    """Remove the planned objects of a URL folder that no journal records (a killed run's
    in flight); an earlier version's folder has no journals: nothing is removed."""
    if not records_hashes(prev):
        return []
    recorded = recorded_digests(folder, prev, plan.cells)
    present = folder.files_under(plan.names)
    stale = []
    for sample in plan.samples:
        for shift, level in plan.cells:
            rel = cell_path("", sample, shift, level, plan.protocol).as_posix()
            if rel in present and recorded.get(sample.id, shift, level) is None:
                stale.append(rel)
    for rel in stale:
        folder.remove(rel)
    if stale:
        log.warning(
            "%d object(s) in %s were written by a killed run before their hashes were "
            "recorded, drawn again: %s",
            len(stale),
            folder,
            ", ".join(stale[:3]),
        )
    return stale


def _adopt(folder, files: list, on_disk: list, journal: Journal) -> None:
    """Record the hashes of an earlier version's files as they are (none was recorded)."""
    adopted: dict[str, list[tuple[str, str, str]]] = {}
    for (sid, shift, level, _), now in zip(files, on_disk):
        adopted.setdefault(sid, []).append((shift, level_key(level), str(now)))
    for sid, entries in adopted.items():
        journal.add(sid, entries)
    if files:
        log.info(
            "%s was generated by an earlier robustlab that recorded no content hashes: the "
            "hashes of its %d files are recorded now, as they are",
            folder,
            len(files),
        )


def _found(plan: Any, root: Path) -> Iterator[tuple[str, str, Any, Path, bool]]:
    """``(sample id, shift, level, path, is a link)`` of every planned cell file present
    (a link is never followed: it may lead out of the folder)."""
    for sample in plan.samples:
        for shift, level in plan.cells:
            path = cell_path(root, sample, shift, level, plan.protocol)
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode) or stat.S_ISREG(mode):
                yield sample.id, shift, level, Path(path), stat.S_ISLNK(mode)
