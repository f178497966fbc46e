"""Where images come from: ImageFolder trees and flat folders with a labels CSV.

:func:`discover` turns a data folder into a sorted list of :class:`Sample` records. It
only looks at names (no image is opened), so listing ImageNet's 50,000 validation files
takes a moment, and a broken file is found later by the decoder, where it is counted and
skipped with its reason. Files that are plainly not images (by extension) are skipped here
and reported in ``SampleList.skipped``.

Two layouts are understood:

- **ImageFolder**: ``<root>/<class>/<file>`` (deeper folders are kept in the id; the class
  is the first folder). Files lying directly in ``root`` are skipped with a reason.
- **Flat folder plus labels CSV**: ``<root>/<file>`` and a CSV with a ``file`` column and
  one of ``wnid``, ``class``, ``label``, ``index``. A ``labels.csv`` inside ``root`` is used
  automatically. Without any CSV, a flat folder gives samples whose class is unknown.

Links follow the one rule of :mod:`robustlab.files.safety`: a symbolic link (to a file or a
folder) is followed only when its target lies inside the data folder, and each real folder
is entered once; a link out of the folder (to ``..``, ``/``, ``/proc/self``), a loop or a
second path to a listed folder is reported in ``skipped`` instead of pulling unrelated
files into a class. A labels CSV row naming a path outside the folder is skipped the same
way. A name that is not valid UTF-8 cannot be stored or hashed, so it is skipped too (shown
with its bytes escaped).

Masks: see :mod:`robustlab.masks.io` for which mask file belongs to which image.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from robustlab.errors import InputError, MissingResourceError
from robustlab.masks.io import find_mask, shared_stems
from robustlab.data.labels_csv import read_label_rows
from robustlab.files.safety import named_file, printable_name, walk_files

log = logging.getLogger(__name__)

# Extensions Pillow decodes that photo datasets use; anything else is not an image input.
IMAGE_EXTENSIONS = frozenset(
    {
        ".jpg",
        ".jpeg",
        ".jpe",
        ".png",
        ".bmp",
        ".gif",
        ".tif",
        ".tiff",
        ".webp",
        ".ppm",
        ".pgm",
        ".pbm",
        ".pnm",
    }
)
# Files robustlab itself writes at the top of a folder that is then an input again (``mine``
# writes the hard subset with its labels, each surrogate's guesses and the mining record):
# part of the folder, not bad images, so never reported as skipped.
OWN_FILES = frozenset({"labels.csv", "hard.csv", "mining.json"})


@dataclass(frozen=True)
class Sample:
    """One source image.

    Attributes:
        id: Posix path relative to the data root, e.g. ``"n01440764/x.JPEG"``; unique, and
            the key of the seed rule, so it must not depend on where the folder lives.
        path: Absolute path of the file.
        class_name: Folder name or CSV label (a wnid for ImageNet trees); None if unknown.
        label: Class index, filled from an ``index`` CSV column or later by a label space.
        mask_path: Parallel foreground mask, when a masks folder holds one.
        bbox: ``(x0, y0, x1, y1)`` object box in source pixels, when a box CSV gives one.
        mask_note: Why the masks folder gave no mask although it holds a file of this
            image's name (a link out of the masks folder, say); None otherwise
            (:func:`no_mask_reason` says it).
    """

    id: str
    path: Path
    class_name: str | None
    label: int | None = None
    mask_path: Path | None = None
    bbox: tuple[int, int, int, int] | None = None
    mask_note: str | None = None


def no_mask_reason(sample: Sample) -> str:
    """The skip reason of a sample without a mask: the masks folder's own reason for the
    file it holds under the image's name (a link leaving it is no mask, and is named as a
    link, never as a missing file), else that the folder has none."""
    if sample.mask_note:
        return f"no usable mask in the masks folder ({sample.mask_note})"
    return "no mask in the masks folder"


class SampleList(list):
    """A ``list[Sample]`` that also carries what was left out and why.

    Attributes:
        skipped: ``(relative path, reason)`` for every file that is not a usable input.
        layout: ``"imagefolder"`` or ``"flat"``.
        labels_csv: The CSV the labels came from, if any.
    """

    def __init__(
        self,
        items: Iterable[Sample] = (),
        *,
        skipped=(),
        layout: str = "",
        labels_csv: Path | None = None,
    ):
        super().__init__(items)
        self.skipped: list[tuple[str, str]] = list(skipped)
        self.layout = layout
        self.labels_csv = labels_csv


def is_image_name(name: str) -> bool:
    """True when ``name`` has an image extension (case-insensitive)."""
    return PurePosixPath(name).suffix.lower() in IMAGE_EXTENSIONS


def _read_bboxes(csv_path: Path) -> dict[str, tuple[int, int, int, int]]:
    """``file -> (x0, y0, x1, y1)`` from a CSV with columns file (or id), x0, y0, x1, y1."""
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read boxes CSV {csv_path}: {exc}") from None
    out = {}
    for n, raw in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in raw.items()}
        key = row.get("file") or row.get("id")
        try:
            box = tuple(int(round(float(row[k]))) for k in ("x0", "y0", "x1", "y1"))
        except (KeyError, ValueError):
            raise InputError(
                f"boxes CSV {csv_path} line {n}: needs file (or id), x0, y0, x1, y1 numbers"
            ) from None
        if not key:
            raise InputError(f"boxes CSV {csv_path} line {n}: empty file name")
        out[PurePosixPath(key).as_posix()] = box
    return out


def discover(root, *, labels_csv=None, masks=None, bboxes=None) -> SampleList:
    """List the images under ``root`` as samples sorted by id.

    Args:
        root: Data folder: an ImageFolder tree, or a flat folder of images.
        labels_csv: CSV giving each flat file's class (default: ``root/labels.csv`` when
            present). Columns: ``file`` plus one of ``wnid``, ``class``, ``label``,
            ``index``; an ``index`` column also fills :attr:`Sample.label`.
        masks: Folder of foreground masks parallel to ``root``: ``<id>.png``
            (``cat/a.jpg.png``), or ``<id stem>.png`` when no other image in the folder
            shares the stem (see :func:`robustlab.masks.io.find_mask`).
        bboxes: CSV of object boxes in source pixels (``file``, ``x0``, ``y0``, ``x1``,
            ``y1``).

    Returns:
        A :class:`SampleList`; ``.skipped`` lists non-image files, symlink loops, names
        that are not UTF-8 and, for a CSV, images it does not label and rows whose file is
        missing.

    Raises:
        InputError: ``root`` is missing, not a folder, or holds no image; a CSV is bad; a
            stem-named mask could belong to two images.
    """
    root, csv_path, masks_dir = _resolve_inputs(root, labels_csv, masks)
    boxes = _read_bboxes(Path(bboxes).expanduser()) if bboxes else {}
    images, others, skipped = _image_files(root, csv_path, masks_dir)
    if csv_path is not None:
        layout = "flat"
        entries = _listed_entries(csv_path, images, others, skipped)
    else:
        layout, entries = _tree_entries(images, skipped)
    if not entries:
        what = f"{len(skipped)} other files" if skipped else "nothing"
        raise InputError(f"no images found in {root} (found {what})")
    samples = _make_samples(root, entries, images, masks_dir, boxes)
    skipped.sort()
    for rel, reason in skipped:
        log.debug("skipping %s: %s", rel, reason)
    return SampleList(samples, skipped=skipped, layout=layout, labels_csv=csv_path)


def _resolve_inputs(root, labels_csv, masks) -> tuple[Path, Path | None, Path | None]:
    """Resolve and check :func:`discover`'s folder, labels CSV (``root/labels.csv`` by
    default) and masks folder, so that a wrong path fails before any file is listed."""
    root = Path(root).expanduser()
    if not root.exists():
        raise MissingResourceError(f"data folder {root} does not exist")
    if not root.is_dir():
        raise InputError(f"data folder {root} is not a folder")
    root = root.resolve()
    csv_path = Path(labels_csv).expanduser().resolve() if labels_csv else None
    if csv_path is None:  # the folder's own labels.csv, under the link rule
        csv_path = named_file(root, "labels.csv", what="the data folder's labels CSV")
    if csv_path is not None and not csv_path.is_file():
        raise _not_there("labels CSV", csv_path, "a file")
    masks_dir = Path(masks).expanduser().resolve() if masks else None
    if masks_dir is not None and not masks_dir.is_dir():
        raise _not_there("masks folder", masks_dir, "a folder")
    return root, csv_path, masks_dir


def _not_there(what: str, path: Path, kind: str) -> Exception:
    """The error for an input path that is missing, or is there but of the wrong kind (a
    file given as the masks folder was reported as missing)."""
    if path.exists():
        return InputError(f"{what} {path} is not {kind}", hint=f"pass {kind} as the {what}")
    return MissingResourceError(f"{what} {path} does not exist")


def _image_files(
    root: Path, csv_path: Path | None, masks_dir: Path | None
) -> tuple[list[PurePosixPath], set[str], list[tuple[str, str]]]:
    """The image files under ``root`` (relative, in walk order), its other files and the
    skipped files with their reasons. The labels CSV, robustlab's own files and a masks
    folder inside ``root`` are inputs of another kind, so they are left out silently, not
    reported as skipped."""
    files, skipped = walk_files(root)
    images: list[PurePosixPath] = []
    others: set[str] = set()
    for rel in files:
        if (
            (csv_path is not None and root / rel == csv_path)
            or (len(rel.parts) == 1 and rel.name in OWN_FILES)
            or (masks_dir is not None and (root / rel).is_relative_to(masks_dir))
        ):
            others.add(rel.as_posix())
        elif is_image_name(rel.name):
            images.append(rel)
        else:
            others.add(rel.as_posix())
            skipped.append(
                (rel.as_posix(), f"not an image file (extension {rel.suffix or 'none'!r})")
            )
    return images, others, skipped


def _listed_entries(
    csv_path: Path,
    images: list[PurePosixPath],
    others: set[str],
    skipped: list[tuple[str, str]],
) -> list[tuple[PurePosixPath, str | None, int | None]]:
    """The samples a labels CSV names, in its row order, as ``(path, class, label)``;
    appends to ``skipped`` every image the CSV does not list and the rows whose file is
    missing or outside the data folder (never read, never silent; past the first few per
    reason, counted in one entry: :mod:`robustlab.data.labels_csv`)."""
    present = {rel.as_posix(): rel for rel in images}
    rows = read_label_rows(csv_path, present.keys(), others)
    for key in present:
        if key not in rows.labels:
            skipped.append((key, f"not listed in {csv_path.name}"))
    skipped.extend(rows.skipped(csv_path.name))
    return [(present[key], cls, label) for key, (cls, label) in rows.labels.items()]


def _tree_entries(
    images: list[PurePosixPath], skipped: list[tuple[str, str]]
) -> tuple[str, list[tuple[PurePosixPath, str | None, int | None]]]:
    """Layout and samples of a folder without a labels CSV: an ImageFolder tree (class =
    first folder; top-level images are skipped) when any image is in a subfolder, else a
    flat folder of unlabelled images."""
    if any(len(rel.parts) > 1 for rel in images):
        entries: list[tuple[PurePosixPath, str | None, int | None]] = []
        for rel in images:
            if len(rel.parts) == 1:
                skipped.append((rel.as_posix(), "not inside a class folder"))
            else:
                entries.append((rel, rel.parts[0], None))
        return "imagefolder", entries
    return "flat", [(rel, None, None) for rel in images]


def _make_samples(
    root: Path,
    entries: list[tuple[PurePosixPath, str | None, int | None]],
    images: list[PurePosixPath],
    masks_dir: Path | None,
    boxes: dict[str, tuple[int, int, int, int]],
) -> list[Sample]:
    """The :class:`Sample` of every entry, sorted by id, with its mask (matched among the
    masks folder's files, stems shared by several images disambiguated over ``images``)
    and its box (by relative path, else by file name)."""
    mask_files: set[PurePosixPath] = set()
    mask_skips: dict[PurePosixPath, str] = {}
    siblings: dict[str, list[str]] = {}
    if masks_dir is not None:
        found_masks, left_out = walk_files(masks_dir)
        mask_files = set(found_masks)
        mask_skips = {PurePosixPath(rel): why for rel, why in left_out}
        siblings = shared_stems(rel.as_posix() for rel in images)

    def mask_for(key: str) -> tuple[Path | None, str | None]:
        found = find_mask(mask_files.__contains__, key, siblings.get(key, ()))
        if found is not None and masks_dir is not None:
            return masks_dir / found, None
        # A file of the mask's name that the masks folder's walk left out, with its reason.
        unusable = find_mask(mask_skips.__contains__, key, siblings.get(key, ()))
        return None, None if unusable is None else f"{unusable}: {mask_skips[unusable]}"

    samples = []
    for rel, cls, label in entries:
        key = rel.as_posix()
        mask, note = mask_for(key) if masks_dir is not None else (None, None)
        samples.append(
            Sample(
                id=key,
                path=root / rel,
                class_name=cls,
                label=label,
                mask_path=mask,
                bbox=boxes.get(key) or boxes.get(rel.name),
                mask_note=note,
            )
        )
    samples.sort(key=lambda s: s.id)
    return samples


__all__ = [
    "Sample",
    "SampleList",
    "discover",
    "no_mask_reason",
    "is_image_name",
    "printable_name",
    "IMAGE_EXTENSIONS",
]
