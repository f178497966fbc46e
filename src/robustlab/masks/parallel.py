"""Mask several images at once: threads, each on one torch and one OpenCV thread.

Why threads: GrabCut is one call into OpenCV that runs on a single core (0.4-0.5 s of CPU
for a 256-pixel work copy, 5 iterations: about 80 % of an automatic mask), and OpenCV
and torch release the GIL while they compute, so two images on two threads use two
cores. Threads share one loaded classifier for the CAMs; worker processes would each
load their own.

Why one library thread per image: a lite0 CAM on torch's default two threads met a busy
machine badly (2 cores shared with other jobs: 4.2 s per forward pass against 0.12 s on
one thread, its OpenMP threads waiting for each other at every operator), while an image
per core keeps every core busy without any thread waiting for another.

The masks are those of one image after another: GrabCut's k-means draws from OpenCV's
random generator, which is per thread and seeded before each call
(:func:`robustlab.masks.auto._run_grabcut`); a CAM computed on one torch thread instead
of two can differ in the last bits of its floats (oneDNN splits a convolution by
thread), which moves a pixel across a seeding threshold rarely
(``benchmarks/masks_speed.py`` measures the agreement on the 500 shared photos).
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def default_threads() -> int:
    """One masking thread per CPU this process may use (affinity masks respected)."""
    from robustlab.processes import available_cpus

    return available_cpus()


def _one_library_thread() -> None:
    """Each masking thread computes on one torch thread (a thread's count is its own
    once it has computed; set again before every image, as loading a model resets it)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@contextmanager
def _library_threads(uses_torch: bool) -> Iterator[None]:
    """One OpenCV thread while the masking threads run (OpenCV's count is per process),
    and the calling thread's torch count given back afterwards (a masking thread's
    ``set_num_threads`` is also what a thread that has not computed yet starts with)."""
    import cv2

    torch = None
    if uses_torch:
        import torch
    before_torch = torch.get_num_threads() if torch is not None else None
    before_cv2 = cv2.getNumThreads()
    cv2.setNumThreads(1)
    try:
        yield
    finally:
        cv2.setNumThreads(before_cv2)
        if before_torch is not None and torch is not None:
            torch.set_num_threads(before_torch)


@contextmanager
def in_order(
    fn: Callable[[T], R],
    items: Sequence[T],
    threads: int | None = None,
    *,
    uses_torch: bool = False,
) -> Iterator[Iterator[R]]:
    """``fn(item)`` for every item, computed on ``threads`` threads, yielded in order.

    At most two items per thread are started ahead of the one yielded, so memory does
    not grow with the number of items. An exception of ``fn`` comes out of the iterator
    at its item; the items not started yet are dropped and those running finish first.

    Args:
        threads: None: :func:`default_threads`; 1: everything in the calling thread,
            on the libraries' own thread counts (as before there were threads here).
        uses_torch: ``fn`` runs a torch model: its threads' counts are managed.
    """
    n = default_threads() if threads is None else max(1, int(threads))
    if n == 1 or len(items) <= 1:
        yield (fn(x) for x in items)
        return

    def task(x: T) -> R:
        _one_library_thread()
        return fn(x)

    with _library_threads(uses_torch):
        pool = ThreadPoolExecutor(n, thread_name_prefix="robustlab-masks")
        try:
            yield _ordered(pool, task, items, 2 * n)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def _ordered(pool: ThreadPoolExecutor, fn: Callable[[Any], R], items: Sequence, ahead: int):
    pending: deque[Future] = deque()
    it = iter(items)
    for x in it:
        pending.append(pool.submit(fn, x))
        if len(pending) >= ahead:
            break
    while pending:
        result = pending.popleft().result()
        for x in it:
            pending.append(pool.submit(fn, x))
            break
        yield result


__all__ = ["default_threads", "in_order"]
