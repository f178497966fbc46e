"""The errors robustlab shows to a user, as opposed to bugs.

Why a hierarchy: the CLI must tell "you asked for something that cannot work" (one line,
with a hint, no traceback) from "robustlab is broken" (a traceback to report). A plain
``ValueError`` from deep inside numpy or a shift is a bug, not bad input, so only these
classes are printed as user errors. Each keeps its standard-library base (``ValueError``,
``FileNotFoundError``, ``OSError``) so callers that catch those keep working.

Every error carries an optional ``hint``: the next thing to try.
"""

from __future__ import annotations


class RobustlabError(Exception):
    """Base of every user-facing error; ``hint`` says what to do about it.

    Attributes:
        hint: One short sentence, or None.
        exit_code: Process exit status the CLI uses for this kind of error.
    """

    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class InputError(RobustlabError, ValueError):
    """Bad input: an argument, a file, a folder, a CSV, a mask the user handed over."""


class InputChangedError(InputError):
    """A rerun whose inputs differ from what an existing run or output folder was made of.

    Resuming would mix results of two different inputs, so robustlab refuses and says
    which input changed.
    """


class MissingResourceError(RobustlabError, FileNotFoundError):
    """Something the request needs is not there: weights, a checkpoint, an optional
    package, a data folder."""


class StoreError(RobustlabError):
    """The results database cannot be used: corrupted, truncated, not a DuckDB file, or
    written by an incompatible version."""

    exit_code = 3


class EnvironmentProblem(RobustlabError, OSError):
    """The machine, not the request: disk full, read-only folder, no permission, a device
    that is not available."""

    exit_code = 3


__all__ = [
    "RobustlabError", "InputError", "InputChangedError", "MissingResourceError",
    "StoreError", "EnvironmentProblem",
]
