"""Process-wide configuration of the optional tools some shifts use, kept in the environment.

``ai_bg``'s diffusion inpainter, ``bg_complexity``'s diffusion model and the attribute
edits' hole-fill backend are configured once per process, not passed to every call: a
shift computed in a worker process must use the very tool that the process planning the
run recorded. Worker processes inherit the environment, so each ``configure_*`` function
writes its settings there (:func:`set_process_config`), after checking them, and each tool
reads them back when first used. The same variables are what a user sets in a shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from robustlab.errors import InputError

PathProblem = Callable[[str | Path], str | None]


def set_process_config(settings: Mapping[str, object]) -> None:
    """Write ``settings`` (environment variable -> value) for this process and its workers.

    A None or empty value removes the variable, so an option left out of a ``configure_*``
    call falls back to its default instead of keeping what an earlier call set.
    """
    for var, value in settings.items():
        if value:
            os.environ[var] = str(value)
        else:
            os.environ.pop(var, None)


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
    path = os.environ.get(var)
    if not path:
        return hint
    why = problem(path)
    return f"{var}={path}: {why}" if why else None


__all__ = ["checked_path", "path_setting_problem", "set_process_config"]
