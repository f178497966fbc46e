"""Processes and cores: whether a recorded process still runs, how many cores this one may use.

Whether a process still runs is the one check behind "was that run killed?".

A run records its host and pid; a later run on the same host asks whether that pid is
alive to tell a killed run (``kill -9``, power loss) from one still writing. psutil answers
on every OS, and counts a zombie (exited, not yet reaped by its parent) as dead, which
``os.kill(pid, 0)`` does not.
"""

from __future__ import annotations

import os

import psutil


def available_cpus() -> int:
    """CPUs this process may use (respects affinity masks and container limits)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs on this machine (a zombie is not running)."""
    try:
        return psutil.Process(int(pid)).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # AccessDenied: it exists, owned by someone else
        return True
