"""``robustlab export``: a folder robustlab wrote (``generate``, ``synth``, ``mine``) as a
Hugging Face dataset (Parquet shards) or WebDataset tar shards, the stored bytes as they
are, resumable, and read back by ``evaluate`` with the same cells and numbers.

:func:`export` plans the rows (:mod:`~robustlab.workflows.export.plan`), the shards
(:mod:`~robustlab.workflows.export.write`), writes each missing shard and the dataset card
(:mod:`~robustlab.workflows.export.card`); the shard formats and their readers are
:mod:`robustlab.data.exported`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from robustlab.data.exported import FORMAT, ParquetShard, TarShard, remove_stale_temps
from robustlab.errors import InputError
from robustlab.workflows.export.plan import ExportPlan, plan_export
from robustlab.workflows.export.write import (
    DEFAULT_SHARD_BYTES,
    FORMATS,
    ExportResult,
    Record,
    ShardPlan,
    check_resume,
    export_id,
    fill_hashes,
    plan_shards,
    previous_record,
    read_checked,
    row_of,
    rows_skipped,
)

log = logging.getLogger(__name__)


def export(
    data,
    out,
    *,
    format: str = "hf",
    shard_size: int = DEFAULT_SHARD_BYTES,
    shard_images: int | None = None,
    labels=None,
    progress: bool = True,
) -> ExportResult:
    """Write folder ``data`` into ``out`` as a Hugging Face dataset (``format="hf"``:
    ``data/test-*.parquet`` and a dataset card) or WebDataset shards (``"webdataset"``:
    ``test-*.tar``), resuming an interrupted export into the same ``out``.

    Args:
        data: A ``generate``, ``synth`` or ``mine`` output folder.
        out: The export's folder.
        format: ``hf`` or ``webdataset``.
        shard_size: Largest shard, in bytes of image files (a shard holds one image at
            least).
        shard_images: Most images per shard (None: no limit).
        labels: A labels CSV to read the folder with (a review's export for a mined
            subset: only its kept files, with their agreed classes and verdicts).
        progress: Show a progress bar.

    Raises:
        InputError: ``data`` is no folder robustlab wrote, or an option is out of range.
        InputChangedError: ``out`` holds an export of other content.
    """
    from robustlab.files.safety import claim_out_folder

    if format not in FORMATS:
        raise InputError(f"--format must be one of {', '.join(FORMATS)}, not {format!r}")
    if int(shard_size) < 1 or (shard_images is not None and int(shard_images) < 1):
        raise InputError("shard limits must be 1 or more")
    started = time.perf_counter()
    plan = plan_export(Path(data), Path(labels) if labels else None)
    fill_hashes(plan)
    shards = plan_shards(plan.items, format, int(shard_size), shard_images)
    ident = export_id(plan, format, shards)
    out = claim_out_folder(out, command="export")
    remove_stale_temps(out)
    done = check_resume(out, previous_record(out), ident, format)
    record = Record(out, _record_body(plan, format, ident, shards, shard_size, shard_images))
    record.body["shards"] = [done.get(s.file, {"file": s.file}) for s in shards]
    record.save()
    written = 0
    bar = _bar(len(plan.items), progress, sum(s.stop - s.start for s in shards if s.file in done))
    try:
        for k, shard in enumerate(shards):
            if shard.file in done:
                continue
            record.body["shards"][k] = _write_shard(out, plan, shard, format, bar)
            written += 1
            record.save()
    finally:
        if bar is not None:
            bar.close()
    from robustlab.workflows.export.card import write_card

    entries = record.body["shards"]
    record.body["skipped"] = rows_skipped(plan) + [s for e in entries for s in e.get("skipped", [])]
    record.body["rows"] = sum(int(e.get("rows") or 0) for e in entries)
    record.body["status"] = "complete"
    write_card(out, plan, record.body)
    record.save()
    result = ExportResult(
        out=out,
        format=format,
        export_id=ident,
        rows=record.body["rows"],
        shards=len(shards),
        written=written,
        resumed=len(done),
        skipped=record.body["skipped"],
        seconds=time.perf_counter() - started,
    )
    return result


def _record_body(plan: ExportPlan, fmt: str, ident: str, shards, shard_size, shard_images) -> dict:
    import dataclasses

    return {
        "format": FORMAT,
        "status": "running",
        "export_id": ident,
        "shard_format": fmt,
        "shard_size": int(shard_size),
        "shard_images": shard_images,
        "data": str(plan.root.resolve()),
        "origin": plan.origin,
        "suite": plan.suite,
        "suite_version": plan.suite_version,
        "label_space": plan.label_space.name,
        "seed": plan.seed,
        "protocol": dataclasses.asdict(plan.protocol),
        "planned_rows": len(plan.items),
        "provenance": plan.provenance,
    }


def _write_shard(out: Path, plan: ExportPlan, shard: ShardPlan, fmt: str, bar) -> dict:
    """Write one shard (temp file, renamed when complete); its record entry."""
    names = plan.label_space.folders if plan.label_space is not None else None
    path = out / shard.file
    writer = ParquetShard(path, names) if fmt == "hf" else TarShard(path)
    skipped = []
    try:
        for i in range(shard.start, shard.stop):
            it = plan.items[i]
            data, digest = read_checked(it)
            if data is None:
                skipped.append(
                    {"id": it.source_id, "shift": it.shift, "level": it.level, "reason": digest}
                )
            else:
                row = row_of(plan, it, digest)
                if isinstance(writer, TarShard):
                    writer.add(f"{i:08d}", row, data)
                else:
                    writer.add(row, data)
            if bar is not None:
                bar.update(1)
        size = writer.close()
    except BaseException:
        writer.abort()
        raise
    return {"file": shard.file, "rows": writer.rows, "bytes": size, "skipped": skipped}


def _bar(total: int, progress: bool, initial: int):
    if not progress:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="img", desc="export", leave=False)


__all__ = ["DEFAULT_SHARD_BYTES", "FORMATS", "ExportResult", "export", "plan_export"]
