"""torch and torchvision that do not fit together: one line naming both and the fix.

torchvision's operators (``nms``, ``roi_align``...) live in a compiled extension built
against one torch release and one build (CPU or a CUDA version). When pip pairs a torch
with a torchvision of another release or build (seen: ``torch 2.13.0+cpu`` from the CPU
index with a CUDA-built ``torchvision 0.28.0`` from PyPI because the CPU index could not be
reached) the extension does not load, and ``import torchvision`` (which timm imports, so
every bundled model) fails deep inside torch with ``RuntimeError: operator torchvision::nms
does not exist``: a bug-looking traceback for what is an installation problem.
:func:`check_torchvision` imports torchvision once and turns such a failure into an
:class:`~robustlab.errors.EnvironmentProblem` whose one line names both installed versions
and the pip command that installs a matching pair. The usual cause is an unreachable
PyTorch index, so for a build from that index the line also names the pair the default
index (PyPI) installs, and what each costs: on Linux PyPI's torch is the CUDA build, seven
times the CPU build on disk (sizes below: torch 2.13.0+cpu and PyPI's 2.14.1 with its
CUDA libraries on x86-64 Linux, Python 3.11).
"""

from __future__ import annotations

import re
from importlib import metadata

from robustlab.errors import EnvironmentProblem

PYTORCH_INDEX = "https://download.pytorch.org/whl"
# torch 2.x ships with torchvision 0.(x + 15): 2.0 / 0.15 ... 2.5 / 0.20 ... 2.13 / 0.28.
_TORCHVISION_MINOR_OFFSET = 15


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def matching_torchvision(torch_version: str) -> str | None:
    """The torchvision release made for ``torch_version`` (local tag dropped), if known."""
    m = re.match(r"2\.(\d+)\.(\d+)", torch_version)
    if not m:
        return None
    return f"0.{int(m.group(1)) + _TORCHVISION_MINOR_OFFSET}.{m.group(2)}"


def fix_command(torch_version: str | None) -> str:
    """The pip command that reinstalls torch with its own torchvision, from the index of
    torch's build (``+cpu``, ``+cu126``...; PyPI's default build when it has no tag)."""
    if not torch_version:
        return "pip install --force-reinstall torch torchvision"
    base, _, tag = torch_version.partition("+")
    tv = matching_torchvision(base)
    pins = f"torch=={base} " + (f"torchvision=={tv}" if tv else "torchvision")
    index = f" --index-url {PYTORCH_INDEX}/{tag}" if tag else ""
    return f"pip install --force-reinstall {pins}{index}"


# What a matching pair costs: the CPU build from the PyTorch index, and PyPI's build, which
# on Linux x86-64 is the CUDA one with its GPU libraries (nvidia-*, triton).
CPU_BUILD_COST = "the CPU build: about 190 MB to download, 0.7 GB installed"
PYPI_BUILD_COST = (
    "on Linux that is the CUDA build: about 3 GB to download, 5.3 GB installed, "
    "also where no GPU will use it"
)


def install_advice(torch_version: str | None) -> str:
    """How to get a matching pair: :func:`fix_command` with its cost and, when that command
    needs the PyTorch index, PyPI's command for the same release and its cost."""
    fix = fix_command(torch_version)
    base, _, tag = (torch_version or "").partition("+")
    if not tag:
        return f"{fix} (from PyPI; {PYPI_BUILD_COST})"
    pypi = fix_command(base)
    cost = f" ({CPU_BUILD_COST})" if tag == "cpu" else ""
    return (
        f"{fix}{cost}; where that index cannot be reached, the default index has the same "
        f"release: {pypi} ({PYPI_BUILD_COST})"
    )


def torchvision_problem(exc: BaseException) -> EnvironmentProblem:
    """The one-line error for a torchvision that failed to import (``exc``)."""
    torch_v, tv_v = _version("torch"), _version("torchvision")
    why = " ".join(str(exc).split())[:160] or type(exc).__name__
    return EnvironmentProblem(
        f"torch {torch_v or '(not installed)'} and torchvision {tv_v or '(not installed)'} "
        f"do not work together ({why}); install a matching pair: {install_advice(torch_v)}"
    )


def is_torchvision_op_error(exc: BaseException) -> bool:
    """True for the errors a torchvision without its compiled operators raises."""
    text = str(exc)
    return "torchvision::" in text or "Couldn't load custom C++ ops" in text


def check_torchvision() -> None:
    """Import torchvision; an installed one that cannot load raises EnvironmentProblem.

    A missing torchvision is left to the code that needs it (its own message names the
    package). Cheap after the first call (the import is cached by Python).

    Raises:
        EnvironmentProblem: torch and torchvision do not fit together.
    """
    if _version("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except (RuntimeError, ImportError, OSError, AttributeError) as exc:
        raise torchvision_problem(exc) from None


__all__ = [
    "check_torchvision",
    "fix_command",
    "install_advice",
    "is_torchvision_op_error",
    "matching_torchvision",
    "torchvision_problem",
]
