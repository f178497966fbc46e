"""The process's pool of JPEG codec processes, for the shift device's host round trips.

:func:`robustlab.shifts.batched.jpeg.jpeg_roundtrip_async` codes a batch in these
processes while the thread that shifts goes on (processes, not threads: see there). They
start from :func:`robustlab.execution.lifeline.worker_context`, like every robustlab worker: a
forkserver (or spawn) that never re-runs the user's main script and dies with robustlab.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import Executor, ProcessPoolExecutor

# Each codec process holds numpy and OpenCV: a many-core host gets no more than this.
MAX_PROCESSES = 32

_POOL: tuple[int, ProcessPoolExecutor, int] | None = None
_LOCK = threading.Lock()


def codec_pool() -> tuple[Executor, int] | None:
    """This process's codec processes (one per usable core, at most
    :data:`MAX_PROCESSES`, started on first use and kept) and their number; None where
    this process may start none: a daemonic one (a multiprocessing pool's worker may have
    no children), or a fork of a process that had them (their locks and threads were
    copied mid-use: a pool started there can hang). The caller then codes in its thread.
    """
    global _POOL
    with _LOCK:
        if _POOL is not None and _POOL[0] != os.getpid():
            return None
        if multiprocessing.current_process().daemon:
            return None
        if _POOL is None:
            from robustlab.data.jpeg import init_codec_process
            from robustlab.processes import available_cpus
            from robustlab.execution.lifeline import worker_context

            n = min(available_cpus(), MAX_PROCESSES)
            pool = ProcessPoolExecutor(
                n, mp_context=worker_context(), initializer=init_codec_process
            )
            _POOL = (os.getpid(), pool, n)
        return _POOL[1], _POOL[2]
