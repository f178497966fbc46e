"""Writing an export: shards planned up front, each written to a temp file and renamed into
place, the export's record updated after each, so a killed export resumes.

Why shards are planned before any is written: the rows of shard k, and so its bytes, are
fixed by the folder's content and the shard limits alone (the files' sizes decide where a
shard ends). A rerun plans the same shards, finds the ones already in place (renamed only
when complete, with the size the record gives) and writes only the others; a rerun over a
folder whose content changed is another export (``export_id``), refused in the same folder
instead of mixing old and new shards.

The bytes of each file are read once: hashed (the check against the recorded hash) and
written as they are.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustlab.data.exported import FORMAT, HF_DIR, RECORD, SPLIT, Row
from robustlab.errors import InputChangedError, environment_errors
from robustlab.workflows.export.plan import ExportPlan, Item

log = logging.getLogger(__name__)

FORMATS = ("hf", "webdataset")
DEFAULT_SHARD_BYTES = 512 * 2**20  # about the size datasets and the Hub use for Parquet


@dataclass(frozen=True)
class ShardPlan:
    """One shard: its file (relative to the export) and its items' range."""

    file: str
    start: int
    stop: int


@dataclass
class ExportResult:
    """What an export wrote (counted from its record after the work)."""

    out: Path
    format: str
    export_id: str
    rows: int
    shards: int
    written: int  # shards written by this run
    resumed: int  # shards already in place
    skipped: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def plan_shards(items: list[Item], fmt: str, max_bytes: int, max_images: int | None):
    """Consecutive items per shard: a shard ends before the item that would take it past
    ``max_bytes`` (by file size) or ``max_images``; every shard holds at least one item."""
    from robustlab.errors import environment_errors

    bounds, start, size = [], 0, 0
    for i, it in enumerate(items):
        with environment_errors(f"cannot read {it.path}"):
            n = it.path.stat().st_size
        full = max_images is not None and i - start >= max_images
        if i > start and (size + n > max_bytes or full):
            bounds.append((start, i))
            start, size = i, 0
        size += n
    if start < len(items) or not bounds:
        bounds.append((start, len(items)))
    total = len(bounds)
    if fmt == "hf":
        names = [f"{HF_DIR}/{SPLIT}-{k:05d}-of-{total:05d}.parquet" for k in range(total)]
    else:
        names = [f"{SPLIT}-{k:06d}.tar" for k in range(total)]
    return [ShardPlan(name, a, b) for name, (a, b) in zip(names, bounds)]


def export_id(plan: ExportPlan, fmt: str, shards: list[ShardPlan]) -> str:
    """The identity of an export: its format, shards and every item by content."""
    from robustlab.records.identity import data_fingerprint

    head: list[tuple] = [(fmt, FORMAT, json.dumps(_protocol(plan), sort_keys=True))]
    head += [(s.file, s.start, s.stop) for s in shards]
    body = [
        (it.source_id, it.class_name, it.label, it.shift, it.level, it.rel, it.expected, it.read)
        for it in plan.items
    ]
    return data_fingerprint([*head, *body])


def _protocol(plan: ExportPlan) -> dict:
    return plan.protocol_values


def fill_hashes(plan: ExportPlan) -> None:
    """Give every item the hash it must have: the recorded one, else its content hash now
    (through the content-hash cache), so the export's identity is its content."""
    import dataclasses

    from robustlab.records.content_hash import MISSING, hash_files

    todo = [i for i, it in enumerate(plan.items) if it.expected is None]
    if not todo:
        return
    found = hash_files([plan.items[i].path for i in todo])
    for i, d in zip(todo, found):
        plan.items[i] = dataclasses.replace(plan.items[i], expected=None if d == MISSING else d)


def row_of(plan: ExportPlan, it: Item, digest: str) -> Row:
    """The exported row of ``it`` whose bytes hash to ``digest``."""
    robust: dict[str, Any] = {"format": FORMAT, "read": it.read, "protocol": _protocol(plan)}
    robust |= {"origin": plan.origin, "suite_version": plan.suite_version}
    return Row(
        source_id=it.source_id,
        class_name=it.class_name,
        label=it.label,
        shift=it.shift,
        level=it.level,
        seed=plan.seed,
        suite=plan.suite,
        label_space=plan.label_space.name,
        params=it.params,
        attributes=it.attributes,
        review=it.review,
        content_hash=digest,
        robustlab=robust,
        path=it.rel,
    )


def read_checked(it: Item) -> tuple[bytes | None, str]:
    """(the file's bytes, their hash), or (None, why) for a file that cannot be read or is
    not what the folder recorded."""
    from robustlab.files.hashes import digest

    try:
        data = it.path.read_bytes()
    except OSError as exc:
        return None, f"cannot read {it.rel}: {exc.strerror or exc}"
    got = digest(data)
    if it.expected is not None and got != it.expected:
        what = "generate wrote" if it.read == "stored" else "the folder recorded"
        return None, (
            f"the file's content is not what {what} (BLAKE2b {got[:12]}..., recorded "
            f"{it.expected[:12]}...)"
        )
    return data, got


class Record:
    """The export's ``robustlab-export.json``, rewritten atomically after each shard."""

    def __init__(self, out: Path, body: dict):
        self.path = out / RECORD
        self.body = body

    def save(self) -> None:
        from robustlab.files.atomic import atomic_write

        with environment_errors(f"cannot write {self.path}"):
            atomic_write(self.path, json.dumps(self.body, indent=1, default=str).encode())


def previous_record(out: Path) -> dict | None:
    path = out / RECORD
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def check_resume(out: Path, prev: dict | None, ident: str, fmt: str) -> dict[str, Any]:
    """The shards of an earlier run of the same export that are in place: ``file ->
    entry``. An earlier export of other content into ``out`` is refused."""
    if prev is None:
        return {}
    if prev.get("format") != FORMAT or prev.get("export_id") != ident:
        what = "another format" if prev.get("shard_format") not in (None, fmt) else "other content"
        raise InputChangedError(
            f"{out} holds an export of {what} (export {prev.get('export_id')}, this one "
            f"{ident}): the folder's images, labels or the shard limits changed",
            hint="export into a new --out (or delete this one)",
        )
    done = {}
    for entry in prev.get("shards") or []:
        if not isinstance(entry, dict) or entry.get("bytes") is None:
            continue
        path = out / str(entry.get("file"))
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size == entry["bytes"]:
                done[str(entry["file"])] = entry
        except OSError:
            continue
    return done


def rows_skipped(plan: ExportPlan) -> list[dict]:
    return [
        {"id": sid, "shift": sh, "level": lv, "reason": why} for sid, sh, lv, why in plan.skipped
    ]


__all__ = [
    "DEFAULT_SHARD_BYTES",
    "ExportResult",
    "FORMATS",
    "Record",
    "ShardPlan",
    "check_resume",
    "export_id",
    "fill_hashes",
    "plan_shards",
    "previous_record",
    "read_checked",
    "row_of",
]
