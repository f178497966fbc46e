"""robustlab.errors: the classes keep their standard-library bases and their hints, and
OSErrors the machine caused map to the user-facing classes."""

from __future__ import annotations

import errno
import pickle

import pytest

from robustlab.errors import (
    EnvironmentProblem,
    InputChangedError,
    InputError,
    MissingResourceError,
    StoreError,
    environment_errors,
    environment_problem,
)


@pytest.mark.parametrize(
    "cls,base,code",
    [
        (InputError, ValueError, 2),
        (InputChangedError, ValueError, 2),
        (MissingResourceError, FileNotFoundError, 2),
        (StoreError, Exception, 3),
        (EnvironmentProblem, OSError, 3),
    ],
)
def test_bases_codes_and_pickled_hints(cls, base, code):
    """Errors raised in worker processes come back pickled: class, message and hint intact."""
    err = cls("something is off", hint="try this")
    assert isinstance(err, base) and err.exit_code == code and str(err) == "something is off"
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls and back.message == "something is off" and back.hint == "try this"


@pytest.mark.parametrize(
    "code,cls,words",
    [
        (errno.ENOSPC, EnvironmentProblem, "no space left on device"),
        (errno.EROFS, EnvironmentProblem, "read-only file system"),
        (errno.EACCES, EnvironmentProblem, "permission denied"),
        (errno.ENOTDIR, InputError, "a part of the path is a file, not a folder"),
        (errno.EISDIR, InputError, "is a folder"),
    ],
)
def test_os_errors_the_user_can_fix(code, cls, words):
    err = environment_problem(
        OSError(code, "raw text", "/data/out.json"), "cannot write the manifest"
    )
    assert type(err) is cls and err.hint
    assert str(err) == f"cannot write the manifest: {words} (/data/out.json)"


def test_other_os_errors_stay_bugs():
    raw = OSError(errno.EBADF, "Bad file descriptor")
    assert environment_problem(raw, "cannot write") is raw
    with pytest.raises(OSError) as caught, environment_errors("cannot write"):
        raise raw
    assert caught.value is raw
    with (
        pytest.raises(EnvironmentProblem, match="cannot write x: no space left on device"),
        environment_errors("cannot write x"),
    ):
        raise OSError(errno.ENOSPC, "No space left on device", "x")
