"""The Ray Data plumbing every job shares: index blocks, map tasks that retry a dead
worker once, the data context, per-stage worker times, thread settings of tasks and actors,
and a worker's robustlab error re-raised as itself."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robustlab.errors import RobustlabError

# A worker process that dies is retried this many times before its image is given up.
TASK_RETRIES = 1


def objects(values: Sequence) -> np.ndarray:
    """A 1-D object array (``np.array`` would try to stack equal-shaped arrays)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


_THREADS_SET: set[bool] = set()


def one_thread(torch: bool) -> None:
    """One OpenCV (and torch) thread per task, once per worker process: Ray already runs
    one task per CPU. ``generate`` never needs torch, so its tasks do not import it."""
    if torch in _THREADS_SET:
        return
    _THREADS_SET.add(torch)
    if torch:
        from robustlab.execution.tasks import worker_init

        worker_init(0)
        return
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover - OpenCV is a dependency
        pass


def model_threads(threads: int, device: str) -> None:
    """torch threads of a model actor whose model runs on the CPU (see
    :attr:`Placement.model_threads`); a GPU model's actor keeps Ray's one thread."""
    if threads > 0 and str(device).startswith("cpu"):
        import torch

        torch.set_num_threads(int(threads))


def _ray_cause(exc: BaseException) -> BaseException | None:
    """The robustlab error a Ray exception carries from a worker, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RobustlabError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__
    return None


@contextlib.contextmanager
def worker_errors_as_ours():
    """Re-raise a worker's robustlab error (a full disk, weights a node lacks) as itself,
    so the CLI prints its one line instead of Ray's wrapped traceback."""
    try:
        yield
    except RobustlabError:
        raise
    except Exception as exc:
        cause = _ray_cause(exc)
        if cause is not None:
            raise cause from None
        raise


@dataclass
class StageTimes:
    """Worker time per pipeline stage, for the throughput summary (and the torch threads
    of a model stage's actors, which decide its speed on a CPU, with the lanes they are
    shared among, :mod:`robustlab.execution.lanes`: a lane's time counts as a worker's)."""

    items: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    threads: dict[str, int] = field(default_factory=dict)
    lanes: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0

    def add(
        self,
        stage: str,
        n: int,
        seconds: float,
        threads: int | None = None,
        lanes: int | None = None,
    ) -> None:
        self.items[stage] = self.items.get(stage, 0) + int(n)
        self.seconds[stage] = self.seconds.get(stage, 0.0) + float(seconds)
        if threads is not None:
            self.threads[stage] = int(threads)
        if lanes is not None:
            self.lanes[stage] = int(lanes)

    def summary(self) -> dict[str, Any]:
        """``{stage: {items, worker_s, items_per_worker_s[, threads, lanes]}, wall_s}``
        (rates per second)."""
        out: dict[str, Any] = {}
        for stage, n in self.items.items():
            s = self.seconds.get(stage, 0.0)
            out[stage] = {
                "items": n,
                "worker_s": round(s, 3),
                "items_per_worker_s": round(n / s, 2) if s > 0 else None,
            }
            if stage in self.threads:
                out[stage]["threads"] = self.threads[stage]
            if stage in self.lanes:
                out[stage]["lanes"] = self.lanes[stage]
        out["wall_s"] = round(self.wall, 3)
        return out

    def line(self) -> str:
        return stages_line(self.summary())


def stages_line(summary: dict) -> str:
    """One line from :meth:`StageTimes.summary`: items and rate per stage, the model actors'
    start-up time, and the wall time."""
    parts = [
        f"{d['items']} actor start(s) in {d['worker_s']:.1f} s"
        if stage == "actor start"
        else f"{stage} {d['items']} in {d['worker_s']:.1f} worker-s"
        + (f" ({d['items_per_worker_s']:.1f}/s per worker)" if d["items_per_worker_s"] else "")
        + _threads_note(d)
        for stage, d in summary.items()
        if isinstance(d, dict)
    ]
    return f"ray stages: {'; '.join(parts)}; wall {summary.get('wall_s', 0):.1f} s"


def task_size(n_items: int, cpus: float) -> int:
    """Items per map task: about four tasks per CPU, at most 16 items each.

    One item per task would pay Ray's per-task cost (scheduling, an object per result:
    tens of ms) on every image, more than a small image's work; a few tasks per CPU still
    balance the load, and a task lost with its worker only redoes what it had not written.
    """
    return max(1, min(16, int(n_items // max(1.0, 4 * cpus))))


def index_blocks(n: int, size: int):
    """A dataset of the indices ``0..n-1`` in blocks of ``size``: one map task each.

    Ray Data sizes blocks by bytes, so a few hundred small index rows became a single block,
    and every batch of it ran in one task after the other: the CPU stage used one core
    whatever the cluster had (generate on 2 cores: x0.53 of the local backend; one block per
    task: see benchmarks/README.md).
    """
    import ray.data

    return ray.data.from_items(
        [{"index": i} for i in range(n)], override_num_blocks=max(1, -(-n // size))
    )


def map_tasks(ds, fn, size: int = 1, **kwargs):
    """``ds.map_batches(fn)`` as CPU tasks that a dead worker process retries only
    ``TASK_RETRIES`` times (Ray Data's default retries forever: an image that kills its
    worker every time would hang the run; locally it is skipped after two tries).

    ``max_retries`` has no named parameter in Ray Data 2.60 yet and goes through the
    deprecated ``**ray_remote_args`` (hence the upper bound on ray in pyproject.toml). Its
    remote arguments differ from the model actors', which also keeps Ray from fusing this
    stage into the actor stage, where decoding would run on the model's single actor.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return ds.map_batches(fn, batch_size=size, num_cpus=1, max_retries=TASK_RETRIES, **kwargs)


@contextlib.contextmanager
def data_context(*, max_errored_blocks: int = 0, reserve: bool = True):
    """Ray Data settings for one pipeline, restored afterwards (the context is global).

    ``reserve=False`` turns off Ray Data's per-operator resource reservation, for a
    pipeline of one map stage: with it, a 2-CPU cluster ran that stage's tasks one at a
    time (8 tasks of 0.3 s: 2.14 s; without: 1.27 s). Pipelines with a model actor keep it,
    so the map tasks can never take the CPUs the actors need.
    """
    import ray.data

    ctx = ray.data.DataContext.get_current()
    keys = {
        "enable_progress_bars": False,
        "max_errored_blocks": max_errored_blocks,
        "op_resource_reservation_enabled": reserve,
    }
    old = {k: getattr(ctx, k) for k in keys}
    ctx.execution_options.preserve_order = False
    for k, v in keys.items():
        setattr(ctx, k, v)
    try:
        yield ctx
    finally:
        for k, v in old.items():
            setattr(ctx, k, v)


class StartReport:
    """An actor's start-up seconds (building its model or pipeline), sent to the driver
    once, with the actor's first rows: a fixed cost every Ray job pays per actor, which the
    local backend, holding the model already, does not (benchmarks/README.md)."""

    def __init__(self, seconds: float):
        self.seconds, self.sent = float(seconds), False

    def column(self, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.float64)
        if n and not self.sent:
            out[0], self.sent = self.seconds, True
        return out


def _threads_note(stage: dict) -> str:
    """`` [2 torch threads]`` of a model stage on the CPU (``in 2 lanes`` when its actors
    compute batches side by side); nothing for other stages."""
    if not stage.get("threads"):
        return ""
    lanes = stage.get("lanes", 1)
    return f" [{stage['threads']} torch threads" + (f" in {lanes} lanes]" if lanes > 1 else "]")
