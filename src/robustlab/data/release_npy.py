"""The CIFAR-10-C / CIFAR-100-C release layout: one ``.npy`` array per corruption.

As released (and as RobustBench's ``load_cifar10c`` reads it) the folder holds
``<corruption>.npy``, uint8 ``(5 * N, H, W, 3)`` (NHWC, RGB): the N test images at
severity 1, then all of them at severity 2, and so on; and ``labels.npy``, the N labels
repeated for each severity (``5 * N`` integers; a file of N is accepted too).
make_cifar_c.py writes exactly that (``np.save(... np.array(cifar_c).astype(np.uint8))``
with the labels appended per severity).

Reading never loads an array: headers are parsed for the checks, and images are read row
by row through a memory map (one corruption file is 150 MB at N = 10,000; 19 of them
would not fit a small machine). Writing goes through a memory-mapped temp file renamed
into place, so a killed run never leaves a short ``.npy`` that looks complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robustlab.errors import InputError
from robustlab.files.atomic import atomic_path

LABELS = "labels.npy"
SEVERITIES = (1, 2, 3, 4, 5)


@dataclass(frozen=True)
class NpyFile:
    """One corruption file as its header describes it: the five severities of one
    corruption, row blocks of one array; a file of five cells, not a cell (those are
    :class:`robustlab.cells.Cell`)."""

    name: str
    file: str
    rows: int
    image_shape: tuple[int, int, int]


@dataclass
class NpyRelease:
    """A release folder as read (headers only).

    Attributes:
        root: The folder.
        labels: The N labels (int64), severity 1's block of ``labels.npy``.
        files: Corruption name -> its checked file.
        skipped: (file name, reason) for every file that is not a usable part of the layout.
    """

    root: Path
    labels: np.ndarray
    files: dict[str, NpyFile]
    skipped: list[tuple[str, str]] = field(default_factory=list)

    @property
    def n(self) -> int:
        return int(len(self.labels))


def _corruptions() -> list[str]:
    from robustlab.shifts.registry import list_shifts

    return [s.name for tag in ("imagenet-c", "imagenet-c-extra") for s in list_shifts(tag=tag)]


def _regular(root: Path, name: str) -> Path | None:
    """``root/name`` when it is a regular file whose real path stays inside ``root``."""
    from robustlab.files.safety import file_inside

    return file_inside(root, name)


def is_release(root) -> bool:
    """True when ``root`` holds ``labels.npy`` and at least one ``<corruption>.npy``."""
    root = Path(root)
    if _regular(root, LABELS) is None:
        return False
    return any(_regular(root, f"{n}.npy") is not None for n in _corruptions())


def read_header(path: Path) -> tuple[tuple[int, ...], np.dtype, int]:
    """(shape, dtype, data offset) of a ``.npy`` file, from its header alone.

    Raises:
        ValueError: not a ``.npy`` file, a Fortran-ordered or object array, or a file
            shorter than its header says (a cut download).
    """
    fmt = np.lib.format
    with open(path, "rb") as fh:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
        else:
            raise ValueError(f"npy format version {version} is not supported")
        offset = fh.tell()
    if fortran or dtype.hasobject:
        raise ValueError("not a C-ordered array of numbers")
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = os.path.getsize(path)
    if size < need:
        raise ValueError(f"{size:,} bytes, its header promises {need:,} (cut short?)")
    return tuple(int(x) for x in shape), dtype, offset


def _labels(root: Path) -> np.ndarray:
    path = root / LABELS
    try:
        shape, dtype, _ = read_header(path)
        if len(shape) != 1 or dtype.kind not in "iu":
            raise ValueError(f"holds a {dtype} array of shape {shape}, not one integer per image")
        labels = np.load(path, allow_pickle=False).astype(np.int64)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path}: unreadable labels: {exc}",
            hint="labels.npy must be the release's integer array (5 x N labels)",
        ) from None
    if len(labels) % 5 == 0 and len(labels):
        n = len(labels) // 5
        blocks = labels.reshape(5, n)
        if (blocks == blocks[0]).all():
            return blocks[0].copy()
    return labels


def open_release(root) -> NpyRelease:
    """Check a release folder's headers: each ``<corruption>.npy`` must be uint8
    ``(5 * N, H, W, 3)`` with the N of ``labels.npy`` (N or 5 x N labels).

    A file that fails is a counted skip with its reason; other files are listed too.

    Raises:
        InputError: ``labels.npy`` is unreadable, or no corruption file is usable.
    """
    from robustlab.files.safety import walk_files

    root = Path(root)
    labels = _labels(root)
    n = len(labels)
    names = set(_corruptions())
    files: dict[str, NpyFile] = {}
    skipped: list[tuple[str, str]] = []
    listed, refused = walk_files(root)
    skipped.extend(refused)
    for path in listed:
        rel = path.as_posix()
        stem, suffix = os.path.splitext(rel)
        if rel == LABELS:
            continue
        if "/" in rel or suffix != ".npy" or stem not in names:
            skipped.append((rel, "not part of the CIFAR-10-C layout (<corruption>.npy)"))
            continue
        try:
            shape, dtype, _ = read_header(root / rel)
        except (OSError, ValueError) as exc:
            skipped.append((rel, f"unreadable .npy: {exc}"))
            continue
        if dtype != np.uint8 or len(shape) != 4 or shape[3] != 3:
            skipped.append((rel, f"holds {dtype} {shape}, not uint8 (5 x N, H, W, 3) images"))
        elif shape[0] != 5 * n:
            skipped.append((rel, f"holds {shape[0]:,} images; labels.npy says 5 x {n:,}"))
        else:
            files[stem] = NpyFile(stem, rel, shape[0], (shape[1], shape[2], shape[3]))
    if not files:
        raise InputError(
            f"{root}: no usable <corruption>.npy beside labels.npy",
            hint="; ".join(f"{f}: {w}" for f, w in skipped[:3]) or None,
        )
    order = [c for c in _corruptions() if c in files]
    return NpyRelease(root, labels, {c: files[c] for c in order}, sorted(skipped))


class RowReader:
    """Reads single images out of release files through memory maps, opened on first use
    (per process: the object is pickled to workers without any map)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._maps: dict[str, np.ndarray] = {}

    def __getstate__(self):
        return {"root": self.root, "_maps": {}}

    def image(self, file: str, row: int) -> np.ndarray:
        mm = self._maps.get(file)
        if mm is None:
            mm = np.load(self.root / file, mmap_mode="r", allow_pickle=False)
            self._maps[file] = mm
        return np.array(mm[row])


def write_release(
    root: Path,
    shifts: Sequence[str],
    n: int,
    image: Callable[[str, int, int], np.ndarray],
    labels: Sequence[int],
    shape: tuple[int, int, int],
) -> list[str]:
    """Write ``<shift>.npy`` (5 x ``n`` images in severity order) and ``labels.npy``.

    Args:
        image: ``image(shift, severity, k)`` -> the k-th image of that cell (uint8 ``shape``).
        labels: The ``n`` labels, written once per severity as the release does.

    Returns:
        The names of the files written.
    """
    return [*write_arrays(root, shifts, n, image, shape), write_labels(root, labels)]


def write_arrays(
    root: Path,
    shifts: Sequence[str],
    n: int,
    image: Callable[[str, int, int], np.ndarray],
    shape: tuple[int, int, int],
) -> list[str]:
    """Write ``<shift>.npy`` for each shift (see :func:`write_release`); returns their names."""
    written = []
    for shift in shifts:
        final = root / f"{shift}.npy"
        with atomic_path(final) as tmp:
            arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(5 * n, *shape))
            for s in SEVERITIES:
                for k in range(n):
                    arr[(s - 1) * n + k] = image(shift, s, k)
            arr.flush()
            del arr
        written.append(final.name)
    return written


def write_labels(root: Path, labels: Sequence[int]) -> str:
    """Write ``labels.npy``: the labels once per severity (uint8 when they fit, as released)."""
    lab = np.tile(np.asarray(labels, dtype=np.int64), 5)
    lab = lab.astype(np.uint8) if lab.size and 0 <= lab.min() and lab.max() < 256 else lab
    with atomic_path(root / LABELS) as tmp, open(tmp, "wb") as fh:
        np.save(fh, lab)
    return LABELS
