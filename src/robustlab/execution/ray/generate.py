"""``generate`` on Ray: CPU tasks that write each sample's cells with the local backend's
work unit; the driver keeps the manifest."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from robustlab.errors import RobustlabError
from robustlab.execution.ray.pipeline import (
    StageTimes,
    data_context,
    index_blocks,
    map_tasks,
    objects,
    one_thread,
    task_size,
    worker_errors_as_ours,
)
from robustlab.execution.ray.placement import plan_placement
from robustlab.execution.ray.session import ray_session


def _write_cells(batch: dict, *, samples: Sequence, job, process_sample: Callable) -> dict:
    """Map stage of ``generate``: the local backend's work unit on each sample."""
    one_thread(torch=False)
    outcomes, seconds = [], []
    for i in batch["index"]:
        t0 = time.perf_counter()
        try:
            outcome: Any = process_sample(samples[int(i)], job)
        except RobustlabError as exc:  # a full disk: the driver stops the run
            outcome = exc
        outcomes.append(outcome)
        seconds.append(time.perf_counter() - t0)
    return {
        "index": np.asarray(batch["index"]),
        "outcome": objects(outcomes),
        "seconds": np.asarray(seconds, dtype=np.float64),
    }


def generate_on_ray(
    samples: Sequence,
    job,
    collect: Callable,
    *,
    process: Callable,
    crashed: Callable,
    address: str | None = None,
    cpus: int | None = None,
) -> StageTimes:
    """Write every missing cell of ``samples`` on a Ray cluster.

    Args:
        samples: Sources to generate (the local backend's list).
        job: :class:`robustlab.workflows.generate._Job` (output folder, cells, protocol, seed...). The
            output folder must be a path every node sees (the same local disk or a shared
            file system) or an fsspec URL (:mod:`robustlab.files.outputs`: its filesystem and
            options travel with the job).
        collect: Called on the driver with each :class:`~robustlab.workflows.generate.SampleOutcome`.
        process: ``process(sample, job)``, the local backend's work unit (run on workers).
        crashed: ``crashed(sample)``, the outcome recorded for a sample whose worker died
            twice. Both come from :mod:`robustlab.workflows.generate`, which calls this function.
        address, cpus: See :func:`ray_session`.

    Returns:
        Worker time of the stage, for the throughput summary.
    """
    import functools

    times = StageTimes()
    started = time.perf_counter()
    with ray_session(address, cpus) as resources:
        placement = plan_placement(resources, model=False)
        seen: set[int] = set()
        # A block whose worker died twice is dropped, not fatal: its image is recorded as
        # skipped below, as the local pool does with an image that keeps killing workers.
        with data_context(max_errored_blocks=-1, reserve=False), worker_errors_as_ours():
            size = task_size(len(samples), placement.cpus)
            ds = map_tasks(
                index_blocks(len(samples), size),
                functools.partial(
                    _write_cells, samples=list(samples), job=job, process_sample=process
                ),
                size,
            )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                for i, outcome, sec in zip(batch["index"], batch["outcome"], batch["seconds"]):
                    if isinstance(outcome, BaseException):
                        raise outcome
                    seen.add(int(i))
                    times.add("write", 1, sec)
                    collect(outcome)
        for i, s in enumerate(samples):
            if i not in seen:
                collect(crashed(s))
    times.wall = time.perf_counter() - started
    return times
