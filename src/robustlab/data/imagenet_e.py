"""The published ImageNet-E archive layout, so people who downloaded it can evaluate on it.

The released dataset (REFERENCE.md section 4) is a folder per edit level, each holding
``<stem>.png`` files of the same images, the unedited images in ``ori/``, and
``labels.txt`` with one ``name<TAB>label`` line per image (label: an ImageNet-1k class
index, or a wnid). ``labels.txt`` may sit at the archive root or inside ``ori/``; a name
may carry its extension or not.

Each level folder becomes one evaluation cell; its name is split at the first underscore
into (shift, level) so the results table reads like the paper's (``size_0.05`` ->
``size`` / ``0.05``, ``bg_-20`` -> ``bg`` / ``-20``, ``rp`` -> ``rp`` / ``default``).
``ori/`` is the clean cell. A file missing from a level folder is a counted skip of that
cell, never a silent substitute.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from robustlab.data.sources import Sample
from robustlab.errors import InputError
from robustlab.files.safety import (
    OUTSIDE,
    dirs_inside,
    file_inside,
    link_target,
    real,
    why_not_inside,
)

LABELS = "labels.txt"
CLEAN_DIR = "ori"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".JPEG")
# Where labels.txt may sit, relative to the archive root, in the order they are tried.
LABEL_PLACES = (LABELS, f"{CLEAN_DIR}/{LABELS}")


def labels_file(root: Path) -> Path | None:
    """``labels.txt`` of an archive at ``root`` (root first, then ``ori/``), or None.

    The link rule of :mod:`robustlab.files.safety`: a ``labels.txt`` that is a link out of the
    archive is not its labels file (it would score the run with another file's lines)."""
    for rel in LABEL_PLACES:
        found = file_inside(root, rel)
        if found is not None:
            return found
    return None


def is_archive(root) -> bool:
    """True when ``root`` looks like the published ImageNet-E layout (``ori/`` + labels.txt).

    Judged by names, links included, so that an archive whose ``labels.txt`` or ``ori/``
    links out is refused by :func:`read_archive` with the reason, not read as another
    layout."""
    root = Path(root)
    return (root / CLEAN_DIR).is_dir() and any(os.path.lexists(root / rel) for rel in LABEL_PLACES)


def folder_cell(name: str) -> tuple[str, str]:
    """(shift, level) of a level folder: split at the first underscore, else ``default``."""
    shift, sep, level = name.partition("_")
    return (shift, level) if sep and shift and level else (name, "default")


@dataclass
class Archive:
    """A read archive.

    Attributes:
        root: The archive folder.
        samples: One per labelled image found in ``ori/`` (id = its file name).
        cells: (shift, level) per level folder, sorted by folder name.
        folders: (shift, level) -> folder name.
        skipped: (name, reason) for labels.txt lines that could not be used and for files
            in ``ori/`` that are not a listed image.
    """

    root: Path
    samples: list[Sample]
    cells: list[tuple[str, str]]
    folders: dict[tuple[str, str], str]
    skipped: list[tuple[str, str]] = field(default_factory=list)


def read_archive(root) -> Archive:
    """Read ``labels.txt`` and the folder list of an ImageNet-E archive.

    Every file is looked up under the link rule of :mod:`robustlab.files.safety`: ``labels.txt``,
    ``ori/`` and the images must lie inside the archive (links inside it are fine).

    Raises:
        InputError: not an archive, ``labels.txt`` or ``ori/`` reached through a link out
            of it, no usable image, or two folders naming the same cell.
    """
    root = Path(root)
    _check_archive(root)
    lab = labels_file(root)
    assert lab is not None  # _check_archive refused an archive without one
    ori = root / CLEAN_DIR
    by_stem = {
        p.stem: p
        for p in ori.iterdir()
        if p.suffix in IMAGE_SUFFIXES and file_inside(root, f"{CLEAN_DIR}/{p.name}") is not None
    }
    samples, skipped, seen = [], [], set()
    try:
        text = lab.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {lab}: {exc}", hint="it must be UTF-8 text") from None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 2 or not parts[0].strip() or not parts[1].strip():
            skipped.append((f"{lab.name}:{n}", "not a name<TAB>label line"))
            continue
        name, label = parts[0].strip(), parts[1].strip()
        path = by_stem.get(Path(name).stem)
        if path is None:
            skipped.append((name, f"not in {CLEAN_DIR}/"))
            continue
        if path.name in seen:
            skipped.append((name, "listed twice"))
            continue
        seen.add(path.name)
        if label.lstrip("-").isdigit():
            samples.append(Sample(path.name, path, None, label=int(label)))
        else:
            samples.append(Sample(path.name, path, label))
    listed = {Path(s.id).stem for s in samples}
    for p in sorted(ori.iterdir()):
        if p.name.startswith(".") or p == lab:
            continue
        rel = f"{CLEAN_DIR}/{p.name}"
        if p.suffix in IMAGE_SUFFIXES and file_inside(root, rel) is None and p.is_symlink():
            skipped.append((rel, why_not_inside(root, rel)))
        elif not p.is_file() or p.suffix not in IMAGE_SUFFIXES:
            skipped.append((rel, "not an image of the archive"))
        elif p.stem not in listed:
            skipped.append((rel, f"not listed in {lab.name}"))
    if not samples:
        raise InputError(
            f"{root}: no image of {lab} was found in {CLEAN_DIR}/",
            hint=f"{LABELS} lists name<TAB>label lines naming the files of {CLEAN_DIR}/",
        )
    folders: dict[tuple[str, str], str] = {}
    for d in dirs_inside(root):
        if d.name == CLEAN_DIR:
            continue
        cell = folder_cell(d.name)
        if cell in folders:
            raise InputError(
                f"{root}: folders {folders[cell]} and {d.name} both map to {cell}",
                hint="keep one folder per edit level",
            )
        folders[cell] = d.name
    samples.sort(key=lambda s: s.id)
    return Archive(root, samples, list(folders), folders, skipped)


def _check_archive(root: Path) -> None:
    """Refuse, in one line, a folder that is no archive or whose ``ori/`` or
    ``labels.txt`` is reached through a link out of it (never "missing": the file is
    there, the link is the problem)."""
    if not (root / CLEAN_DIR).is_dir() or not any(
        os.path.lexists(root / rel) for rel in LABEL_PLACES
    ):
        raise InputError(f"{root} is not an ImageNet-E archive (needs {CLEAN_DIR}/ and {LABELS})")
    hint = "copy the file or folder into the archive (links may point only inside it)"
    ori = root / CLEAN_DIR
    if ori.is_symlink() and not real(ori).is_relative_to(real(root)):
        raise InputError(f"{ori}: {OUTSIDE.format(target=link_target(str(ori)))}", hint=hint)
    if labels_file(root) is None:
        rel = next(r for r in LABEL_PLACES if os.path.lexists(root / r))
        raise InputError(f"{root / rel}: {why_not_inside(root, rel)}", hint=hint)


__all__ = [
    "LABELS",
    "CLEAN_DIR",
    "Archive",
    "is_archive",
    "read_archive",
    "folder_cell",
    "labels_file",
]
