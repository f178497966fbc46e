"""Worker processes die with the robustlab process that started them.

After ``kill -9`` of ``robustlab evaluate`` or ``generate`` nothing runs the normal
shutdown, and worker processes used to live on: a DataLoader worker holding 690 MB for
minutes, generate workers still writing images. Two links make the kernel end them:

* the workers' parent is not robustlab itself but the multiprocessing *forkserver* (a
  clean process that forks the workers, see :mod:`robustlab.execution.executors`), which
  would otherwise outlive robustlab for as long as any worker holds its pipe open. The
  forkserver imports :mod:`robustlab.execution._forkserver_lifeline` when it starts, which
  asks for ``SIGKILL`` when robustlab dies (Linux ``PR_SET_PDEATHSIG``);
* every process the forkserver forks asks the same about the forkserver, right after
  the fork (before it imports anything), and the pools' initialisers ask again, which
  also covers the spawn start method.

So killing robustlab kills the forkserver, which kills the workers. Elsewhere than Linux
these calls do nothing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading

from robustlab.processes import available_cpus

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def default_workers(model_device: str | None = None) -> int:
    """The one default of ``--workers`` in every command: one worker per CPU the main
    process leaves free.

    Without a model on the CPU (``generate``, or a model on a GPU: ``model_device``
    ``"cuda"``, ``"mps"``...), the main process keeps one core for the model or the writing
    and the workers get the rest (at least one). A model on the CPU (``model_device``
    ``"cpu"``) runs its forward pass on torch's threads, every core by default; the
    workers get only the cores beyond those threads, none on a default setup, and the
    images are then prepared in the main process between batches. A worker competing with
    a forward pass that uses every core costs more than its own CPU time: the forward
    pass's threads wait at each operator for the one the worker displaced. On 2 cores
    (``benchmarks/evaluate.py --part speed``, lite0, four cheap corruptions), evaluate took
    1.2 s longer than the bare forward pass with one worker, 0.7 s longer without.
    """
    cpus = available_cpus()
    if model_device is None or not str(model_device).startswith("cpu"):
        return max(1, cpus - 1)
    import torch

    return max(0, cpus - torch.get_num_threads())


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent exits.

    If the parent is already gone (it died between our fork and this call), exit now:
    the signal would never come.

    Returns:
        True when the request is in place; False where the platform has no such call.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):  # no libc prctl (another C library)
        return False
    if os.getppid() != parent:
        os._exit(1)
    return True


@contextlib.contextmanager
def _main_script_hidden():
    """While a worker starts, make the user's ``__main__`` look like an interactive one.

    multiprocessing tells a forkserver/spawn child to re-run the parent's main script (as
    ``__mp_main__``) so that objects defined there can be unpickled. robustlab's workers
    only run robustlab code, and re-running a script with no ``if __name__ ==
    "__main__":`` guard makes every worker start the user's whole job again (and die:
    "DataLoader worker exited unexpectedly"). Without ``__file__`` and ``__spec__`` the
    child leaves its ``__main__`` alone, as it does for ``python -c`` or a notebook.
    """
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main and k in main.__dict__}
    if not saved:
        yield
        return
    with _HIDE_LOCK:
        try:
            main.__dict__.pop("__file__", None)
            main.__spec__ = None
            yield
        finally:
            main.__dict__.update(saved)


_HIDE_LOCK = threading.Lock()


class _ForkServerProcess(multiprocessing.context.ForkServerProcess):
    def start(self):
        with _main_script_hidden():
            super().start()


class _SpawnProcess(multiprocessing.context.SpawnProcess):
    def start(self):
        with _main_script_hidden():
            super().start()


class _ForkServerContext(multiprocessing.context.ForkServerContext):
    Process = _ForkServerProcess


class _SpawnContext(multiprocessing.context.SpawnContext):
    Process = _SpawnProcess


def worker_context():
    """The multiprocessing context for robustlab's worker pools.

    forkserver where the platform has it (workers start clean instead of inheriting this
    process's thread pools), else spawn. Either way the workers never re-run the user's
    main script (see :func:`_main_script_hidden`), so a plain script calling
    :func:`robustlab.evaluate` needs no ``__main__`` guard; the price is that objects
    defined in that script cannot be sent to workers (robustlab never sends any). The
    forkserver is asked to tie itself to this process when it starts; only from the main
    thread, because the kernel's parent-death signal follows the *thread* that started it.
    """
    from robustlab.execution.tracker import keep_tracker_whole

    keep_tracker_whole()  # a killed resource tracker costs no tracebacks (execution/tracker.py)
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return _SpawnContext()
    context = _ForkServerContext()
    if threading.current_thread() is threading.main_thread():
        # The lifeline first (a worker must die with robustlab from its first
        # instruction), then the warm-up (see robustlab.execution._forkserver_warm).
        context.set_forkserver_preload(
            ["robustlab.execution._forkserver_lifeline", "robustlab.execution._forkserver_warm"]
        )
    return context


__all__ = ["die_with_parent", "worker_context"]
