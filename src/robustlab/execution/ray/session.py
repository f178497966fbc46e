"""Connecting to a Ray cluster, or starting a Ray instance on this machine, for one job."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

from robustlab.errors import EnvironmentProblem, InputError, MissingResourceError


log = logging.getLogger(__name__)


RAY_HINT = "install it with: pip install 'robustlab[ray]'"


CONNECT_TIMEOUT_S = 5.0


# Settings of a Ray instance robustlab starts on this machine. Ray raises its workers'
# niceness by 15 (``worker_niceness``) to keep its own daemons responsive; the workers are the
# job here (the local backend's processes run at the user's priority), and on a machine
# shared with other work the demoted workers lost most of their CPU to it: evaluate with a
# ResNet-50 at x0.41-0.72 of the local backend (benchmarks/README.md). A cluster started
# with ``ray start`` keeps its own setting (``RAY_worker_niceness=0 ray start ...``).
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}


def require_ray():
    """The ``ray`` module with Ray Data, or a one-line error naming the extra to install."""
    try:
        import ray
        import ray.data  # the backend is built on Ray Data
    except ImportError as exc:
        raise MissingResourceError(
            f"--backend ray needs Ray (ray[data]), which is not installed ({exc.name or exc})",
            hint=RAY_HINT,
        ) from None
    return ray


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in seconds, in one line, when ``address`` does not answer.

    ``ray.init`` would retry an unreachable cluster for a long time before giving up with
    a traceback; a TCP connect to the head's port says the same at once. ``auto`` (the
    cluster this machine's ``ray start`` left a record of) is checked by Ray itself.
    """
    if address in ("auto", "local"):
        return
    text = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(
            f"--address {address!r} is not HOST:PORT",
            hint="pass the address `ray start --head` printed, e.g. 10.0.0.5:6379",
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = f"no answer in {timeout:.0f} s"
        raise EnvironmentProblem(
            f"cannot reach a Ray cluster at {address}: {reason}",
            hint="start one with `ray start --head` and pass the address it prints, or leave "
            "out --address to run on a Ray instance on this machine",
        ) from None


def ray_running() -> bool:
    """Whether this process is already connected to Ray (a session of its own is open)."""
    import ray

    return ray.is_initialized()


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: int | None = None) -> Iterator[dict]:
    """Connect to a cluster (or start a Ray instance on this machine) for one job.

    Yields ``ray.cluster_resources()``. A Ray already initialised in this process (a user's
    own ``ray.init``, a test fixture) is used as it is and left running; an instance
    started here is shut down at the end, so a library call leaves no processes behind,
    and runs its workers at this process's priority (:data:`LOCAL_SYSTEM_CONFIG`).

    Args:
        address: ``HOST:PORT`` of a running cluster's head (``ray start --head``), ``auto``,
            or None for a new Ray instance on this machine.
        cpus: CPUs of that new instance (None: all); ignored for an existing cluster,
            whose own resources decide.
    """
    ray = require_ray()
    _quiet_ray()
    started = False
    if not ray.is_initialized():
        if address:
            check_address(address)
        kwargs: dict[str, Any] = {
            "address": address,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if not address:
            kwargs.update(
                num_cpus=cpus or None,
                include_dashboard=False,
                _system_config=dict(LOCAL_SYSTEM_CONFIG),
            )
        # Ray's C++ core would print a warning line per connection retry before the error.
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
        try:
            ray.init(**kwargs)
        except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
            token = "token" in str(exc).lower()
            raise EnvironmentProblem(
                f"cannot connect to a Ray cluster at {address}: "
                + ("it asks for an authentication token" if token else _first_line(exc)),
                hint="export RAY_AUTH_MODE=token, with the head's ~/.ray/auth_token on this machine"
                if token
                else "check the address `ray start --head` printed",
            ) from None
        started = True
    try:
        yield dict(ray.cluster_resources())
    finally:
        if started:
            ray.shutdown()


def _quiet_ray() -> None:
    """Ray Data's per-dataset INFO lines and bars would bury robustlab's own progress."""
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def node_cpus() -> list[float]:
    """CPUs of each live node of the connected cluster (Ray's ``CPU`` resource)."""
    import ray

    return [
        float(n["Resources"].get("CPU", 0))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    ]
