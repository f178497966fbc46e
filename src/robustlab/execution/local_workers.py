"""The local backend's worker processes: how many tasks they keep ready, and how a run
survives one of them dying (the tasks not yet delivered go to fresh workers)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

from robustlab.errors import EnvironmentProblem
from robustlab.execution.bookkeeping import one_line
from robustlab.execution.executors import get_executor
from robustlab.execution.tasks import Task

log = logging.getLogger(__name__)


def local_prefetch(prefetch: int, batch_size: int, workers: int, tasks: Sequence[Task]) -> int:
    """Tasks each DataLoader worker keeps ready: ``prefetch``, raised until all workers
    together hold one batch of images ahead of the one being filled.

    The DataLoader counts its prefetch in tasks, and a task holds one sample's cells (5 in
    a run of four corruptions, 76 in the whole ImageNet-C suite). With too few tasks
    queued, the workers stop early during each forward pass and the model then waits for
    them to make the rest of the next batch, one task after the other: the workers' time
    adds to the model's instead of overlapping it (on 2 CPU cores, 2 prefetched tasks of
    5 cells against a batch of 32 cost about a tenth of the throughput). Memory stays
    bounded by about two batches of images, whatever the data set's size.
    """
    if not tasks or int(workers) <= 0:
        return max(1, int(prefetch))
    per_task = max(1.0, sum(len(t.cells) for t in tasks) / len(tasks))
    ahead = math.ceil(int(batch_size) / (per_task * int(workers)))
    return max(1, int(prefetch), ahead + 1)


# Deaths of worker processes at the same task before a run stops (the task itself may be
# what exhausts the memory: retrying it for ever would never end).
WORKER_DEATHS = 3


def worker_died(exc: BaseException) -> bool:
    """Whether a DataLoader error says one of its worker processes died (killed by a
    signal, or exited without a word), rather than a bug in the work itself.

    A worker killed while it hands over a batch leaves no message of its own: the main
    process meets the broken connection of the shared-memory hand-over instead
    (``ConnectionResetError``/``ConnectionRefusedError`` from multiprocessing's resource
    sharer, or ``EOFError``), raised from inside the DataLoader's queue.
    """
    if isinstance(exc, (ConnectionError, EOFError)):
        return any("multiprocessing" in f.filename for f in _frames(exc))
    return "DataLoader worker (pid" in str(exc)


def _frames(exc: BaseException):
    """The frames of ``exc``'s traceback, innermost last."""
    import traceback

    return traceback.extract_tb(exc.__traceback__)


class TaskTail:
    """The tasks of ``dataset`` from ``start`` on, keeping their indices (a retry after a
    worker died). Picklable, like the dataset it wraps."""

    def __init__(self, dataset, start: int):
        self.dataset = dataset
        self.start = int(start)

    def __len__(self) -> int:
        return len(self.dataset) - self.start

    def __getitem__(self, i: int):
        return self.dataset[self.start + i]


def surviving_worker_deaths(
    dataset, tasks: list[Task], samples: Sequence, options, *, pin_memory: bool
) -> Iterator:
    """The executor's items in task order; when a worker process dies (the kernel's
    out-of-memory killer, a ``kill -9``), the tasks not yet delivered are handed to
    fresh workers, as ``generate`` retries its images.

    The tasks already delivered keep their results (items come in task order, so
    everything before the first missing task is done). A task at which workers die
    :data:`WORKER_DEATHS` times in a row stops the run with one line: what is stored
    stays stored, and the same command resumes.
    """
    executor = get_executor(options.backend)
    prefetch = local_prefetch(options.prefetch, options.batch_size, options.workers, tasks)
    start, deaths = 0, 0
    while start < len(tasks):
        view = dataset if start == 0 else TaskTail(dataset, start)
        try:
            for item in executor(
                view,
                workers=options.workers,
                prefetch=prefetch,
                pin_memory=pin_memory,
            ):
                if int(item[0]) >= start:
                    start, deaths = int(item[0]) + 1, 0
                yield item
            return
        except (RuntimeError, ConnectionError, EOFError) as exc:
            if not worker_died(exc):
                raise
            deaths += 1
            sample = samples[tasks[start].sample_index].id if start < len(tasks) else ""
            if deaths >= WORKER_DEATHS:
                raise EnvironmentProblem(
                    f"worker processes died {deaths} times while preparing {sample} "
                    f"({one_line(exc)}); the predictions made so far are stored",
                    hint="rerun the same command to resume; if the system ran out of "
                    "memory, pass fewer --workers",
                ) from None
            log.warning(
                "a worker process died (%s); retrying %d task(s) from %s in fresh workers",
                one_line(exc),
                len(tasks) - start,
                sample,
            )
