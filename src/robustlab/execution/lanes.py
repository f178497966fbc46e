"""Forward lanes: a CPU model's batches run side by side, each on its own torch threads.

Why: on the CPU one forward pass spreads every operator over torch's threads, and those
threads meet after each operator; a thread that waits (for a short operator, or because
the image preparation took its core) holds all of them up. Two batches at once, each on
half the threads, do not wait for each other. On 2 cores, lite0 on 4 batches of 64
images: one after another on 2 threads 6.5-7.0 s, two at once on 1 thread each
5.5-5.7 s (``benchmarks/evaluate.py --part speed`` prints both).

A lane runs whole batches, the same batches as one lane would, so the logits are those
of the same batch on fewer threads. That is what any change of torch's thread count
gives: on this project's machine (oneDNN 3.12, lite0 and a ResNet-50, 1 against 2
threads) equal bit for bit from 16 images a batch, and within 1.1e-5 in the logits
below that (oneDNN splits a small batch's convolutions by thread), the top-5 classes of
192 photos unchanged (``tests/test_lanes.py``). Two batches in flight hold twice a
batch's activations (lite0, batch 32: peak 1.80 GB against 1.46 GB, flat from 1,000 to
10,000 images); ``lanes=1`` (``--lanes 1``) runs one batch at a time in the calling
thread, as before.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

#: Lanes of a model on the CPU when torch has at least two threads. More lanes would
#: hold more batches' activations at once; two already keep every thread busy between
#: operators (measured on 2 cores only: no larger CPU machine was at hand).
DEFAULT_LANES = 2


def _malloc_trim() -> Callable[[int], Any] | None:
    """glibc's ``malloc_trim`` (None elsewhere). Each lane thread allocates its batches'
    activations from a malloc arena of its own, and freed blocks stayed there, scattered:
    ``benchmarks/evaluate.py --part memory`` (lite0, 2 lanes) peaked at 1,726 MB on 1,000
    images and 1,977 MB on 10,000 (+251 MB, the target is < 100 MB). Trimming after each
    batch hands the free pages back: 1,803 and 1,784 MB (-19 MB). One lane (1,455 MB)
    never grew: the second batch's activations are the lanes' fixed cost."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Give the free pages of every malloc arena back to the system, where glibc can
    (after a lane's batch: a few milliseconds against a batch's second or more)."""
    if _TRIM is not None:
        _TRIM(0)


def lane_threads(threads: int, lanes: int) -> list[int]:
    """torch threads of each lane: ``threads`` shared out, at least one each."""
    base, extra = divmod(max(int(threads), int(lanes)), int(lanes))
    return [base + (1 if i < extra else 0) for i in range(int(lanes))]


def default_lanes(model, asked: int | None = None, *, threads: int | None = None) -> int:
    """Lanes for ``model``: ``asked`` when given, else :data:`DEFAULT_LANES` for a torch
    module on the CPU with at least two torch threads (``threads``; None: this process's
    count), not compiled (a compiled forward pass is one graph per process) and 1 for
    everything else (a GPU runs one stream; ONNX Runtime has its own thread pool)."""
    if asked is not None:
        return max(1, int(asked))
    import torch

    if not str(model.input_device()).startswith("cpu"):
        return 1
    if not isinstance(getattr(model, "module", None), torch.nn.Module):
        return 1
    if getattr(model, "_compiled", None) is not None:
        return 1
    n = torch.get_num_threads() if threads is None else int(threads)
    return DEFAULT_LANES if n >= 2 else 1


class LaneThreads:
    """Each thread that calls :meth:`apply` computes on its own share of ``threads``
    torch threads: for lanes whose threads another framework owns (a Ray actor with
    ``max_concurrency``, :mod:`robustlab.execution.ray.predictor`). A thread's share is fixed
    at its first call and set again whenever something else changed it (building a
    model sets every thread's count)."""

    def __init__(self, threads: int, lanes: int):
        # One lane where there is nothing to share (a GPU model: no threads given).
        self.lanes = max(1, int(lanes)) if threads > 0 else 1
        self._shares = (
            itertools.cycle(lane_threads(threads, self.lanes)) if self.lanes > 1 else None
        )
        self._lock = threading.Lock()
        self._local = threading.local()

    def apply(self) -> None:
        if self._shares is None:
            return
        import torch

        n = getattr(self._local, "threads", None)
        if n is None:
            with self._lock:
                n = self._local.threads = next(self._shares)
        if torch.get_num_threads() != n:  # setting it clears oneDNN's cache: only if needed
            torch.set_num_threads(n)


class ForwardLanes:
    """Runs ``fn(batch)`` calls on up to ``lanes`` threads at once and hands the results
    back in submission order.

    :meth:`submit` starts a call and returns at once; :meth:`ready` then yields
    ``(result, tag)`` of the oldest calls, waiting until fewer than ``lanes`` are left,
    so the caller prepares the next batch while one lane still computes. With one lane,
    ``fn`` runs inside :meth:`submit`.
    """

    def __init__(self, fn: Callable[[Any], Any], lanes: int):
        import torch

        self.fn = fn
        self.lanes = max(1, int(lanes))
        # Read before any lane sets its own count: this initialises the calling thread's
        # count (torch gives a thread the last count set anywhere when it first computes)
        # and is the count restored on close.
        self._threads = torch.get_num_threads()
        self._pending: deque[tuple[Future, Any]] = deque()
        self.busy_s = 0.0  # wall time with at least one lane computing
        self._busy_until = 0.0
        self._pool: ThreadPoolExecutor | None = None
        if self.lanes > 1:
            # Each lane thread takes its share of the threads when it starts.
            shares = LaneThreads(self._threads, self.lanes)
            self._pool = ThreadPoolExecutor(
                self.lanes, thread_name_prefix="robustlab-lane", initializer=shares.apply
            )

    def _timed(self, batch) -> tuple[Any, float, float]:
        t0 = time.perf_counter()
        out = self.fn(batch)
        t1 = time.perf_counter()
        if self._pool is not None:  # a lane thread: its arena (see _malloc_trim)
            release_free_memory()
        return out, t0, t1

    def submit(self, batch, tag: Any = None) -> None:
        """Start ``fn(batch)``; ``tag`` comes back with its result."""
        if self._pool is None:
            future: Future = Future()
            future.set_result(self._timed(batch))
        else:
            future = self._pool.submit(self._timed, batch)
        self._pending.append((future, tag))

    def ready(self, *, drain: bool = False) -> Iterator[tuple[Any, Any]]:
        """The results in submission order: those needed to leave a lane free (every one
        with ``drain``), waiting for them, then any others already finished."""
        while self._pending:
            future, tag = self._pending[0]
            must = drain or len(self._pending) >= self.lanes
            if not must and not future.done():
                return
            out, t0, t1 = future.result()  # a lane's exception is raised here
            self._pending.popleft()
            # Lanes start calls in submission order, so the union of the busy intervals
            # grows at its end only.
            self.busy_s += max(0.0, t1 - max(t0, self._busy_until))
            self._busy_until = max(self._busy_until, t1)
            yield out, tag

    def finished(self) -> Iterator[tuple[Any, Any]]:
        """After a failure elsewhere (Ctrl-C while the next batch was prepared): the
        results of the calls already started, in order, waiting for them as one lane
        would have; it stops at the first call that failed and drops the rest."""
        while self._pending:
            future, tag = self._pending.popleft()
            if future.cancelled() or future.exception() is not None:
                break
            yield future.result()[0], tag
        self._pending.clear()

    def close(self) -> None:
        """Stop the lanes (a call still computing finishes in the background) and give
        the calling thread's torch thread count back to new threads."""
        if self._pool is not None:
            import torch

            for future, _ in self._pending:
                future.cancel()
            self._pending.clear()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            torch.set_num_threads(self._threads)


@contextlib.contextmanager
def forward_lanes(fn: Callable[[Any], Any], lanes: int) -> Iterator[ForwardLanes]:
    """:class:`ForwardLanes` closed on the way out, whatever happened."""
    pool = ForwardLanes(fn, lanes)
    try:
        yield pool
    finally:
        pool.close()
