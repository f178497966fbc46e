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

from dataclasses import dataclass, field
from pathlib import Path

from robustlab.data.sources import Sample
from robustlab.paths import dirs_inside, file_inside

LABELS = "labels.txt"
CLEAN_DIR = "ori"
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".JPEG")


def labels_file(root: Path) -> Path | None:
    """``labels.txt`` of an archive at ``root`` (root first, then ``ori/``), or None."""
    for p in (root / LABELS, root / CLEAN_DIR / LABELS):
        if p.is_file():
            return p
    return None


def is_archive(root) -> bool:
    """True when ``root`` looks like the published ImageNet-E layout (``ori/`` + labels.txt)."""
    root = Path(root)
    return (root / CLEAN_DIR).is_dir() and labels_file(root) is not None


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

    Raises:
        ValueError: not an archive, no usable image, or two folders naming the same cell.
    """
    root = Path(root)
    lab = labels_file(root)
    if not (root / CLEAN_DIR).is_dir() or lab is None:
        raise ValueError(f"{root} is not an ImageNet-E archive (needs {CLEAN_DIR}/ and {LABELS})")
    ori = root / CLEAN_DIR
    # The link rule of robustlab.paths: only files whose real path stays in the archive.
    by_stem = {
        p.stem: p
        for p in ori.iterdir()
        if p.suffix in IMAGE_SUFFIXES and file_inside(root, f"{CLEAN_DIR}/{p.name}") is not None
    }
    samples, skipped, seen = [], [], set()
    for n, line in enumerate(lab.read_text().splitlines(), 1):
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
        if not p.is_file() or p.suffix not in IMAGE_SUFFIXES:
            skipped.append((f"{CLEAN_DIR}/{p.name}", "not an image of the archive"))
        elif p.stem not in listed:
            skipped.append((f"{CLEAN_DIR}/{p.name}", f"not listed in {lab.name}"))
    if not samples:
        raise ValueError(f"{root}: no image of {lab} was found in {CLEAN_DIR}/")
    folders: dict[tuple[str, str], str] = {}
    for d in dirs_inside(root):
        if d.name == CLEAN_DIR:
            continue
        cell = folder_cell(d.name)
        if cell in folders:
            raise ValueError(f"{root}: folders {folders[cell]} and {d.name} both map to {cell}")
        folders[cell] = d.name
    samples.sort(key=lambda s: s.id)
    return Archive(root, samples, list(folders), folders, skipped)


__all__ = [
    "LABELS",
    "CLEAN_DIR",
    "Archive",
    "is_archive",
    "read_archive",
    "folder_cell",
    "labels_file",
]
