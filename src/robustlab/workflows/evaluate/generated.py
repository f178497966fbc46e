"""Folders written by ``robustlab generate`` read back for an evaluation: their manifest,
the cells they hold, the skips they recorded and the fingerprint of their files.
"""

from __future__ import annotations

import logging
from pathlib import Path

from robustlab.cells import level_key
from robustlab.errors import InputChangedError, InputError
from robustlab.store import CLEAN_SHIFT

log = logging.getLogger(__name__)


def generated_inputs(root: Path, manifest: dict, suite, seed, labels_csv, masks):
    """Suite, protocol, seed, source folder and CSV/masks of a generated folder, checked
    against what the caller asked for."""
    import dataclasses

    from robustlab.suites import Protocol, get_suite

    m_suite = (manifest.get("suite") or {}).get("name")
    if suite is None and not m_suite:
        raise InputError(f"{root}'s manifest names no suite", hint="pass --suite")
    if suite is not None and isinstance(suite, str) and suite != m_suite:
        raise InputChangedError(f"{root} was generated for suite {m_suite!r}, not {suite!r}")
    from robustlab.seeding import check_seed

    # A manifest is input too: a seed outside the rule (2**70, written before the rule
    # held at generate) would fail only where the database stores it.
    m_seed = check_seed(manifest.get("seed", 0), f"{root}'s manifest: seed")
    if seed is not None and int(seed) != m_seed:
        raise InputChangedError(f"{root} was generated with seed {m_seed}, not {seed}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(
        **{k: v for k, v in (manifest.get("protocol") or {}).items() if k in fields}
    )
    data = manifest.get("data") or {}
    source = Path(data.get("root") or "")
    if not source.is_dir():
        raise InputError(
            f"the source images of {root} ({source}) are not there; the clean "
            "cell is read from them"
        )
    available = {(c["shift"], level_key(c["level"])) for c in manifest.get("cells", [])}
    return (
        (suite if suite is not None else get_suite(str(m_suite))),
        protocol,
        m_seed,
        source,
        labels_csv or data.get("labels_csv"),
        masks or data.get("masks"),
        available,
    )


def generated_skips(manifest: dict) -> dict[tuple[str, str | None, str | None], str]:
    """Why the generate runs of a folder wrote no file for a cell (its manifest's
    ``failures``) or for a whole source (``skipped_inputs``): the reasons a run on the
    folder records for those cells (:class:`robustlab.execution.tasks.CellImages`)."""
    out: dict[tuple[str, str | None, str | None], str] = {}
    for d in manifest.get("skipped_inputs") or []:
        if isinstance(d, dict) and d.get("id") is not None and d.get("reason"):
            out[(str(d["id"]), None, None)] = str(d["reason"])
    for d in manifest.get("failures") or []:
        if isinstance(d, dict) and d.get("id") is not None and d.get("reason"):
            out[(str(d["id"]), str(d.get("shift")), level_key(d.get("level")))] = str(d["reason"])
    return out


def held_levels(available) -> dict[str, list]:
    """Every shift a generated folder holds with its own levels, each as its shift's table
    names it (``1``, ``"90"``, ``"0.10"``; the manifest writes text) and in the table's
    order: an ImageNet-E folder holds ``obj_size`` at 0.10/0.08/0.05 and ``obj_direction``
    at 90/180/270, never the union of both lists for each."""
    from robustlab.shifts.registry import get_shift

    held: dict[str, set[str]] = {}
    for s, lv in available:
        if s != CLEAN_SHIFT:
            held.setdefault(s, set()).add(level_key(lv))
    out: dict[str, list] = {}
    for s in sorted(held):
        own = list(get_shift(s).levels)
        out[s] = [x for x in own if level_key(x) in held[s]]
        out[s] += sorted(
            (lv for lv in held[s] if lv not in {level_key(x) for x in own}), key=_level_order
        )
    return out


def generated_hint(available) -> str:
    """A request the folder can answer: ``--shift A,B --level 1,3`` naming shifts that were
    generated at the same levels (the largest such group), so the hint runs as printed."""
    levels: dict[str, set[str]] = {}
    for sh, lv in available:
        if sh != CLEAN_SHIFT:
            levels.setdefault(sh, set()).add(level_key(lv))
    groups: dict[tuple[str, ...], list[str]] = {}
    for sh in sorted(levels):
        groups.setdefault(tuple(sorted(levels[sh], key=_level_order)), []).append(sh)
    lvs, shifts = max(groups.items(), key=lambda g: (len(g[0]) * len(g[1]), -len(g[0])))
    more = " (other shifts were generated at other levels)" if len(groups) > 1 else ""
    return (
        f"evaluate what was generated: --shift {','.join(shifts)} --level {','.join(lvs)}"
        f" (shifts={shifts}, levels={[int(v) if v.isdigit() else v for v in lvs]} in Python)"
        f"{more}"
    )


def _level_order(level: str):
    """Numeric levels in numeric order, then any others by name."""
    try:
        return (0, float(level), "")
    except ValueError:
        return (1, 0.0, level)


def expected_digests(root: Path, manifest: dict, samples, available, protocol):
    """The content hash each cell file of a generated folder must have (a
    :class:`robustlab.files.hashes.Digests` over every cell the manifest lists): the hash
    generate recorded as it wrote the file, read from the folder's journals, so planning
    reads no image file; the run checks each file against it as it reads it.

    A folder generated before robustlab recorded hashes has none: its files are hashed
    here, as before (through the content-hash cache), and the run checks each file
    against what it held when the run was planned.
    """
    from robustlab.files.hashes import Digests, recorded_digests, records_hashes

    cells = sorted(c for c in available if c[0] != CLEAN_SHIFT)
    if records_hashes(manifest):
        return recorded_digests(root, manifest, cells)
    from robustlab.pipeline import cell_path
    from robustlab.records.content_hash import hash_files

    keys = [(s, sh, lv) for s in samples for sh, lv in cells]
    digests = Digests(cells)
    found = hash_files([cell_path(root, s, sh, lv, protocol) for s, sh, lv in keys])
    for (s, sh, lv), d in zip(keys, found):
        digests.set(s.id, sh, lv, str(d))
    return digests


def generated_files_fingerprint(samples, available, digests) -> str:
    """Fingerprint of the *content* of every file of a generated folder that this run may
    read: each cell its manifest lists, for each sample evaluated, by the hash it must
    have (:func:`expected_digests`).

    Why: the manifest says how the files were made, not what they hold. A folder whose
    files were generated again (another ``created_at`` aside) must give another run id,
    never a resumed run that keeps the old files' predictions, exactly as a changed source
    photo does. Every listed cell counts, not only the cells asked for, so that asking for
    more cells later still extends the same run; a cell without a file counts as
    ``missing``. The hashes are the recorded ones: a file replaced after generate wrote it
    does not change the run (it is never scored: the run skips it as it reads it).
    """
    from robustlab.records.content_hash import MISSING
    from robustlab.records.identity import data_fingerprint

    cells = sorted(c for c in available if c[0] != CLEAN_SHIFT)
    return data_fingerprint(
        (s.id, sh, lv, digests.get(s.id, sh, lv) or MISSING) for s in samples for sh, lv in cells
    )
