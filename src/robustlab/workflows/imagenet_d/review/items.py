"""The set of images under review: files, labels, the label space, the surrogates' guesses.

Input is any labelled image folder robustlab reads (an ImageFolder tree ``<class>/<file>``,
the published ImageNet-D layout ``<subset>/<class>/<file>``, or a flat folder with a labels
CSV) plus, optionally, the CSV a mining step wrote: a ``file`` column and any other columns,
shown beside the image as the surrogates' guesses. The review app serves images only by
their position in this list, so the list is also the whitelist of what can ever be served.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from robustlab.errors import InputError

# Spaces tried, in order, when no --label-space is given: the first whose folder names are
# exactly the folders of the set wins (wnid trees are ImageNet-1k, `alarm_clock` trees are
# ImageNet-D). Otherwise the folder names themselves are the label space.
AUTO_SPACES = ("imagenet1k", "imagenet-d", "imagenet9", "demo")
# Columns of a predictions CSV that describe the image, not a surrogate's guess.
NOT_GUESSES = frozenset(
    {"file", "path", "id", "class", "label", "wnid", "index", "name", "class_name", "subset"}
)
_WNID = re.compile(r"^n\d{8}$")


@dataclass(frozen=True)
class ClassInfo:
    """One class the reviewer can see or choose.

    Attributes:
        key: Canonical key: the label space's folder name (a wnid for ImageNet-1k).
        name: Readable name.
        wnids: WordNet ids: the class's own, or those of the ImageNet classes it maps to.
    """

    key: str
    name: str
    wnids: tuple[str, ...] = ()

    def as_json(self) -> dict:
        return {"key": self.key, "name": self.name, "wnids": list(self.wnids)}


class Guess(NamedTuple):
    """One surrogate's guess for an image, as the reviewer sees it.

    Attributes:
        column: The model (for ``robustlab mine``'s ``hard.csv``) or the CSV column.
        value: The raw value (a class key, a wnid, or the model's class index).
        name: Readable class name, or None when none is known.
        correct: Whether the guess is right under the label space's rule, when the CSV
            says so (``hard.csv``'s ``<model>_correct``); None otherwise.
    """

    column: str
    value: str
    name: str | None
    correct: bool | None = None


@dataclass(frozen=True)
class ReviewItem:
    """One image under review.

    Attributes:
        index: Position in the set; the only handle the web app accepts for an image.
        id: Path relative to the data root (posix), the key decisions are stored under.
        path: The file.
        label: Class key of the image's label.
        guesses: The surrogates' guesses from the predictions CSV.
        details: ``(what, value)`` facts about the image from the CSV that are not
            guesses (``hard.csv``: the cell it came from, how many surrogates were wrong).
    """

    index: int
    id: str
    path: Path
    label: str
    guesses: tuple[Guess, ...] = ()
    details: tuple[tuple[str, str], ...] = ()


@dataclass
class ReviewSet:
    """Images under review and the label space they are labelled in.

    Attributes:
        name: Key of the set in the database (default: the data folder's absolute path).
        root: The data folder.
        items: The images, sorted by id.
        classes: Every class a relabel may choose, in label-space order.
        label_space: Name of the label space (``"folders"`` when taken from the folders).
        predictions: The predictions CSV, if any.
        notes: What was skipped or unmatched, for the user.
    """

    name: str
    root: Path
    items: list[ReviewItem]
    classes: list[ClassInfo]
    label_space: str
    predictions: Path | None = None
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._by_key = {c.key: c for c in self.classes}
        self._by_id = {item.id: item for item in self.items}

    def __len__(self) -> int:
        return len(self.items)

    def class_info(self, key: str) -> ClassInfo | None:
        return self._by_key.get(key)

    def item_by_id(self, image_id: str) -> ReviewItem | None:
        return self._by_id.get(image_id)


def load_review_set(data, *, predictions=None, label_space=None, name=None) -> ReviewSet:
    """Read the images to review.

    Args:
        data: Labelled image folder.
        predictions: Optional CSV with a ``file`` column (the image's path relative to
            ``data``, or any path ending in it, or a unique file name) and guess columns.
        label_space: Label space name or CSV (see :mod:`robustlab.data.labels`); None picks
            a built-in space whose folders match exactly, else the folder names.
        name: Key of the set in the database; default the absolute data folder.

    Raises:
        InputError: no labelled images, an unknown class, an unreadable predictions CSV.
    """
    from robustlab.data.sources import discover

    samples = discover(data)
    root = Path(data).expanduser().resolve()
    notes = []
    if samples.skipped:
        notes.append(
            f"{len(samples.skipped)} file(s) in {root} are not reviewable images "
            f"(first: {samples.skipped[0][0]}: {samples.skipped[0][1]})"
        )
    raw = []
    for s in samples:
        if samples.layout == "imagefolder":
            # The immediate folder is the class, also in ImageNet-D's <subset>/<class>/<file>.
            cls = PurePosixPath(s.id).parent.name
        else:
            cls = s.class_name
        if not cls:
            raise InputError(
                f"{s.id} in {root} has no label",
                hint="review needs class folders (<class>/<file>) or a labels.csv",
            )
        raw.append((s, cls))
    space_name, classes, key_of = _label_space({cls for _, cls in raw}, label_space)
    guesses = (
        _read_predictions(Path(predictions).expanduser(), [s.id for s, _ in raw], classes, notes)
        if predictions
        else {}
    )
    items = [
        ReviewItem(i, s.id, s.path, key_of[cls], *guesses.get(s.id, ((), ())))
        for i, (s, cls) in enumerate(raw)
    ]
    return ReviewSet(
        name=str(name) if name else str(root),
        root=root,
        items=items,
        classes=classes,
        label_space=space_name,
        predictions=Path(predictions).expanduser().resolve() if predictions else None,
        notes=notes,
    )


def _label_space(folders: set[str], requested):
    """(space name, classes, folder -> class key) for the set's class folders."""
    from robustlab.data.labels import get_label_space

    if requested is None:
        for cand in AUTO_SPACES:
            space = get_label_space(cand)
            if folders <= set(space.folders):
                requested = space
                break
        else:
            classes = [
                ClassInfo(f, f.replace("_", " "), (f,) if _WNID.match(f) else ())
                for f in sorted(folders)
            ]
            return "folders", classes, {f: f for f in folders}
    try:
        space = get_label_space(requested)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    classes = [
        ClassInfo(space.folders[i], space.classes[i], _wnids(space, i)) for i in range(len(space))
    ]
    key_of = {}
    for folder in sorted(folders):
        try:
            key_of[folder] = space.folders[space.index_of(folder)]
        except ValueError as exc:
            raise InputError(
                f"class folder {folder!r}: {exc}",
                hint="pick the label space the folders are named in (--label-space) or leave "
                "it out to use the folder names",
            ) from None
    return space.name, classes, key_of


def _wnids(space, i: int) -> tuple[str, ...]:
    """The class's own wnid, or the wnids of the ImageNet-1k classes it maps to."""
    if space.wnids[i]:
        return (space.wnids[i],)
    from robustlab.data.labels import get_label_space

    imagenet = get_label_space("imagenet1k")
    return tuple(imagenet.wnids[j] for j in space.imagenet_ids[i])


def _read_predictions(path: Path, ids: list[str], classes: list[ClassInfo], notes: list[str]):
    """``image id -> (guesses, details)`` from a predictions CSV (see :func:`load_review_set`).

    ``robustlab mine``'s ``hard.csv`` has three columns per surrogate (``<model>_top1``, the
    class index; ``<model>_top1_name``; ``<model>_correct``) and the cell an image came
    from: those become one readable guess per model (its predicted class name, right or
    wrong) and a few facts, instead of thirteen raw columns. Any other column is a guess
    as it stands (a class key or wnid, named when it is one).
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            fields = [(f or "").strip() for f in (reader.fieldnames or [])]
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read predictions CSV {path}: {exc}") from None
    lower = {f.lower(): f for f in fields}
    if "file" not in lower:
        raise InputError(f"predictions CSV {path} needs a 'file' column; it has {fields}")
    models = [
        f.removesuffix("_top1")
        for f in fields
        if f.endswith("_top1") and f"{f.removesuffix('_top1')}_correct" in fields
    ]
    model_cols = {f"{m}{end}" for m in models for end in MODEL_COLUMNS}
    facts = [c for c in MINING_FACTS if models and c in fields]
    guess_cols = [
        f
        for f in fields
        if f and f.lower() not in NOT_GUESSES and f not in model_cols and f not in facts
    ]
    names = _guess_names(classes)
    id_set = set(ids)
    by_name: dict[str, list[str]] = {}
    for i in ids:
        by_name.setdefault(PurePosixPath(i).name, []).append(i)
    out, unmatched = {}, 0
    for raw in rows:
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        image_id = _match(row.get(lower["file"], ""), id_set, by_name)
        if image_id is None:
            unmatched += 1
            continue
        guesses = [
            Guess(
                m,
                row[f"{m}_top1"],
                row.get(f"{m}_top1_name") or None,
                row[f"{m}_correct"].lower() in ("true", "1", "yes"),
            )
            for m in models
            if row.get(f"{m}_top1")
        ]
        guesses += [Guess(col, row[col], names.get(row[col])) for col in guess_cols if row.get(col)]
        out[image_id] = (tuple(guesses), _mining_details(row, image_id, len(models)))
    if unmatched:
        notes.append(f"{unmatched} row(s) of {path.name} match no image of the set")
    return out


# hard.csv's columns per surrogate, after the model's name, and its facts about an image.
MODEL_COLUMNS = ("_top1", "_top1_name", "_correct")
MINING_FACTS = ("sample_id", "shift", "level", "n_wrong")


def _mining_details(row: dict[str, str], image_id: str, n_models: int) -> tuple:
    """A hard.csv row's facts in words: the source photo, the cell, how many were wrong."""
    out = []
    if row.get("sample_id") and row["sample_id"] != image_id:
        out.append(("Source image", row["sample_id"]))
    if row.get("shift"):
        clean = row["shift"] == "clean"
        out.append(("Cell", "clean" if clean else f"{row['shift']}, level {row.get('level')}"))
    if row.get("n_wrong") and n_models:
        out.append(("Surrogates wrong", f"{row['n_wrong']} of {n_models}"))
    return tuple(out)


def _guess_names(classes: list[ClassInfo]) -> dict[str, str]:
    """Readable names for guess values: the set's class keys and wnids, then any ImageNet-1k
    wnid (surrogates predict ImageNet classes whatever space the set is labelled in)."""
    from robustlab.data.labels import get_label_space

    names = {}
    for c in classes:
        names[c.key] = c.name
        for w in c.wnids:
            names.setdefault(w, c.name)
    imagenet = get_label_space("imagenet1k")
    for w, name in zip(imagenet.wnids, imagenet.classes):
        names.setdefault(w, name)
    return names


def _match(file: str, ids: set[str], by_name: dict[str, list[str]]) -> str | None:
    """The image id a CSV ``file`` value names: exact, a path ending in it, or a unique name."""
    parts = PurePosixPath(file.replace("\\", "/")).parts
    for start in range(len(parts)):
        cand = "/".join(parts[start:])
        if cand in ids:
            return cand
    same = by_name.get(parts[-1]) if parts else None
    return same[0] if same and len(same) == 1 else None


__all__ = ["ClassInfo", "Guess", "ReviewItem", "ReviewSet", "load_review_set", "AUTO_SPACES"]
