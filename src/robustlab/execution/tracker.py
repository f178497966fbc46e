"""multiprocessing's resource tracker, kept whole when something kills it.

Why: the worker pools' queues and locks are named POSIX semaphores (``/mp-...``) that
each process registers with the resource tracker, a helper process that unlinks whatever
is left when everyone exits. When that helper is killed mid-run (``kill -9``, an OOM
killer), multiprocessing starts a new one on the next registration, which has never heard
of the semaphores already in use: every later release of one of them printed a
``KeyError: '/mp-...'`` traceback from inside the new tracker (dozens per run), with the
run itself unharmed, and those semaphores would leak if robustlab died next.

:func:`keep_tracker_whole` makes this process remember what it registered and hand the
list to a restarted tracker before anything else, so releases match and cleanup still
covers them; the restart is logged in one line instead of the tracebacks.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

log = logging.getLogger(__name__)

_installed = threading.Lock()
_held: dict[tuple[str, str], None] = {}


def keep_tracker_whole() -> None:
    """Install the guard in this process (idempotent; call it in every process that starts
    or is a worker: robustlab's worker context and the forkserver preload do)."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    with _installed:
        if getattr(tracker, "_robustlab_whole", False):
            return
        register, unregister = resource_tracker.register, resource_tracker.unregister
        ensure_running = tracker.ensure_running

        def register_held(name: str, rtype: str) -> None:
            _held[(name, rtype)] = None
            register(name, rtype)

        def unregister_held(name: str, rtype: str) -> None:
            # Still held while the message goes out: a restart it triggers hands it over.
            try:
                unregister(name, rtype)
            finally:
                _held.pop((name, rtype), None)

        def ensure_whole() -> None:
            before = (tracker._fd, tracker._pid)
            ensure_running()
            if before[0] is not None and (tracker._fd, tracker._pid) != before:
                _hand_over(tracker)  # it was running, and now another one is

        # Its own warning says resources might leak; after the hand-over none do, and the
        # restart is logged in robustlab's words instead.
        warnings.filterwarnings("ignore", "resource_tracker: process died unexpectedly")
        resource_tracker.register = register_held
        resource_tracker.unregister = unregister_held
        tracker.ensure_running = ensure_whole
        tracker._robustlab_whole = True


def _hand_over(tracker) -> None:
    """Register everything this process holds with a tracker that was just restarted."""
    held = list(_held)
    for name, rtype in held:
        os.write(tracker._fd, f"REGISTER:{name}:{rtype}\n".encode("ascii"))
    log.warning(
        "the multiprocessing resource tracker was killed; restarted it with the %d "
        "resource(s) this process holds",
        len(held),
    )


__all__ = ["keep_tracker_whole"]
