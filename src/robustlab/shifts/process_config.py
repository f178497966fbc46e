"""Settings of the optional tools some shifts use, and how they travel with the work.

``ai_bg``'s diffusion inpainter, ``bg_complexity``'s diffusion model and the attribute
edits' hole-fill backend are configured once, not passed to every call. A shift computed in
a worker must use the very tool that the run record describes, even on a Ray worker that
started before the driver configured anything, or on another node. So:

* the driver (the process that plans a run) reads its settings: what ``configure_*`` set
  (:func:`set_process_config`, in this process only), else the environment variable of
  the same name, the user's input (:func:`setting`);
* planning takes one snapshot (:func:`process_settings`), describes the tools from it into
  the run record, and puts it in the work it ships (generate's job, the evaluation's
  :class:`~robustlab.run.tasks.CellImages`);
* a worker computes pixels inside :func:`task_settings` with that snapshot, and then
  reads nothing else: not its own environment, not what an earlier task left.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from robustlab.errors import InputError

PathProblem = Callable[[str | Path], str | None]

# Every setting a tool reads; the names are those of the environment variables a user sets.
VARIABLES = (
    "ROBUSTLAB_INPAINTER",
    "ROBUSTLAB_INPAINTER_DEVICE",
    "ROBUSTLAB_INPAINTER_DTYPE",
    "ROBUSTLAB_BG_DIFFUSION",
    "ROBUSTLAB_BG_DIFFUSION_DEVICE",
    "ROBUSTLAB_BG_DIFFUSION_DTYPE",
    "ROBUSTLAB_BG_ADV_MODEL",
    "ROBUSTLAB_EDIT_FILL",
)

_CONFIGURED: dict[str, str | None] = {}  # set by configure_* in this process (None: cleared)
_TASK: dict[str, str] | None = None  # the snapshot of the task being computed, if any


def set_process_config(settings: Mapping[str, object]) -> None:
    """Set ``settings`` (variable -> value) for the runs this process plans.

    A None or empty value clears the setting (the environment's value is not used either),
    so an option left out of a ``configure_*`` call falls back to its default instead of
    keeping what an earlier call set. Nothing is written to the environment: workers get
    the settings with their tasks.
    """
    for var, value in settings.items():
        _CONFIGURED[var] = str(value) if value else None


def setting(var: str) -> str | None:
    """The value of one setting here: the task's snapshot inside :func:`task_settings`,
    else what ``configure_*`` set, else the environment (the driver's user input)."""
    if _TASK is not None:
        return _TASK.get(var)
    if var in _CONFIGURED:
        return _CONFIGURED[var]
    return os.environ.get(var) or None


def process_settings() -> dict[str, str]:
    """The snapshot a run is planned with and its work carries: every set variable."""
    found = {var: setting(var) for var in VARIABLES}
    return {var: value for var, value in found.items() if value}


@contextlib.contextmanager
def task_settings(settings: Mapping[str, str] | None) -> Iterator[None]:
    """Compute inside with ``settings`` (a :func:`process_settings` snapshot) and nothing
    else; ``None`` (work made without a snapshot, e.g. one image in a notebook) leaves this
    process's own settings in force."""
    global _TASK
    if settings is None:
        yield
        return
    before, _TASK = _TASK, dict(settings)
    try:
        yield
    finally:
        _TASK = before


def checked_path(path, problem: PathProblem, *, what: str, hint: str | None = None) -> str:
    """``path`` made absolute (workers may run elsewhere), once ``problem`` finds it usable.

    Args:
        path: A checkpoint file or folder the user gave.
        problem: ``path -> None`` when usable, else why not (cheap: no weights read).
        what: The tool's name, the error's prefix.
        hint: How to get a usable checkpoint, for the error.

    Raises:
        InputError: ``path`` is not usable.
    """
    why = problem(path)
    if why:
        raise InputError(f"{what}: {why}", hint=hint)
    return str(Path(path).expanduser().resolve())


def path_setting_problem(var: str, problem: PathProblem, hint: str) -> str | None:
    """Why the checkpoint in environment variable ``var`` cannot be used, or None.

    Returns ``hint`` when ``var`` is unset, else ``"VAR=value: problem"``: the one-line
    reason a registered resource's ``check`` gives (see
    :func:`robustlab.shifts.registry.register_resource`).
    """
    path = setting(var)
    if not path:
        return hint
    why = problem(path)
    return f"{var}={path}: {why}" if why else None


__all__ = [
    "VARIABLES",
    "checked_path",
    "path_setting_problem",
    "process_settings",
    "set_process_config",
    "setting",
    "task_settings",
]
