"""Compile the corruptions' numba kernels once per installation, and say so while it happens.

The ImageNet-C corruptions run on numba kernels compiled with ``cache=True``: the machine
code lands in numba's on-disk cache (``__pycache__`` next to the sources, or numba's user
cache directory when that is read-only) and later processes load it in milliseconds. The
first compile on a new installation takes about a minute on two cores, which used to look
like a hang inside the first ``generate`` or ``evaluate``. :func:`ensure_compiled` is called
by those commands in the main process before any worker starts: when the kernels of this
exact installation were not compiled yet it says "compiling ... (first run only)", compiles
every kernel with a progress line, and leaves a marker file in robustlab's cache directory,
so workers (and every later run) only load.

The marker is keyed by the robustlab, numba and Python versions and by the size and mtime of
every kernel source file, the same things numba's own cache is invalidated by.
"""

from __future__ import annotations

import hashlib
import logging
import platform
import sys
import time
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

KERNEL_TAGS = ("imagenet-c", "imagenet-c-extra")


def _kernel_sources() -> list[Path]:
    folder = Path(__file__).parent / "corruptions"
    return sorted(p for p in folder.glob("*.py") if "njit" in p.read_text(encoding="utf-8"))


def marker_path() -> Path:
    """The marker for this installation's kernels (see the module docstring)."""
    import numba

    from robustlab.version import __version__
    from robustlab.records.content_hash import cache_dir

    h = hashlib.blake2b(digest_size=8)
    h.update(f"{__version__}|{numba.__version__}|{platform.python_version()}".encode())
    for p in _kernel_sources():
        st = p.stat()
        h.update(f"|{p.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return cache_dir() / f"numba-kernels-{h.hexdigest()}.ready"


def kernel_shifts():
    """The registered shifts whose implementation runs numba kernels."""
    from robustlab.shifts.registry import list_shifts

    seen = {}
    for tag in KERNEL_TAGS:
        for shift in list_shifts(tag=tag):
            seen.setdefault(shift.name, shift)
    return list(seen.values())


def warm(shifts=None) -> dict[str, str]:
    """Run each kernel shift once on a tiny image, which compiles or loads its kernels.

    Returns:
        ``{shift: error}`` for those that failed (a warm-up only: the run that uses a
        failing shift reports it properly).
    """
    from robustlab.pipeline import apply_shift

    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    failed = {}
    for shift in kernel_shifts() if shifts is None else shifts:
        try:
            apply_shift(image, "warm-up", shift, next(iter(shift.params)), 0)
        except Exception as exc:  # noqa: BLE001 - see Returns
            failed[shift.name] = str(exc)
    return failed


def ensure_compiled_for(shift_names, *, progress: bool = True) -> bool:
    """:func:`ensure_compiled` when any of ``shift_names`` runs numba kernels."""
    names = set(shift_names)
    if not names & {s.name for s in kernel_shifts()}:
        return False
    return ensure_compiled(progress=progress)


def ensure_compiled(*, progress: bool = True) -> bool:
    """Compile the kernels if this installation has not yet; True when it compiled now.

    Never fails a run: a kernel that cannot be compiled here is reported by the run that
    uses it, and an unwritable cache directory only means the message comes back next time.
    """
    try:
        marker = marker_path()
        if marker.exists():
            return False
    except OSError:
        return False
    shifts = kernel_shifts()

    def say(text: str) -> None:  # even with --no-progress: it explains a minute of silence
        print(text, file=sys.stderr, flush=True)

    say(
        f"robustlab: compiling {len(shifts)} corruption kernels (first run only, "
        "about a minute) ..."
    )
    t0 = time.monotonic()
    for i, shift in enumerate(shifts, 1):
        for name, error in warm([shift]).items():
            log.warning("could not precompile %s: %s", name, error)
        if progress and sys.stderr.isatty():
            print(f"\r  {i}/{len(shifts)} {shift.name:<20}", end="", file=sys.stderr, flush=True)
    if progress and sys.stderr.isatty():
        print(file=sys.stderr)
    say(f"robustlab: kernels compiled in {time.monotonic() - t0:.0f} s; later runs load them")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"compiled {time.strftime('%Y-%m-%dT%H:%M:%S')}\n", encoding="utf-8")
    except OSError as exc:
        log.warning("could not record the compiled kernels in %s: %s", marker, exc)
    return True
