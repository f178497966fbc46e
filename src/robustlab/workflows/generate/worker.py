"""``generate``'s work unit and its pools: one source image in, every missing cell of it
written (:func:`process_sample`), run in this process, on a process pool that survives
crashed workers (:func:`run_pool`), or on Ray (:mod:`robustlab.execution.ray.generate` calls
the same function)."""

from __future__ import annotations

import concurrent.futures as cf
import logging
import posixpath
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell
from robustlab.data.images import ImageError
from robustlab.data.sources import Sample
from robustlab.errors import CellSkipped, environment_problem
from robustlab.files.hashes import digest
from robustlab.files.outputs import LocalFolder, UrlFolder
from robustlab.files.safety import refuse_write_through
from robustlab.pipeline import (
    apply_shift,
    cell_path,
    encode,
    load_prepared,
    relative_output,
    resolve_shift,
    shift_context,
)
from robustlab.execution.lifeline import die_with_parent, worker_context
from robustlab.settings import ToolSettings
from robustlab.suites import Protocol

if TYPE_CHECKING:  # a field's type only
    from robustlab.shifts.scenes import DonorPool
    from robustlab.workflows.generate.release_rows import ReleaseRows

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 2  # a sample whose worker process died this often is skipped


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
    # (shift, level, BLAKE2b of the bytes) per file written: the run's journal records them
    hashes: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Job:
    """What every worker needs, sent once per process (not once per image)."""

    out: LocalFolder | UrlFolder
    cells: tuple[Cell, ...]
    protocol: Protocol
    seed: int
    max_pixels: int
    need_mask: bool
    donors: DonorPool | None = None
    # The tools' settings the run was planned with (resolved, described in the manifest):
    # workers compute with these, never with their own environment.
    settings: ToolSettings = field(default_factory=ToolSettings)
    # Cell folders this process found free of links out of ``out`` during this run: the
    # link rule is checked once per folder (its lstat walk cost 0.12 ms per 32 px file,
    # a ninth of the file's time), not once per file. Never sent to another process.
    safe_folders: set[str] = field(default_factory=set, compare=False, repr=False)
    # ``--out-layout npy``: the cells go into these rows of the release arrays, not files
    # (the driver sends only photos not done yet).
    release: ReleaseRows | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "safe_folders": set()}


_JOB: Job | None = None


def init_worker(job: Job, single_thread: bool) -> None:
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


def process_sample(sample: Sample, job: Job | None = None) -> SampleOutcome:
    """Write every missing cell of one source image (the work unit), with the tools'
    settings the job carries."""
    job = job or _JOB
    assert job is not None, "worker not initialised"
    return _process_sample(sample, job)


def _process_sample(sample: Sample, job: Job) -> SampleOutcome:
    res = SampleOutcome(sample.id)
    out = job.out
    todo: list[tuple[Cell, str | None]] = []
    if job.release is not None:  # rows of the release arrays, no file per cell
        todo = [(cell, None) for cell in job.cells]
    else:
        rel = relative_output(sample, job.protocol).as_posix()  # the same under every cell
        for cell in job.cells:
            file = f"{cell.folder}/{rel}"  # cell_path("", ...), without a Path per cell
            if out.exists(file):
                res.existing += 1
            else:
                todo.append((cell, file))
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
    for cell, path in todo:
        name, level = cell
        folder = posixpath.dirname(path or "")
        if path and isinstance(out, LocalFolder) and folder not in job.safe_folders:
            # the link rule for writers: never through a link out
            refuse_write_through(out.root, folder, "--out")
            job.safe_folders.add(folder)
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
                settings=job.settings,
            )
            attrs: dict = {}
            ctx["attributes"] = attrs
            shift = resolve_shift(name, job.protocol.preset)
            img = apply_shift(prep.rgb, sample.id, shift, level, job.seed, ctx)
            if path is None:
                assert job.release is not None
                job.release.write(sample.id, name, level, img)
                res.written += 1
                continue
            data = encode(img, job.protocol)
            out.write(path, data)
            res.written += 1
            res.hashes.append((name, cell.key, digest(data)))
            if attrs:
                res.attributes.append(
                    {
                        "file": path,
                        "sample_id": sample.id,
                        "shift": name,
                        "level": cell.key,
                        **attrs,
                    }
                )
        except (CellSkipped, ImageError) as exc:  # this input cannot make this cell
            log.info("%s %s skipped: %s", sample.id, cell.folder, exc)
            res.failures.append((name, cell.key, str(exc)))
        except OSError as exc:
            where = out.location_of(path) if path else out
            problem = environment_problem(exc, f"cannot write {where}")
            if problem is not exc:  # a full disk fails every cell after it: stop the run
                raise problem from None
            log.warning("%s %s failed: %s: %s", sample.id, cell.folder, type(exc).__name__, exc)
            res.failures.append((name, cell.key, f"{type(exc).__name__}: {exc}"))
        # Any other exception is a bug in a shift or in robustlab: it fails the run with
        # its traceback (the cells written so far stay, so the rerun resumes).
    return res


def _run_in_worker(sample: Sample) -> SampleOutcome:
    return process_sample(sample)


def unfinished(
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


def run_pool(samples: list[Sample], job: Job, n_workers: int, collect) -> None:
    """Process samples in a pool with a bounded queue; survive crashed workers."""
    mp = worker_context()
    queue = list(reversed(samples))
    attempts: dict[str, int] = {}
    window = n_workers * 4
    while queue:
        broken: list[Sample] = []
        pool = cf.ProcessPoolExecutor(
            n_workers, mp_context=mp, initializer=init_worker, initargs=(job, True)
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
