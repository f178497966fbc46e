"""``generate(suite, data, out)``: plan, write the identity, run the work units, record
the outcome (the steps are described in :mod:`robustlab.workflows.generate`)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robustlab.errors import InputError
from robustlab.records.manifest import HINT, MANIFEST, identity_changes, is_generated_folder
from robustlab.files.outputs import LocalFolder, UrlFolder, open_folder
from robustlab.files.safety import check_out_folder
from robustlab.records.folder_record import RUNNING, FolderRun, refuse_changes, update_record
from robustlab.execution.lifeline import default_workers
from robustlab.shifts.kernels import ensure_compiled_for
from robustlab.suites import Suite
from robustlab.workflows.keywords import build_specs
from robustlab.workflows.generate.attributes import (
    ATTRIBUTES_CSV,
    merge_attributes_csv,
    parse_attributes_csv,
)
from robustlab.workflows.generate.plan import GeneratePlan, plan_generate
from robustlab.files.hashes import Journal
from robustlab.workflows.generate.check import check_written
from robustlab.workflows.generate.record import (
    GenerateResult,
    cell_files_on_disk,
    merge_manifest,
)
from robustlab.workflows.generate.release import (
    marking,
    open_rows,
    stale_shifts,
    write_release_arrays,
)
from robustlab.workflows.generate.request import (
    GenerateCells,
    GenerateExecution,
    GenerateInputs,
)
from robustlab.workflows.tools import ToolSpec
from robustlab.workflows.generate.worker import (
    Job,
    SampleOutcome,
    init_worker,
    process_sample,
    run_pool,
    unfinished,
)

log = logging.getLogger(__name__)


def generate(
    suite: str | Suite,
    data: str | Path,
    out: str | Path | LocalFolder | UrlFolder,
    *,
    cells: GenerateCells | None = None,
    inputs: GenerateInputs | None = None,
    execution: GenerateExecution | None = None,
    tools: ToolSpec | None = None,
    **options: Any,
) -> GenerateResult:
    """Generate a suite's cells for every image under ``data`` into ``out``.

    Args:
        suite: Built-in suite name, YAML path, or a :class:`Suite`.
        data: ImageFolder tree or flat folder with a labels CSV (see
            :func:`robustlab.data.sources.discover`).
        out: Output folder, or an fsspec URL (``s3://bucket/prefix``, ``gs://...``; the
            protocol's package, e.g. s3fs, must be installed); rerunning with the same
            arguments resumes. A URL is checked for writing before any work starts.
        cells: What decides the pixels (:class:`GenerateCells`: ``shifts``, ``levels``,
            ``seed``, ``fmt``, ``keep_size``).
        inputs: Which sources are read (:class:`GenerateInputs`: ``labels_csv``,
            ``masks``, ``bboxes``, ``unlabelled``, ``limit``, ``max_pixels``).
        execution: Where the work runs (:class:`GenerateExecution`: ``workers``,
            ``backend``, ``address``, ``progress``, ``storage_options``). With
            ``backend="ray"`` the files are the same byte for byte and the folder's
            identity does not name the backend, so a run started on one resumes on the
            other; ``out`` must then be a path every node sees, or a URL.
        tools: The optional tools' settings (:class:`~robustlab.workflows.tools.ToolSpec`:
            ``inpainter``, ``inpainter_device``, ``inpainter_dtype``, ``bg_diffusion``,
            ``bg_diffusion_device``, ``bg_diffusion_dtype``, ``bg_adv_model``,
            ``edit_fill``); each left out is its ``ROBUSTLAB_*`` environment variable.
        options: Any field of the four specs by name (``seed=3, workers=0``), for the
            spec not passed.

    Returns:
        A :class:`GenerateResult`; the manifest at ``out/manifest.json`` holds the record.

    Raises:
        TypeError: a keyword no spec has (with the closest names).
        InputChangedError: ``out`` was generated with other inputs (seed, suite, protocol,
            masks folder, cell parameters, inpainter, donor pool, or a source image or
            mask whose bytes changed); the message names each change (``seed 0 -> 7``).
        InputError: unknown suite/shift/level, missing or empty data folder, or a shift
            that needs masks without them.
    """
    specs = build_specs(
        "generate",
        options,
        {
            "cells": GenerateCells,
            "inputs": GenerateInputs,
            "execution": GenerateExecution,
            "tools": ToolSpec,
        },
        {"cells": cells, "inputs": inputs, "execution": execution, "tools": tools},
    )
    cells, inputs, execution = specs["cells"], specs["inputs"], specs["execution"]
    tools = specs["tools"]
    if cells.out_layout == "npy" and execution.backend == "ray":
        raise InputError(
            "--out-layout npy writes memory-mapped arrays on this machine; Ray's nodes cannot",
            hint="use the local backend, or --out-layout folders on Ray",
        )
    folder = _open_out(out, execution)
    if isinstance(folder, LocalFolder):  # never mixed into another folder's files
        check_out_folder(
            folder.root,
            command="generate",
            flag="--out",
            made=is_generated_folder,
            allow_other=execution.into_existing,
        )
    if execution.backend == "ray":
        from robustlab.execution.ray.placement import plan_placement
        from robustlab.execution.ray.session import ray_running, ray_session

        if not ray_running():
            # Connect (or start Ray here) and check the cluster before any source is read
            # or any file written; the call below runs in that session.
            workers = execution.workers
            cpus = workers if isinstance(workers, int) and workers > 0 else None
            with ray_session(execution.address, cpus) as resources:
                plan_placement(resources, model=False)
                return generate(
                    suite,
                    data,
                    folder,
                    cells=cells,
                    inputs=inputs,
                    execution=execution,
                    tools=tools,
                )
    started = time.perf_counter()
    plan = plan_generate(suite, data, folder, cells, inputs, tools.settings)
    return _run(plan, folder, cells, inputs, execution, started)


def _open_out(out, execution: GenerateExecution) -> LocalFolder | UrlFolder:
    """The output folder; a URL is checked for writing before Ray starts or any source
    is read."""
    folder = open_folder(out, execution.storage_options)
    if isinstance(folder, UrlFolder) and not isinstance(out, UrlFolder):
        if folder.process_local and (execution.backend == "ray" or execution.workers != 0):
            raise InputError(
                f"--out {folder.url} lives in this process only; worker processes would not see it",
                hint="pass --workers 0 (and the local backend), or use a shared URL",
            )
        folder.check_writable()
    return folder


def _run(
    plan: GeneratePlan,
    folder: LocalFolder | UrlFolder,
    cells: GenerateCells,
    inputs: GenerateInputs,
    execution: GenerateExecution,
    started: float,
) -> GenerateResult:
    """Write the identity, run the work units, record the outcome (always, so an
    interrupted run's record says so and the rerun resumes)."""
    n_workers = _worker_count(execution.workers, len(plan.samples))
    run = FolderRun(
        clock_from=started,
        workers=n_workers,
        status=RUNNING,
        shifts=plan.names,
        levels=plan.levels,
        limit=inputs.limit,
        **plan.resources,
        backend=execution.backend,
        **({"address": execution.address} if execution.backend == "ray" else {}),
    )
    result = GenerateResult(
        folder.location,
        folder.location_of(MANIFEST),
        len(plan.samples),
        len(plan.cells),
        skipped_inputs=list(plan.skipped),
    )
    prev = _begin(folder, plan, result, run)  # a folder nobody can write to fails here
    journal = Journal(folder, run.id)
    if plan.layout != "npy":
        result.redrawn = check_written(plan, folder, prev, journal)
    ensure_compiled_for(plan.names, progress=bool(execution.progress))
    bar = _progress_bar(plan, execution)
    collect = _collector(result, bar, journal)
    partial, todo = None, plan.samples
    if plan.layout == "npy":  # the cells go straight into the release arrays
        assert isinstance(folder, LocalFolder)  # the plan refused any other
        partial, todo = open_rows(plan, folder.root, prev, result, collect)
        if partial is not None:
            collect = marking(collect, partial, len(plan.cells))
    job = Job(
        folder,
        plan.cells,
        plan.protocol,
        int(cells.seed),
        int(inputs.max_pixels),
        plan.need_mask,
        plan.donors,
        plan.settings,
        release=partial.target() if partial is not None else None,
    )
    log.info(
        "generating %d cells x %d images into %s with %d worker(s)",
        len(plan.cells),
        len(plan.samples),
        folder,
        n_workers,
    )

    def finish(status: str) -> None:
        try:
            if partial is not None:  # the photos collected so far count as done
                with contextlib.suppress(OSError):
                    partial.sync()
            journal.close()  # before the manifest that names it
        finally:
            _finish(folder, plan, result, run, status, started)

    try:
        with run.track(finish):
            _execute(plan, folder, job, execution, n_workers, collect, result, run, todo)
            if partial is not None:  # finished: the arrays into place before the manifest
                result.release = {
                    "shifts": partial.shifts,
                    "rows": partial.finish(stale_shifts(prev, partial)),
                }
    finally:
        if bar is not None:
            bar.close()
    if partial is not None:
        partial.remove()  # the manifest names the finished arrays now
    elif plan.layout != "npy":
        # A preset released as arrays (CIFAR-10-C) gets that layout too, from the files.
        write_release_arrays(plan, folder)
    return result


def _worker_count(workers: int | None, n_samples: int) -> int:
    if workers == 0:
        return 0
    return max(1, min(default_workers() if workers is None else int(workers), n_samples))


def _begin(folder, plan: GeneratePlan, result: GenerateResult, run: FolderRun) -> dict | None:
    """The identity goes to disk before the first file: a killed run's files stay tied to
    it; a folder made under another identity is refused. Returns the manifest found
    (None: a new folder)."""
    found: list[dict | None] = []

    def merge(prev: dict | None) -> dict:
        found.append(prev)
        from robustlab.shifts.registry import resource_nouns

        changes = identity_changes(prev, plan.identity, resource_nouns()) if prev else []
        refuse_changes(folder.location, changes, made="was generated with other inputs", hint=HINT)
        return merge_manifest(prev, result, plan.identity, run, plan.samples, final=False)

    update_record(folder, merge)
    n_tmp = folder.remove_temp_files(plan.names)
    if n_tmp:
        log.info("removed %d temp files left by an interrupted run", n_tmp)
    return found[0]


def _progress_bar(plan: GeneratePlan, execution: GenerateExecution):
    if not execution.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(
        total=len(plan.samples), unit="img", desc=f"generate {plan.suite.name}", dynamic_ncols=True
    )


def _collector(result: GenerateResult, bar, journal: Journal) -> Callable[[SampleOutcome], None]:
    """The one tally of every backend: a sample's outcome into the result, the bar and the
    journal of the files' hashes."""

    def collect(o: SampleOutcome) -> None:
        journal.add(o.id, o.hashes)
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

    return collect


def _execute(
    plan: GeneratePlan,
    folder,
    job: Job,
    execution: GenerateExecution,
    n_workers: int,
    collect,
    result: GenerateResult,
    run: FolderRun,
    todo: list,
) -> None:
    """Every sample of ``todo`` with a missing cell through :func:`process_sample`: on Ray,
    in this process (``workers=0``) or on a process pool."""
    if isinstance(folder, UrlFolder):
        todo = unfinished(folder, plan.samples, plan.cells, plan.protocol, plan.names, collect)
    if not todo:
        log.info("every file is already in %s", folder)
    elif execution.backend == "ray":
        from robustlab.execution.ray.generate import generate_on_ray

        workers = execution.workers
        times = generate_on_ray(
            todo,
            job,
            collect,
            process=process_sample,
            crashed=lambda s: SampleOutcome(s.id, skip_reason="a worker process crashed on it"),
            address=execution.address,
            cpus=int(workers) if workers else None,
        )
        run.record["stages"] = result.stages = times.summary()
        log.info("%s", times.line())
    elif n_workers == 0:
        init_worker(job, single_thread=False)
        for sample in todo:
            collect(process_sample(sample, job))
    else:
        run_pool(todo, job, n_workers, collect)


def _finish(
    folder, plan: GeneratePlan, result: GenerateResult, run: FolderRun, status: str, started
) -> None:
    """The run's outcome, counted on disk, merged into the manifest there now (a
    concurrent run's entries too), and the attribute rows into ``attributes.csv``."""
    result.failed = len(result.failures)
    result.seconds = time.perf_counter() - started
    # A worker killed mid-write (and retried) left its temp file; its pid is dead now.
    folder.remove_temp_files(plan.names)
    run.finish(
        status,
        written=result.written,
        redrawn=len(result.redrawn),
        skipped_existing=result.skipped_existing,
        failed=result.failed,
        skipped_inputs=len(result.skipped_inputs),
    )

    def merge(current: dict | None) -> dict:
        keys = {f"{c.get('shift')}/{c.get('level')}" for c in (current or {}).get("cells", [])}
        if plan.layout == "npy":  # the images in the finished arrays
            release = result.release or (current or {}).get("release") or {}
            on_disk = len(release.get("rows") or ()) * 5 * len(release.get("shifts") or ())
        else:
            on_disk = cell_files_on_disk(folder, sorted(keys | set(plan.identity["cells"])))
        if result.attributes:
            old = folder.read(ATTRIBUTES_CSV)
            rows = parse_attributes_csv(old.decode()) if old else []
            folder.write(ATTRIBUTES_CSV, merge_attributes_csv(rows, result.attributes))
        return merge_manifest(current, result, plan.identity, run, plan.samples, on_disk=on_disk)

    update_record(folder, merge)
