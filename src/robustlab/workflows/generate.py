"""``generate``: write a suite's shifted images to disk in the published layout.

Output: ``<out>/<shift>/<level>/<class>/<file>`` plus ``<out>/manifest.json``, and
``<out>/attributes.csv`` when a shift reports what it achieved per image (the ImageNet-E
attribute edits: object pixel rate, box, angle, complexity before/after, fill backend).

How it stays correct when things go wrong:

- **One work unit per source image.** A worker decodes and prepares the image once and
  writes all of its cells from that, so decoding is never repeated and memory stays flat
  (a bounded number of images is in flight, whatever the dataset size).
- **Seed rule.** Every cell draws from ``derive_seed(seed, sample.id, shift, level)``, so
  the files are identical for any worker count or order.
- **Atomic writes.** A cell is written to a hidden temp file in its own folder and moved
  into place with ``os.replace``; a killed run leaves only temp files, never a
  half-written image. A rerun removes the temp files and skips cells whose file exists.
  ``out`` may also be an fsspec URL (``s3://bucket/prefix``): object stores get one atomic
  PUT per file, other filesystems the temp-and-move (:mod:`robustlab.outputs`).
- **Bad input never stops a run.** A source that cannot be decoded or prepared is
  skipped with its reason; a cell that this input cannot make (the shift raised
  :class:`~robustlab.errors.CellSkipped`) is counted as failed with its reason; a worker
  process that crashes is replaced and its images are retried, then skipped. Everything
  lands in the manifest. Any other exception is a bug: it stops the run (exit 70), and
  the rerun resumes from the files written.
- **One identity per folder.** The manifest, with what decides the pixels, is written
  before the first file; a rerun under other settings or from changed sources is refused
  (:mod:`robustlab.manifest`), so a killed run never resumes under another seed.

Small sources: with the default protocol (resize the shorter side to 256) they are
upscaled, as the reference pipeline does. Without a resize (``keep_size``) a source below
32x32, or below the crop size, is skipped with the reason ``too small: ...``.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime as _dt
import json
import logging
import os
import platform
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustlab.data.images import MAX_PIXELS, ImageError
from robustlab.data.sources import Sample, discover
from robustlab.paths import Folder, check_outputs
from robustlab.errors import CellSkipped, InputError, environment_problem
from robustlab.manifest import (
    FORMAT,
    MANIFEST,
    check_compatible,
    mark_dead_runs,
    this_process,
)
from robustlab.outputs import (
    TEMP_SUFFIX,
    LocalFolder,
    UrlFolder,
    atomic_write,
    open_folder,
    remove_temp_files,
)
from robustlab.pipeline import (
    DONOR_KEYS,
    apply_shift,
    cell_path,
    encode,
    load_prepared,
    shift_context,
)
from robustlab.run.lifeline import default_workers, die_with_parent, worker_context
from robustlab.shifts.kernels import ensure_compiled_for
from robustlab.shifts.process_config import process_settings, task_settings
from robustlab.shifts.registry import (
    available_shifts,
    describe_resources,
    described_resources,
    get_resource,
    get_shift,
)
from robustlab.store.schema import ATTRIBUTE_VALUE_COLUMNS
from robustlab.suites import Protocol, Suite, get_suite, parse_levels

log = logging.getLogger(__name__)

ATTRIBUTES_CSV = "attributes.csv"
# Leading columns of attributes.csv; other reported keys follow in sorted order.
ATTRIBUTE_CSV_COLUMNS = ("file", "sample_id", "shift", "level", *ATTRIBUTE_VALUE_COLUMNS)
MAX_ATTEMPTS = 2  # a sample whose worker process died this often is skipped
LIBRARIES = {  # manifest key -> distribution names to try, in order
    "numpy": ("numpy",),
    "scipy": ("scipy",),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python"),
    "pillow": ("pillow",),
    "scikit-image": ("scikit-image",),
    "numba": ("numba",),
}


# --------------------------------------------------------------------------- results
@dataclass
class SampleOutcome:
    """What happened to one source image (returned by a worker)."""

    id: str
    written: int = 0
    existing: int = 0
    failures: list[tuple[str, str, str]] = field(default_factory=list)  # (shift, level, reason)
    skip_reason: str | None = None
    note: str = ""
    attributes: list[dict] = field(default_factory=list)  # one row per written edit cell


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
        failed: Cells whose shift failed (see ``failures``).
        skipped_inputs: ``(id, reason)`` of sources not used (undecodable, non-image...).
        failures: ``(id, shift, level, reason)`` per failed cell.
        seconds: Wall time.
        stages: With the Ray backend, worker time and rate per pipeline stage.
    """

    out: Path | str
    manifest_path: Path | str
    samples: int
    cells: int
    written: int = 0
    skipped_existing: int = 0
    failed: int = 0
    skipped_inputs: list[tuple[str, str]] = field(default_factory=list)
    failures: list[tuple[str, str, str, str]] = field(default_factory=list)
    converted: list[tuple[str, str]] = field(default_factory=list)
    attributes: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    stages: dict = field(default_factory=dict)  # the Ray backend's per-stage throughput


# --------------------------------------------------------------------------- worker
@dataclass(frozen=True)
class _Job:
    """What every worker needs, sent once per process (not once per image)."""

    out: LocalFolder | UrlFolder
    cells: tuple[tuple[str, Any], ...]
    protocol: Protocol
    seed: int
    max_pixels: int
    need_mask: bool
    donors: Any = None  # DonorPool or None
    # The tools' settings the run was planned with (process_config.process_settings):
    # workers compute with these, never with their own environment.
    settings: Mapping[str, str] | None = None


_JOB: _Job | None = None


def _init_worker(job: _Job, single_thread: bool) -> None:
    global _JOB
    _JOB = job
    if single_thread:
        die_with_parent()  # pool workers must not outlive a killed generate
        # One image per process already fills the cores; nested thread pools would
        # oversubscribe them.
        try:
            import cv2

            cv2.setNumThreads(1)
        except Exception:  # noqa: BLE001 - OpenCV threading is an optimisation only
            pass


def process_sample(sample: Sample, job: _Job | None = None) -> SampleOutcome:
    """Write every missing cell of one source image (the work unit), with the tools'
    settings the job carries."""
    job = job or _JOB
    assert job is not None, "worker not initialised"
    with task_settings(job.settings):
        return _process_sample(sample, job)


def _process_sample(sample: Sample, job: _Job) -> SampleOutcome:
    res = SampleOutcome(sample.id)
    out = job.out
    todo = []
    for name, level in job.cells:
        path = cell_path("", sample, name, level, job.protocol).as_posix()
        if out.exists(path):
            res.existing += 1
        else:
            todo.append((name, level, path))
    if not todo:
        return res  # finished earlier: not even decoded
    try:
        prep = load_prepared(
            sample, job.protocol, with_mask=job.need_mask, max_pixels=job.max_pixels
        )
    except ImageError as exc:
        res.skip_reason = exc.reason
        return res
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        res.skip_reason = f"unreadable: {type(exc).__name__}: {exc}"
        return res
    res.note = prep.note
    for name, level, path in todo:
        try:
            ctx = shift_context(
                sample,
                prep,
                name,
                level,
                job.seed,
                job.protocol,
                job.donors,
                max_pixels=job.max_pixels,
            )
            attrs: dict = {}
            ctx["attributes"] = attrs
            img = apply_shift(prep.rgb, sample.id, name, level, job.seed, ctx)
            out.write(path, encode(img, job.protocol))
            res.written += 1
            if attrs:
                res.attributes.append(
                    {
                        "file": path,
                        "sample_id": sample.id,
                        "shift": name,
                        "level": str(level),
                        **attrs,
                    }
                )
        except (CellSkipped, ImageError) as exc:  # this input cannot make this cell
            log.info("%s %s/%s skipped: %s", sample.id, name, level, exc)
            res.failures.append((name, str(level), str(exc)))
        except OSError as exc:
            problem = environment_problem(exc, f"cannot write {out.location_of(path)}")
            if problem is not exc:  # a full disk fails every cell after it: stop the run
                raise problem from None
            log.warning("%s %s/%s failed: %s: %s", sample.id, name, level, type(exc).__name__, exc)
            res.failures.append((name, str(level), f"{type(exc).__name__}: {exc}"))
        # Any other exception is a bug in a shift or in robustlab: it fails the run with
        # its traceback (the cells written so far stay, so the rerun resumes).
    return res


def _run_in_worker(sample: Sample) -> SampleOutcome:
    return process_sample(sample)


# --------------------------------------------------------------------------- planning
def _jsonable(x: Any) -> Any:
    """Parameters as JSON: dataclasses, tuples, numpy scalars and arrays included."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _jsonable(dataclasses.asdict(x))
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return x.tolist()
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return repr(x)


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries whose behaviour shapes the pixels, for the manifest."""
    from importlib import metadata

    import robustlab

    out: dict[str, str | None] = {
        "robustlab": robustlab.__version__,
        "python": platform.python_version(),
    }
    for key, dists in LIBRARIES.items():
        out[key] = None
        for d in dists:
            try:
                out[key] = metadata.version(d)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _json_bytes(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=False) + "\n").encode()


# --------------------------------------------------------------------------- engine
def generate(
    suite: str | Suite,
    data: str | Path,
    out: str | Path | LocalFolder | UrlFolder,
    *,
    shifts: Sequence[str] | None = None,
    levels: Sequence | str | None = None,
    seed: int = 0,
    workers: int | None = None,
    fmt: str | None = None,
    keep_size: bool = False,
    limit: int | None = None,
    labels_csv: str | Path | None = None,
    masks: str | Path | None = None,
    bboxes: str | Path | None = None,
    max_pixels: int = MAX_PIXELS,
    progress: bool = True,
    backend: str = "local",
    address: str | None = None,
    storage_options: dict | None = None,
    unlabelled: bool = False,
) -> GenerateResult:
    """Generate a suite's cells for every image under ``data`` into ``out``.

    Args:
        suite: Built-in suite name, YAML path, or a :class:`Suite`.
        data: ImageFolder tree or flat folder with a labels CSV (see :func:`discover`).
        out: Output folder, or an fsspec URL (``s3://bucket/prefix``, ``gs://...``; the
            protocol's package, e.g. s3fs, must be installed); rerunning with the same
            arguments resumes. A URL is checked for writing before any work starts.
        shifts: Names, families, tags or globs selecting the suite's shifts (default all).
        levels: Levels to build (``[1, 3]`` or ``"1,3"`` / ``"1-3"``; default all).
        seed: Global seed of the seed rule.
        workers: Worker processes; None (default) one per available CPU, 0 everything in
            this process (the same meaning as in evaluate and train).
        fmt: Output format override (``"png"`` or ``"jpeg"``).
        keep_size: No resize and no crop: shifts run on the source size.
        limit: Use only the first ``limit`` images (sorted by id).
        labels_csv, masks, bboxes: Passed to :func:`discover`.
        unlabelled: Accept a folder whose images have no labels (a flat folder without a
            labels CSV). Refused by default: nothing can score such cells (``evaluate``
            needs a label per image), so hundreds of files would be written for nothing.
        max_pixels: Decompression-bomb limit for sources.
        progress: Show a tqdm progress bar on stderr.
        backend: ``"local"`` (a process pool here) or ``"ray"`` (a Ray cluster: the
            workers write the files, :mod:`robustlab.run.ray_backend`). The files are the
            same byte for byte and the folder's identity does not name the backend, so a
            run started on one resumes on the other.
        address: The Ray cluster's ``HOST:PORT`` (None: a Ray instance on this machine
            with ``workers`` CPUs, 0 meaning all). ``out`` must be a path every node of
            the cluster sees, or a URL.
        storage_options: Options for the URL's fsspec filesystem (``endpoint_url``,
            ``key``...), on top of fsspec's config; never written to the manifest.

    Returns:
        A :class:`GenerateResult`; the manifest at ``out/manifest.json`` holds the record.

    Raises:
        InputChangedError: ``out`` was generated with other inputs (seed, suite, protocol,
            masks folder, cell parameters, inpainter, donor pool, or a source image or
            mask whose bytes changed); the message names each change (``seed 0 -> 7``).
        ValueError: unknown suite/shift/level, missing or empty data folder, or a shift
            that needs masks without them.
    """
    from robustlab.run.executors import check_backend

    check_backend(backend, address)
    folder = open_folder(out, storage_options)
    if isinstance(folder, UrlFolder) and not isinstance(out, UrlFolder):
        if folder.process_local and (backend == "ray" or workers != 0):
            raise InputError(
                f"--out {folder.url} lives in this process only; worker processes would not see it",
                hint="pass --workers 0 (and the local backend), or use a shared URL",
            )
        folder.check_writable()  # before Ray starts or any source is read
    if backend == "ray":
        from robustlab.run.ray_backend import plan_placement, ray_running, ray_session

        if not ray_running():
            # Connect (or start Ray here) and check the cluster before any source is read
            # or any file written; the call below runs in that session.
            cpus = workers if isinstance(workers, int) and workers > 0 else None
            with ray_session(address, cpus) as resources:  # a bad count is refused below
                plan_placement(resources, model=False)
                return generate(
                    suite,
                    data,
                    folder,
                    shifts=shifts,
                    levels=levels,
                    seed=seed,
                    workers=workers,
                    fmt=fmt,
                    keep_size=keep_size,
                    limit=limit,
                    labels_csv=labels_csv,
                    masks=masks,
                    bboxes=bboxes,
                    max_pixels=max_pixels,
                    progress=progress,
                    backend=backend,
                    address=address,
                    unlabelled=unlabelled,
                )
    started = time.perf_counter()
    suite_obj = suite if isinstance(suite, Suite) else get_suite(str(suite))
    # Shifts needing an unconfigured tool (ai_bg without an inpainter) are skipped, logged.
    names = available_shifts(suite_obj.match(shifts), log=log)
    # None or an empty list: every level; a blank string is refused as naming none.
    level_list = parse_levels(levels) if isinstance(levels, str) or levels else None
    suite_obj = suite_obj.select(names, level_list).suite
    protocol = suite_obj.protocol
    if fmt:
        protocol = dataclasses.replace(protocol, format=str(fmt).lower())
    if keep_size:
        protocol = dataclasses.replace(protocol, resize=None, crop=None)
    if str(protocol.format).lower() not in ("jpeg", "jpg", "png"):
        raise InputError(f"unknown output format {protocol.format!r}; use jpeg or png")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise InputError(f"seed must be a non-negative integer, got {seed!r}")
    seed = int(seed)
    if workers is not None and (isinstance(workers, bool) or int(workers) < 0):
        raise InputError(f"workers must be 0 (in this process) or more, got {workers!r}")
    if limit is not None and int(limit) < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    cells = tuple(suite_obj.cells())
    shift_objs = {n: get_shift(n) for n in names}

    data_root = Path(data).expanduser()
    if isinstance(folder, LocalFolder):
        out_root = folder.root
        if out_root.exists() and not out_root.is_dir():
            raise InputError(
                f"--out {out_root} is a file; generate writes a folder of images",
                hint="pass a folder name (created if missing)",
            )
        # Both ways and through links: --data inside --out would be read as its own cells.
        check_outputs(
            {"--data": data_root, "--labels": labels_csv, "--masks": masks, "--bboxes": bboxes},
            {"--out": Folder(out_root)},
        )

    needs = set().union(*(s.needs for s in shift_objs.values())) if shift_objs else set()
    need_mask = "mask" in needs
    if need_mask and not masks:
        which = ", ".join(n for n, s in shift_objs.items() if "mask" in s.needs)
        raise InputError(f"{which} need foreground masks; pass --masks DIR")
    for s in shift_objs.values():
        if s.extra.get("channels") == 4 and str(protocol.format).lower() != "png":
            raise InputError(f"{s.name} produces RGBA, which JPEG cannot store; use --format png")

    found = discover(data_root, labels_csv=labels_csv, masks=masks, bboxes=bboxes)
    if not unlabelled and found and all(s.class_name is None and s.label is None for s in found):
        raise InputError(
            f"{data_root} holds {len(found)} images without labels (no class folders, no "
            "labels CSV): evaluate cannot score what would be generated",
            hint="put the images in <class>/ folders or pass --labels CSV (file,label); "
            "--unlabelled generates them anyway",
        )
    skipped_listing = list(found.skipped)
    donors = None
    if any(s.extra.get("donor_rule") or (s.needs & DONOR_KEYS) for s in shift_objs.values()):
        from robustlab.shifts.scenes import DonorPool

        # The whole data set, before --limit and the mask filter: the pool every path uses.
        donors = DonorPool(found)
    samples: list[Sample] = list(found)
    if need_mask:
        no_mask = [s for s in samples if s.mask_path is None]
        skipped_listing += [(s.id, "no mask in the masks folder") for s in no_mask]
        samples = [s for s in samples if s.mask_path is not None]
    if limit is not None:
        samples = samples[: int(limit)]
    if not samples:
        raise InputError(f"no usable images in {data_root}")

    # The output names must be unique, or two sources would silently share one file.
    seen: dict[str, str] = {}
    unique: list[Sample] = []
    for sample in samples:
        key = str(cell_path("", sample, "x", "1", protocol))
        if key in seen:
            skipped_listing.append((sample.id, f"its output name collides with {seen[key]}"))
        else:
            seen[key] = sample.id
            unique.append(sample)
    samples = unique

    # Pixels drawn by a configured tool (ai_bg's inpainter, bg_complexity's diffusion model,
    # the attribute edits' hole-fill backend) depend on it: each such cell's identity names
    # the tool, so a folder never mixes two.
    resources = describe_resources(shift_objs.values())
    cell_records = {}
    for n, lv in cells:
        rec = {
            "shift": n,
            "level": lv,
            "family": shift_objs[n].family,
            "deterministic": shift_objs[n].deterministic,
            "params": _jsonable(shift_objs[n].params[lv]),
        }
        for key, described in resources.items():
            res = get_resource(key)
            if res.uses(shift_objs[n]):
                rec[key] = res.cell_value(described)
        cell_records[f"{n}/{lv}"] = rec
    content = _content_record(samples, donors)
    if donors is not None:  # a donor cell's pixels depend on the whole pool, not one image
        pool = _donor_pool_fingerprint(donors, content)
        for n, lv in cells:
            if shift_objs[n].extra.get("donor_rule") or (shift_objs[n].needs & DONOR_KEYS):
                cell_records[f"{n}/{lv}"]["donors"] = pool
    protocol_record = _jsonable(protocol.describe(view=False))  # the files' frame
    identity = {
        "seed": seed,
        "suite": {
            "name": suite_obj.name,
            "version": suite_obj.version,
            "label_space": suite_obj.label_space,
        },
        "protocol": protocol_record,
        "data": {
            "root": str(data_root.resolve()),
            "labels_csv": str(Path(labels_csv).resolve()) if labels_csv else None,
            "masks": str(Path(masks).expanduser().resolve()) if masks else None,
            "samples": len(samples),
        },
        "cells": cell_records,
        "samples": content,
    }
    manifest_path = folder.location_of(MANIFEST)
    run_record = {
        "id": uuid.uuid4().hex[:12],
        "started_at": _now(),
        **this_process(),
        "workers": 0,
        "status": "running",
        "shifts": names,
        "levels": level_list,
        "limit": limit,
    }
    run_record.update(resources)
    result = GenerateResult(
        folder.location,
        manifest_path,
        len(samples),
        len(cells),
        skipped_inputs=list(skipped_listing),
    )
    n_workers = (
        0
        if workers == 0
        else max(1, min(default_workers() if workers is None else int(workers), len(samples)))
    )
    run_record["workers"] = n_workers
    run_record["backend"] = backend
    if backend == "ray":
        run_record["address"] = address
    # The identity goes to disk before the first file: a killed run's files stay tied to it.
    with folder.lock():
        prev = folder.load_manifest()
        check_compatible(prev, identity, folder.location)
        folder.write(
            MANIFEST,
            _json_bytes(_merge_manifest(prev, result, identity, run_record, samples, final=False)),
        )
    n_tmp = folder.remove_temp_files(names)
    if n_tmp:
        log.info("removed %d temp files left by an interrupted run", n_tmp)

    ensure_compiled_for(names, progress=bool(progress))
    job = _Job(
        folder, cells, protocol, seed, int(max_pixels), need_mask, donors, process_settings()
    )
    log.info(
        "generating %d cells x %d images into %s with %d worker(s)",
        len(cells),
        len(samples),
        folder,
        n_workers,
    )

    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(samples), unit="img", desc=f"generate {suite_obj.name}", dynamic_ncols=True
        )

    def collect(o: SampleOutcome) -> None:
        result.written += o.written
        result.skipped_existing += o.existing
        if o.skip_reason:
            result.skipped_inputs.append((o.id, o.skip_reason))
            log.info("skipped %s: %s", o.id, o.skip_reason)
        if o.note:
            result.converted.append((o.id, o.note))
        for shift_name, lv, reason in o.failures:
            result.failures.append((o.id, shift_name, lv, reason))
        result.attributes.extend(o.attributes)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(written=result.written, failed=len(result.failures), refresh=False)

    status = "interrupted"
    try:
        todo = samples
        if isinstance(folder, UrlFolder):
            todo = _unfinished(folder, samples, cells, protocol, names, collect)
        if not todo:
            log.info("every file is already in %s", folder)
        elif backend == "ray":
            from robustlab.run.ray_backend import generate_on_ray

            times = generate_on_ray(
                todo,
                job,
                collect,
                process=process_sample,
                crashed=lambda s: SampleOutcome(s.id, skip_reason="a worker process crashed on it"),
                address=address,
                cpus=int(workers) if workers else None,
            )
            run_record["stages"] = result.stages = times.summary()
            log.info("%s", times.line())
        elif n_workers == 0:
            _init_worker(job, single_thread=False)
            for sample in todo:
                collect(process_sample(sample, job))
        else:
            _run_pool(todo, job, n_workers, collect, result)
        status = "complete"
    finally:
        if bar is not None:
            bar.close()
        result.failed = len(result.failures)
        result.seconds = time.perf_counter() - started
        # A worker killed mid-write (and retried) left its temp file; its pid is dead now.
        folder.remove_temp_files(names)
        run_record.update(
            finished_at=_now(),
            status=status,
            seconds=round(result.seconds, 3),
            written=result.written,
            skipped_existing=result.skipped_existing,
            failed=result.failed,
            skipped_inputs=len(result.skipped_inputs),
        )
        with folder.lock():  # merged into what is there now: a concurrent run's too
            current = folder.load_manifest()
            cell_keys = {
                f"{c.get('shift')}/{c.get('level')}" for c in (current or {}).get("cells", [])
            }
            on_disk = cell_files_on_disk(folder, sorted(cell_keys | set(identity["cells"])))
            folder.write(
                MANIFEST,
                _json_bytes(
                    _merge_manifest(current, result, identity, run_record, samples, on_disk=on_disk)
                ),
            )
            if result.attributes:
                old = folder.read(ATTRIBUTES_CSV)
                folder.write(
                    ATTRIBUTES_CSV,
                    merge_attributes_csv(
                        parse_attributes_csv(old.decode()) if old else [], result.attributes
                    ),
                )
    return result


def read_attributes_csv(path: Path) -> list[dict]:
    """Rows of an ``attributes.csv`` (numbers parsed; empty cells dropped); [] if absent."""
    if not Path(path).is_file():
        return []
    with open(path, newline="") as fh:
        return parse_attributes_csv(fh.read())


def parse_attributes_csv(text: str) -> list[dict]:
    """Rows of an ``attributes.csv``'s text (a file's or a URL's; see
    :func:`read_attributes_csv`)."""
    import csv
    import io

    rows = []
    for r in csv.DictReader(io.StringIO(text, newline="")):
        row: dict = {}
        for k, v in r.items():
            if v in (None, ""):
                continue
            if k in ("file", "sample_id", "shift", "level", "fill"):
                row[k] = v
                continue
            try:
                num = float(v)
                row[k] = int(num) if num.is_integer() and k.startswith("box_") else num
            except ValueError:
                row[k] = v
        rows.append(row)
    return rows


def merge_attributes_csv(old: Sequence[dict], rows: Sequence[dict]) -> bytes:
    """``rows`` merged into the ``old`` rows of an ``attributes.csv``, as the file's bytes
    (keyed by ``file``: a rerun's word replaces the old one; rows of cells generated by
    earlier runs stay, so a resumed folder keeps one row per edited file)."""
    import csv
    import io

    merged = {r["file"]: r for r in old}
    merged.update({r["file"]: r for r in rows})
    extra = sorted({k for r in merged.values() for k in r} - set(ATTRIBUTE_CSV_COLUMNS))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[*ATTRIBUTE_CSV_COLUMNS, *extra], lineterminator="\n")
    w.writeheader()
    for key in sorted(merged):
        w.writerow(merged[key])
    return buf.getvalue().encode()


def write_attributes_csv(path: Path, rows: Sequence[dict]) -> None:
    """Merge ``rows`` into the ``attributes.csv`` at ``path`` (:func:`merge_attributes_csv`),
    written atomically like every other output."""
    atomic_write(Path(path), merge_attributes_csv(read_attributes_csv(path), rows))


def _unfinished(
    folder: UrlFolder,
    samples: list[Sample],
    cells: Sequence[tuple[str, Any]],
    protocol: Protocol,
    names: Sequence[str],
    collect,
) -> list[Sample]:
    """The samples with a cell missing at a URL; the others are collected as finished.

    One listing per shift folder (a thousand keys per request on S3) replaces a request
    per cell in the workers, and spares a resumed run from starting workers (and their
    filesystem clients) for images that are done. The workers still check each cell.
    """
    present = folder.files_under(names)
    todo = []
    for s in samples:
        if all(cell_path("", s, n, lv, protocol).as_posix() in present for n, lv in cells):
            collect(SampleOutcome(s.id, existing=len(cells)))
        else:
            todo.append(s)
    return todo


def _run_pool(
    samples: list[Sample], job: _Job, n_workers: int, collect, result: GenerateResult
) -> None:
    """Process samples in a pool with a bounded queue; survive crashed workers."""
    mp = worker_context()
    queue = list(reversed(samples))
    attempts: dict[str, int] = {}
    window = n_workers * 4
    while queue:
        broken: list[Sample] = []
        pool = cf.ProcessPoolExecutor(
            n_workers, mp_context=mp, initializer=_init_worker, initargs=(job, True)
        )
        inflight: dict[cf.Future, Sample] = {}
        try:
            while queue or inflight:
                while queue and len(inflight) < window and not broken:
                    s = queue.pop()
                    try:
                        inflight[pool.submit(_run_in_worker, s)] = s
                    except BrokenProcessPool:
                        broken.append(s)
                if not inflight:
                    break
                done, _ = cf.wait(inflight, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    s = inflight.pop(fut)
                    try:
                        collect(fut.result())
                    except BrokenProcessPool:
                        broken.append(s)
                    # Anything else (a full disk, a bug in a shift) stops the run below.
                if broken:
                    # The pool is unusable; everything still in flight must be redone.
                    for fut, s in inflight.items():
                        fut.cancel()
                        broken.append(s)
                    inflight.clear()
                    break
        except BaseException:
            # Ctrl-C or a bug here: do not wait for queued images, just stop.
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        for s in broken:
            attempts[s.id] = attempts.get(s.id, 0) + 1
            if attempts[s.id] >= MAX_ATTEMPTS:
                collect(SampleOutcome(s.id, skip_reason="a worker process crashed on it"))
            else:
                queue.append(s)
        if broken:
            log.warning("a worker process died; retrying %d image(s) in a fresh pool", len(queue))


def cell_files_on_disk(folder: LocalFolder | UrlFolder, cell_keys: Sequence[str]) -> int:
    """Files under the ``<shift>/<level>`` folders of ``cell_keys`` (a local folder or a
    URL), temp files of unfinished writes left out: what the folder holds, whoever wrote it."""
    if isinstance(folder, UrlFolder):
        return sum(
            1
            for rel in folder.files_under(list(cell_keys))
            if not rel.rsplit("/", 1)[-1].endswith(TEMP_SUFFIX)
        )
    n = 0
    for key in cell_keys:
        for _, _, files in os.walk(folder.root / key):
            n += sum(1 for f in files if not (f.startswith(".") and f.endswith(TEMP_SUFFIX)))
    return n


def _content_record(samples: Sequence[Sample], donors) -> dict[str, list]:
    """``id -> [class, image hash, mask hash]`` of every source whose bytes can reach a file:
    the images to generate and, for donor shifts, every background donor."""
    from robustlab.run.content_hash import hash_files

    used = {s.id: s for s in samples}
    if donors is not None:
        used.update((d.id, d) for d in donors.samples if d.id not in used)
    ordered = sorted(used.values(), key=lambda s: s.id)
    digests = hash_files([p for s in ordered for p in (s.path, s.mask_path)])
    return {s.id: [s.class_name, digests[2 * i], digests[2 * i + 1]] for i, s in enumerate(ordered)}


def _donor_pool_fingerprint(donors, content: dict[str, list]) -> str:
    """BLAKE2b of the donor pool (ids, classes, image and mask hashes): an image added to
    or removed from the pool changes which donor every sample draws."""
    from robustlab.run.identity import data_fingerprint

    ids = sorted(d.id for d in donors.samples)
    return data_fingerprint((i, *content[i]) for i in ids)


def _merge_manifest(
    prev: dict | None,
    result: GenerateResult,
    identity: dict,
    run_record: dict,
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
    ended (a sum of what each process wrote would miss a killed run's files and count a
    file twice when two runs write one folder); the rest describe the state after this run.
    """
    prev = prev or {}
    skipped = {d["id"]: d["reason"] for d in prev.get("skipped_inputs", [])}
    converted = {d["id"]: d["note"] for d in prev.get("converted", [])}
    failures = {
        (d.get("id"), d.get("shift"), str(d.get("level"))): d.get("reason")
        for d in prev.get("failures", [])
    }
    cells = identity["cells"]
    counts = dict(prev.get("counts") or {})
    if final:
        done_ids = {s.id for s in samples}
        skip_now = dict(result.skipped_inputs)
        skipped = {k: v for k, v in skipped.items() if k not in done_ids}
        skipped.update(skip_now)
        converted.update(dict(result.converted))
        # A cell considered again in this run either failed again or now exists.
        failures = {
            k: v
            for k, v in failures.items()
            if not (k[0] in done_ids and f"{k[1]}/{k[2]}" in cells)
        }
        failures.update({(i, s, lv): r for i, s, lv, r in result.failures})
        counts = {
            "written": int(on_disk or 0),
            "written_this_run": result.written,
            "skipped_existing": result.skipped_existing,
            "failed": len(failures),
            "skipped_inputs": len(skipped),
        }
    all_cells = {f"{c['shift']}/{c['level']}": c for c in prev.get("cells", [])}
    all_cells.update(cells)
    content = dict(prev.get("samples") or {})
    content.update(identity["samples"])
    runs = [
        r for r in mark_dead_runs(list(prev.get("runs", []))) if r.get("id") != run_record["id"]
    ]
    runs.append(dict(run_record))
    return {
        "format": FORMAT,
        "status": run_record["status"],
        "versions": library_versions(),
        "seed": identity["seed"],
        "seed_rule": "derive_seed(seed, sample_id, shift, level) -> PCG64",
        "suite": identity["suite"],
        "protocol": identity["protocol"],
        "data": identity["data"],
        "layout": "<out>/<shift>/<level>/<class>/<file>",
        "cells": list(all_cells.values()),
        "counts": counts,
        "skipped_inputs": [{"id": k, "reason": v} for k, v in sorted(skipped.items())],
        "converted": [{"id": k, "note": v} for k, v in sorted(converted.items())],
        "failures": [
            {"id": k[0], "shift": k[1], "level": k[2], "reason": v}
            for k, v in sorted(failures.items())
        ],
        "created_at": prev.get("created_at", run_record["started_at"]),
        "updated_at": _now(),
        "runs": runs,
        # Each configured tool (ai_bg's inpainter, bg_complexity's diffusion model, the
        # attribute edits' hole-fill backend) of the latest run that drew its cells (None:
        # never drawn here).
        **{key: run_record.get(key) or prev.get(key) for key in described_resources()},
        # id -> [class, image BLAKE2b, mask BLAKE2b]: a rerun refuses changed sources.
        "samples": dict(sorted(content.items())),
    }


__all__ = [
    "generate",
    "GenerateResult",
    "read_attributes_csv",
    "write_attributes_csv",
    "parse_attributes_csv",
    "merge_attributes_csv",
    "TEMP_SUFFIX",
    "ATTRIBUTES_CSV",
    "SampleOutcome",
    "process_sample",
    "atomic_write",
    "library_versions",
    "remove_temp_files",
    "MANIFEST",
]
