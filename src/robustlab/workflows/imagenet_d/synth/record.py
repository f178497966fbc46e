"""A synth folder's records: ``manifest.json`` (identity, vocabularies, counts, failures,
runs), ``prompts.csv`` (the whole grid) and ``labels.csv`` (the images that exist).

The rules every folder record follows (identity first, one entry per run, counts from
disk, merged under the lock) are :mod:`robustlab.records.folder_record`'s; this module says
what a synth folder's records hold.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from robustlab.errors import InputChangedError, InputError
from robustlab.files.atomic import atomic_write
from robustlab.records.manifest import SYNTH_PREFIX
from robustlab.records.folder_record import (
    FolderRun,
    count_files,
    library_versions,
    now,
    refuse_changes,
)
from robustlab.workflows.imagenet_d.synth.prompts import PromptItem

FORMAT = f"{SYNTH_PREFIX}1"
PROMPTS = "prompts.csv"
LABELS = "labels.csv"
PROMPT_COLUMNS = ("file", "class", "subset", "nuisance", "k", "prompt", "seed")
ML_LIBRARIES = ("torch", "diffusers", "transformers")


def check_identity(prev: dict | None, identity: dict, path: Path) -> None:
    """Refuse to add images made another way to a folder; say which settings differ."""
    if prev is None:
        return
    if prev.get("format") != FORMAT:
        raise InputChangedError(
            f"{path} is not a robustlab synth manifest ({prev.get('format')!r})",
            hint="use a new --out folder",
        )
    refuse_changes(
        path.parent,
        _identity_changes(prev.get("identity") or {}, identity),
        made="was synthesised with other settings",
        hint="use a new --out folder to synthesise with other settings",
    )


def _identity_changes(old: dict, identity: dict) -> list[str]:
    """One phrase per identity key both sides record with another value (a template per
    subset: a new subset is an addition, not a change)."""
    changed = []
    for key, value in identity.items():
        if key == "templates":
            before = old.get(key) or {}
            changed += [
                f"template of {s} ({before[s]!r} -> {t!r})"
                for s, t in value.items()
                if s in before and before[s] != t
            ]
        elif key in old and old[key] != value:
            changed.append(f"{key} ({old[key]!r} -> {value!r})")
    return changed


def merge_prompts(path: Path, grid: list[PromptItem]) -> dict[str, dict]:
    """The previous runs' prompts.csv rows (keyed by file) updated with this grid."""
    rows: dict[str, dict] = {}
    if path.is_file():
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                rows = {r["file"]: r for r in csv.DictReader(fh)}
        except (OSError, csv.Error, KeyError) as exc:
            raise InputError(
                f"cannot read {path}: {exc}", hint="move it away to start over"
            ) from None
    for item in grid:
        rows[item.file] = {
            "file": item.file,
            "class": item.class_folder,
            "subset": item.subset,
            "nuisance": item.nuisance,
            "k": str(item.k),
            "prompt": item.prompt,
            "seed": str(item.seed),
        }
    return dict(sorted(rows.items()))


def _csv_bytes(rows, columns) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode()


def write_prompts(path: Path, rows: dict[str, dict]) -> None:
    atomic_write(path, _csv_bytes(rows.values(), PROMPT_COLUMNS))


def write_labels(out_root: Path, rows: dict[str, dict]) -> None:
    """labels.csv of the images that exist (a CSV listing missing files would make every
    reader report them)."""
    present = [r for f, r in rows.items() if (out_root / f).is_file()]
    atomic_write(out_root / LABELS, _csv_bytes(present, PROMPT_COLUMNS))


def begin_manifest(prev, identity, ckpt, vocabs, templates, rows, run: FolderRun) -> dict:
    """The manifest written before the first image: the identity, the vocabularies (a
    union over runs), earlier counts and failures, and this run's ``running`` entry."""
    prev = prev or {}
    vocab_records = {v["subset"]: v for v in prev.get("vocabularies", [])}
    vocab_records.update(
        {v.subset: {"subset": v.subset, "source": v.source, "n": len(v.names)} for v in vocabs}
    )
    return {
        "format": FORMAT,
        "identity": identity,
        "checkpoint": {k: ckpt.get(k) for k in ("path", "fingerprint", "pipeline", "scheduler")},
        "versions": library_versions(ML_LIBRARIES),
        "seed_rule": "derive_seed(seed, class_folder, 'synth/<subset>/<nuisance>', k) -> torch CPU generator",
        "layout": "<out>/<subset>/<class folder>/<nuisance>_<k>.png",
        "prompts_file": PROMPTS,
        "labels_file": LABELS,
        "templates": templates,
        "vocabularies": sorted(vocab_records.values(), key=lambda v: v["subset"]),
        "grid_size": len(rows),
        "counts": (prev.get("counts") or {}),
        "failures": prev.get("failures", []),
        "created_at": prev.get("created_at", run.record["started_at"]),
        "updated_at": now(),
        # A run still "running" whose process is gone was killed: said so now.
        "runs": run.runs(prev.get("runs", [])),
    }


def finish_manifest(
    manifest: dict,
    written: int,
    existing: int,
    failed: Sequence[tuple[str, str]],
    run: FolderRun,
    grid: list[PromptItem],
    out_root: Path,
) -> dict:
    """This run's outcome merged into ``manifest`` (the one on disk now): a failure retried
    now either failed again or exists; this run's record replaces its ``running`` one.

    ``counts.written`` is the number of images in the folder, counted on disk: a sum of
    what each process wrote would miss a killed run's images and count an image twice
    when two runs draw into one folder."""
    considered = {i.file for i in grid}
    failures = {
        d["file"]: d["reason"]
        for d in manifest.get("failures", [])
        if d.get("file") not in considered
    }
    failures.update(dict(failed))
    manifest = dict(manifest)
    manifest["runs"] = run.runs(manifest.get("runs", []))
    manifest["failures"] = [{"file": f, "reason": r} for f, r in sorted(failures.items())]
    subsets = [v["subset"] for v in manifest.get("vocabularies", [])]
    manifest["counts"] = {
        "written": images_on_disk(out_root, subsets),
        "written_this_run": written,
        "existing": existing,
        "failed": len(failures),
        "planned_this_run": len(grid),
    }
    manifest["updated_at"] = now()
    return manifest


def images_on_disk(out_root: Path, subsets: Sequence[str]) -> int:
    """PNG images under the subset folders of a synth folder (temp files not counted)."""
    return count_files(out_root, subsets, lambda f: f.endswith(".png") and not f.startswith("."))
