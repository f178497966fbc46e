"""The manifest of a generated folder: its identity, its history, and safe updates.

A generated folder is only trustworthy if every file in it was made under the same
settings from the same source bytes. So the manifest is written *before* the first file
(``status: "running"``) with everything that decides the pixels:

- ``seed``, ``suite`` (name and version), ``protocol`` (format, size, JPEG quality),
  ``data.masks`` (the masks folder),
- per cell: the shift's ``params``; for ``ai_bg``, the inpainting checkpoint's
  fingerprint (``inpainter``); for background-donor shifts, a fingerprint of the donor pool
  (``donors``: another image in the pool changes which donor each sample draws),
- per source image (``samples``): ``[class, image hash, mask hash]`` (BLAKE2b of the file
  bytes; see :mod:`robustlab.records.content_hash`).

A rerun compares itself with that record (:func:`identity_changes`) and refuses with an
:class:`~robustlab.errors.InputChangedError` naming what changed (``seed 0 -> 7``); more
cells, more levels or more images under the same identity extend the folder. A source image
or mask whose bytes changed is refused, not regenerated: its old pixels may also live in
other images' cells as a background donor, which no per-sample regeneration would fix.

Every read-merge-write of the manifest happens under an exclusive ``flock`` on
``<out>/.manifest.lock``, so two generates into one folder keep both runs in ``runs``.

This module is the manifest's one home: its name (:data:`MANIFEST`), its writer
(:func:`write_manifest`, the bytes of :func:`json_bytes`, the format every folder record
of generate, synth and mine has) and its readers (:func:`load_manifest` for a rerun,
:func:`read_generated` / :func:`read_synth` for a folder being read as data, behind the
safety rule of :func:`robustlab.files.safety.named_file`; :func:`read_record` and
:func:`record_format` for a lenient look). Workflows say what a manifest holds; none of
them names the file or spells its JSON.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from robustlab.errors import InputError
from robustlab.files.safety import named_file
from robustlab.processes import process_alive

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
FORMAT = "robustlab-generate/1"
GENERATE_PREFIX = "robustlab-generate/"  # the format of a folder generate wrote
SYNTH_PREFIX = "robustlab-synth/"  # the format of a folder synth wrote
HINT = "use a new --out folder (or delete this one) to generate with other settings"


@contextlib.contextmanager
def manifest_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``out``'s manifest for one read-merge-write (the lock file
    ``.manifest.lock`` is there only while a process holds it)."""
    from robustlab.locks import file_lock

    out.mkdir(parents=True, exist_ok=True)
    with file_lock(
        out / LOCK, timeout=3600.0, hint="another robustlab process is writing this folder"
    ):
        yield


def load_manifest(path: Path) -> dict | None:
    """The manifest at ``path``; None when there is none; InputError when unreadable."""
    if not path.is_file():
        return None
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InputError(
            f"cannot read the previous manifest {path}: {exc}", hint="move it away to start over"
        ) from None
    return parse_manifest(text, path)


def is_generated_folder(root: Path) -> bool:
    """Whether folder ``root`` holds a manifest written by ``generate`` (its first file):
    the folder is generate's own, so a rerun may resume there."""
    return record_format(Path(root) / MANIFEST).startswith(GENERATE_PREFIX)


def read_record(path: Path) -> dict | None:
    """A folder record (a manifest, ``mining.json``...) read leniently: None when absent;
    ``{}`` when unreadable, which matches no identity and so is refused by the caller's
    comparison."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_format(path: Path) -> str:
    """The ``format`` a folder record at ``path`` declares (``""``: none, or unreadable)."""
    return str((read_record(path) or {}).get("format", ""))


def read_manifest(root: Path, prefix: str, *, what: str) -> dict | None:
    """The manifest of folder ``root`` when its ``format`` starts with ``prefix``; None for
    a folder without one or with another tool's. Found by its fixed name under the rule of
    :func:`robustlab.files.safety.named_file` (a link out of ``root`` is refused in one
    line, never followed); a manifest that is not JSON is an InputError naming it."""
    found = named_file(root, MANIFEST, what=what)
    if found is None:
        return None
    try:
        data = json.loads(found.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {found}: {exc}") from None
    ok = isinstance(data, dict) and str(data.get("format", "")).startswith(prefix)
    return data if ok else None


def read_generated(root: Path) -> dict | None:
    """The manifest of a folder written by ``robustlab generate``, or None for a source folder."""
    return read_manifest(root, GENERATE_PREFIX, what="the generated folder's manifest")


def read_synth(root: Path) -> dict | None:
    """The manifest of a folder written by ``robustlab synth``, or None for any other."""
    return read_manifest(root, SYNTH_PREFIX, what="the synth folder's manifest")


def jsonable(x: Any) -> Any:
    """Parameters as JSON: dataclasses, tuples, numpy scalars and arrays included."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return jsonable(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def json_bytes(data: dict) -> bytes:
    """A folder record's bytes: ``json.dumps(..., indent=2)`` plus a newline, values through
    :func:`jsonable` (the format every written folder has)."""
    return (json.dumps(jsonable(data), indent=2) + "\n").encode()


class _Folder(Protocol):
    def write(self, rel: str, data: bytes) -> None: ...


def write_manifest(folder: _Folder, data: dict) -> None:
    """Write ``data`` as ``folder``'s manifest (atomically: ``LocalFolder``/``UrlFolder``
    write through a temp file or one PUT). Call it under the folder's lock, with what was
    merged into the manifest on disk now (:func:`robustlab.records.folder_record.update_record`)."""
    folder.write(MANIFEST, json_bytes(data))


def parse_manifest(text: bytes | str, where: Path | str) -> dict | None:
    """A manifest's JSON (read from a file or a URL); InputError naming ``where`` when
    it is not JSON (a manifest is written atomically, so only a foreign file is)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(
            f"cannot read the previous manifest {where}: {exc}", hint="move it away to start over"
        ) from None
    return data if isinstance(data, dict) else None


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


def identity_changes(
    prev: dict, new: dict, resources: Mapping[str, str] | None = None
) -> list[str]:
    """What differs between a folder's manifest ``prev`` and this run's identity ``new``.

    ``new`` has the manifest's shape: ``seed``, ``suite``, ``protocol``, ``data.masks``,
    ``cells`` (dict ``"shift/level"`` -> record) and ``samples``. Only what both sides
    record is compared: a folder made without masks may gain mask-needing cells later, and
    images or cells that only one side has are additions, not changes. ``resources`` maps
    the cell fields that record a configured tool's checkpoint to the tool's name
    (``shifts.registry.resource_nouns()``: the manifest, a record, sits below the shifts
    and does not ask their registry itself).

    Returns:
        One short phrase per difference (``"seed 0 -> 7"``), empty when compatible.
    """
    out = []
    if prev.get("seed") is not None and int(prev["seed"]) != int(new["seed"]):
        out.append(f"seed {prev['seed']} -> {new['seed']}")
    ps, ns = prev.get("suite") or {}, new["suite"]
    for key in ("name", "version"):
        if ps.get(key) is not None and ps.get(key) != ns.get(key):
            out.append(f"suite {key} {ps[key]} -> {ns[key]}")
    pp = prev.get("protocol")
    if pp:
        for key in sorted(set(pp) | set(new["protocol"])):
            if pp.get(key) != new["protocol"].get(key):
                out.append(f"protocol {key} {pp.get(key)} -> {new['protocol'].get(key)}")
    # A file per cell, or (generate --layout npy) the release arrays alone.
    pl, nl = prev.get("cell_layout", "folders"), new.get("cell_layout", "folders")
    if pl != nl:
        out.append(f"cell layout {pl} -> {nl}")
    pm, nm = (prev.get("data") or {}).get("masks"), new["data"].get("masks")
    # Older manifests recorded --masks as typed: a relative path is not comparable.
    if pm and nm and Path(pm).is_absolute() and pm != nm:
        out.append(f"masks folder {pm} -> {nm}")
    for c in prev.get("cells", []):
        key = f"{c.get('shift')}/{c.get('level')}"
        now = new["cells"].get(key)
        if now is None:
            continue
        if now["params"] != c.get("params"):
            out.append(f"parameters of {key} {_short(c.get('params'))} -> {_short(now['params'])}")
        # Checkpoints of configured tools and the hole-fill backend, recorded per cell.
        for field, noun in (resources or {}).items():
            was, now_value = c.get(field), now.get(field)
            if was and now_value and was != now_value:
                out.append(f"{noun} of {key} {was} -> {now_value}")
        if c.get("donors") and now.get("donors") and c["donors"] != now["donors"]:
            out.append(f"donor pool of {key} (images added, removed or changed)")
    out.extend(_content_changes(prev, new))
    return out


def _content_changes(prev: dict, new: dict) -> list[str]:
    """Source images whose class, bytes or mask bytes differ from the recorded ones."""
    old = prev.get("samples") or {}
    unused = {d.get("id") for d in prev.get("skipped_inputs", [])}  # made no files
    changed = []
    for sid, now in new["samples"].items():
        was = old.get(sid)
        if was is None or sid in unused:
            continue
        what = [
            name
            for name, a, b in zip(("class", "image", "mask"), was, now)
            if a is not None and b is not None and a != b
        ]
        if what:
            changed.append(f"{sid} ({', '.join(what)})")
    if not changed:
        return []
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    return [
        f"{len(changed)} source image(s) changed since their files were generated: "
        f"{'; '.join(changed[:3])}{more}"
    ]


def this_process() -> dict:
    """``host`` and ``pid`` of this run, so a later run can tell a killed one."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def mark_dead_runs(runs: list[dict]) -> list[dict]:
    """Runs recorded as ``running`` by a process of this host that no longer exists
    (``kill -9``, power loss) are marked ``killed``."""
    host = socket.gethostname()
    out = []
    for r in runs:
        if r.get("status") == "running" and r.get("host") == host and r.get("pid"):
            if not process_alive(int(r["pid"])):
                r = {**r, "status": "killed"}
        out.append(r)
    return out


def generated_identity(manifest: dict) -> dict:
    """What of a generated folder decides its files' pixels, for an evaluation's run id.

    ``created_at`` tells a folder deleted and generated again at the same place; the
    per-image content is covered by the evaluation's own image hashes, and cell parameters
    cannot change inside one folder (:func:`identity_changes`).
    """
    return {
        "format": manifest.get("format"),
        "seed": manifest.get("seed"),
        "suite": manifest.get("suite"),
        "protocol": manifest.get("protocol"),
        "masks": (manifest.get("data") or {}).get("masks"),
        "created_at": manifest.get("created_at"),
    }


__all__ = [
    "MANIFEST",
    "FORMAT",
    "GENERATE_PREFIX",
    "SYNTH_PREFIX",
    "is_generated_folder",
    "json_bytes",
    "jsonable",
    "read_generated",
    "read_manifest",
    "read_record",
    "read_synth",
    "record_format",
    "write_manifest",
    "manifest_lock",
    "load_manifest",
    "parse_manifest",
    "identity_changes",
    "generated_identity",
    "mark_dead_runs",
    "this_process",
]
