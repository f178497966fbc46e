"""A generated folder's ``manifest.json``: this run's outcome merged into the record on disk.

The rules every folder record follows (identity first, one entry per run, counts from
disk, merged under the lock) are :mod:`robustlab.records.folder_record`'s; this module says
what a generated folder's manifest holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from robustlab.cells import level_key
from robustlab.data.sources import Sample
from robustlab.records.manifest import FORMAT
from robustlab.files.hashes import KEY, RECORD
from robustlab.files.atomic import TEMP_SUFFIX
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.records.folder_record import FolderRun, count_files, library_versions, now
from robustlab.shifts.registry import described_resources

NPY_LAYOUT = "<out>/<shift>.npy (5 x N images in severity order) + labels.npy"


@dataclass
class GenerateResult:
    """Summary of a ``generate`` call (the manifest holds the full record).

    Attributes:
        out: Output folder (its URL when ``out`` was one).
        manifest_path: ``out/manifest.json`` (a URL when ``out`` was one).
        samples: Source images considered.
        cells: (shift, level) cells per image.
        written: Files written by this call.
        skipped_existing: Files found finished and left untouched.
        redrawn: Files found whose content was not what generate wrote (replaced, or
            written by a run killed before it recorded them), drawn again.
        failed: Cells whose shift failed (see ``failures``).
        skipped_inputs: ``(id, reason)`` of sources not used (undecodable, non-image...).
        failures: ``(id, shift, level, reason)`` per failed cell.
        seconds: Wall time.
        stages: With the Ray backend, worker time and rate per pipeline stage.
        release: With ``out_layout="npy"``, the finished arrays' record: their ``shifts`` and
            ``rows`` (the photo id of each row, in order).
    """

    out: Path | str
    manifest_path: Path | str
    samples: int
    cells: int
    written: int = 0
    skipped_existing: int = 0
    redrawn: list[str] = field(default_factory=list)  # found, but not what generate wrote
    failed: int = 0
    skipped_inputs: list[tuple[str, str]] = field(default_factory=list)
    failures: list[tuple[str, str, str, str]] = field(default_factory=list)
    converted: list[tuple[str, str]] = field(default_factory=list)
    attributes: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict = field(default_factory=dict)  # the Ray backend's per-stage throughput
    release: dict | None = None


def cell_files_on_disk(folder: LocalFolder | UrlFolder | Path, cell_keys: Sequence[str]) -> int:
    """Files under the ``<shift>/<level>`` folders of ``cell_keys`` (a local folder or a
    URL), temp files of unfinished writes left out: what the folder holds, whoever wrote it."""
    return count_files(
        folder, cell_keys, lambda f: not (f.startswith(".") and f.endswith(TEMP_SUFFIX))
    )


def merge_manifest(
    prev: dict | None,
    result: GenerateResult,
    identity: dict,
    run: FolderRun,
    samples: Sequence[Sample],
    *,
    final: bool = True,
    on_disk: int | None = None,
) -> dict:
    """This run's record merged into the manifest ``prev`` found on disk.

    Called twice per run, both times under the manifest lock: before the first file
    (``final=False``: identity, cells, source hashes and a ``running`` run entry; earlier
    outcomes untouched) and at the end, merged into whatever is on disk *then*, so that a
    concurrent run's entries survive. Cells and source hashes are unions over runs (a later
    run may add shifts, levels or images); ``runs`` is keyed by run id. Skipped inputs,
    conversions and failures are keyed by sample (and cell): this run's word replaces the
    previous one, and a sample or cell that succeeded now is removed from the lists.
    ``counts.written`` is ``on_disk``, the cell files in the folder counted when this run
    ended; the rest describe the state after this run.
    """
    prev = prev or {}
    skipped, converted, failures = _outcomes(prev)
    counts = dict(prev.get("counts") or {})
    if final:
        skipped, converted, failures = _merge_outcomes(
            (skipped, converted, failures), result, samples, identity["cells"]
        )
        counts = {
            "written": int(on_disk or 0),
            "written_this_run": result.written,
            "skipped_existing": result.skipped_existing,
            "failed": len(failures),
            "skipped_inputs": len(skipped),
        }
    all_cells = {f"{c['shift']}/{c['level']}": c for c in prev.get("cells", [])}
    all_cells.update(identity["cells"])
    content = dict(prev.get("samples") or {})
    content.update(identity["samples"])
    npy = identity.get("cell_layout") == "npy"
    release = {"release": result.release or prev.get("release")} if npy else {}
    return {
        "format": FORMAT,
        "status": run.status,
        "versions": library_versions(),
        "seed": identity["seed"],
        "seed_rule": "derive_seed(seed, sample_id, shift, level) -> PCG64",
        "suite": identity["suite"],
        "protocol": identity["protocol"],
        "data": identity["data"],
        "layout": NPY_LAYOUT if npy else "<out>/<shift>/<level>/<class>/<file>",
        **({"cell_layout": "npy"} if npy else {}),
        **release,
        # Each run's hashes of the files it wrote (robustlab.files.hashes).
        KEY: RECORD,
        "cells": list(all_cells.values()),
        "counts": counts,
        "skipped_inputs": [{"id": k, "reason": v} for k, v in sorted(skipped.items())],
        "converted": [{"id": k, "note": v} for k, v in sorted(converted.items())],
        "failures": [
            {"id": k[0], "shift": k[1], "level": k[2], "reason": v}
            for k, v in sorted(failures.items())
        ],
        "created_at": prev.get("created_at", run.record["started_at"]),
        "updated_at": now(),
        "runs": run.runs(prev.get("runs", [])),
        # Each configured tool (ai_bg's inpainter, bg_complexity's diffusion model, the
        # attribute edits' hole-fill backend) of the latest run that drew its cells (None:
        # never drawn here).
        **{key: run.record.get(key) or prev.get(key) for key in described_resources()},
        # id -> [class, image BLAKE2b, mask BLAKE2b]: a rerun refuses changed sources.
        "samples": dict(sorted(content.items())),
    }


def _outcomes(prev: dict) -> tuple[dict, dict, dict]:
    """(skipped inputs by id, conversions by id, failures by (id, shift, level)) of a
    manifest."""
    skipped = {d["id"]: d["reason"] for d in prev.get("skipped_inputs", [])}
    converted = {d["id"]: d["note"] for d in prev.get("converted", [])}
    failures = {
        (d.get("id"), d.get("shift"), level_key(d.get("level"))): d.get("reason")
        for d in prev.get("failures", [])
    }
    return skipped, converted, failures


def _merge_outcomes(
    previous: tuple[dict, dict, dict],
    result: GenerateResult,
    samples: Sequence[Sample],
    cells: dict,
) -> tuple[dict, dict, dict]:
    """The previous outcomes with this run's word on every sample and cell it considered:
    a cell considered again either failed again or now exists."""
    skipped, converted, failures = previous
    done_ids = {s.id for s in samples}
    skipped = {k: v for k, v in skipped.items() if k not in done_ids}
    skipped.update(dict(result.skipped_inputs))
    converted = {**converted, **dict(result.converted)}
    failures = {
        k: v for k, v in failures.items() if not (k[0] in done_ids and f"{k[1]}/{k[2]}" in cells)
    }
    failures.update({(i, s, lv): r for i, s, lv, r in result.failures})
    return skipped, converted, failures
