"""The errors robustlab shows to a user, as opposed to bugs.

Why a hierarchy: the CLI must tell "you asked for something that cannot work" (one line,
with a hint, no traceback) from "robustlab is broken" (a traceback to report). A plain
``ValueError`` from deep inside numpy or a shift is a bug, not bad input, so only these
classes are printed as user errors. Each keeps its standard-library base (``ValueError``,
``FileNotFoundError``, ``OSError``) so callers that catch those keep working.

Every error carries an optional ``hint``: the next thing to try.
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from contextlib import contextmanager


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

    def __reduce__(self):
        # Worker processes send errors back pickled; keep the hint on the way.
        return (self.__class__, (self.message,), {"hint": self.hint})


class InputError(RobustlabError, ValueError):
    """Bad input: an argument, a file, a folder, a CSV, a mask the user handed over."""


def closest(word: object, choices: Iterable[str], n: int = 3) -> list[str]:
    """The ``choices`` closest to a misspelt ``word`` (difflib's ratio, at least 0.6), best
    first: the one rule for every "did you mean" robustlab prints."""
    return difflib.get_close_matches(str(word), list(dict.fromkeys(choices)), n=n, cutoff=0.6)


def unknown_name(
    what: str, name: object, known: Iterable[str], *, listing: str | None = None
) -> InputError:
    """The error for a misspelt name: ``unknown shift 'gausian_noise'; did you mean
    gaussian_noise?``.

    Listing every known name (44 shifts) buries the one the user meant, so only the closest
    matches (difflib's ratio) are named. With no close match the names are listed when
    there are few, otherwise ``listing`` (the command that shows them) goes in the hint.
    """
    names = list(dict.fromkeys(known))
    close = closest(name, names)
    if close:
        return InputError(f"unknown {what} {name!r}; did you mean {' or '.join(close)}?")
    if len(names) <= 12 or listing is None:
        return InputError(f"unknown {what} {name!r}; choose from {', '.join(names)}")
    return InputError(f"unknown {what} {name!r}", hint=f"{listing} shows all {len(names)}")


class InputChangedError(InputError):
    """A rerun whose inputs differ from what an existing run or output folder was made of.

    Resuming would mix results of two different inputs, so robustlab refuses and says
    which input changed.
    """


class CellSkipped(InputError):
    """One cell (a sample under one shift and level) cannot be made from this input: the
    mask is empty, the object covers the image, the donor pool has no other class, the
    cell's file is missing. Shifts and the runners raise it; the workers catch it and count
    the cell as skipped with this message as its reason. Any other exception in a worker is
    a bug and fails the run (what was stored stays stored, so the rerun resumes).

    Reaching the user outside a run (``corrupt(image, "ai_bg")`` on a maskless image), it
    is bad input: one line, exit 2.
    """

    @property
    def reason(self) -> str:
        return self.message


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


# OSError numbers that describe the machine, not robustlab or the request.
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def environment_problem(exc: OSError, doing: str, *, hint: str | None = None) -> Exception:
    """The user-facing error for an ``OSError`` the machine or the path caused, else ``exc``.

    A full disk, a read-only folder or a missing permission is an EnvironmentProblem; a
    path through a regular file (``--out notes.txt/run``) is an InputError. Any other
    ``OSError`` (a bad file descriptor, say) is returned unchanged, to surface as a bug.

    Args:
        exc: The error raised by the operating system.
        doing: What robustlab was doing, e.g. ``"cannot write manifest.json"``.
        hint: What to try; a default fits the cause when None.
    """
    code = getattr(exc, "errno", None)
    if code in (errno.ENOTDIR, errno.EISDIR):
        what = (
            "a part of the path is a file, not a folder" if code == errno.ENOTDIR else "is a folder"
        )
        return InputError(_say(exc, doing, what), hint=hint or "check the path you passed")
    cause = _ENVIRONMENT_ERRNOS.get(code) if isinstance(code, int) else None
    if cause is None:
        return exc
    if hint is None:
        hint = (
            "free disk space or write somewhere else"
            if code in (errno.ENOSPC, errno.EDQUOT)
            else "choose a folder you can write to"
        )
    return EnvironmentProblem(_say(exc, doing, cause), hint=hint)


def _say(exc: OSError, doing: str, what: str) -> str:
    """``doing: what (file)``, or ``file: what`` when there is no ``doing``."""
    name = str(exc.filename) if exc.filename else ""
    if not doing:
        return f"{name}: {what}" if name else what
    return f"{doing}: {what}" + (f" ({name})" if name and name not in doing else "")


@contextmanager
def environment_errors(doing: str, *, hint: str | None = None):
    """Turn an ``OSError`` the machine or the path caused inside the block into the
    user-facing error :func:`environment_problem` gives; other errors pass unchanged.

    Example::

        with environment_errors(f"cannot write {path}"):
            path.write_bytes(data)
    """
    try:
        yield
    except OSError as exc:
        problem = environment_problem(exc, doing, hint=hint)
        if problem is exc:
            raise
        raise problem from exc


__all__ = [
    "RobustlabError",
    "InputError",
    "InputChangedError",
    "CellSkipped",
    "MissingResourceError",
    "StoreError",
    "EnvironmentProblem",
    "environment_problem",
    "environment_errors",
]
