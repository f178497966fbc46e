"""Readers of labelled image sets for the surface-variation protocols: a folder with a
metadata CSV, ICONS-50 (its ``Icons-50.npy`` or its folder layout) and CIFAR-100's python
pickles, each as a :class:`LabelledSet` (one metadata row per image, images read by id)."""

from __future__ import annotations

import logging
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from robustlab.errors import InputError, MissingResourceError
from robustlab.files.safety import named_file

log = logging.getLogger(__name__)

# ICONS-50's 13 vendors, as its training code names them; in the folder layout the style of
# an icon is the vendor named in its path.
ICONS50_STYLES = (
    "apple",
    "google",
    "facebook",
    "emoji-one",
    "samsung",
    "microsoft",
    "lg",
    "htc",
    "whatsapp",
    "messenger",
    "twitter",
    "emojidex",
    "mozilla",
)
META_COLUMNS = ("class", "subtype", "style", "version", "split")
# The hint of a refused pickle (robustlab.data.pickles).
_TRUSTED = (
    "the released file holds only arrays, lists and strings; download it again from its source"
)


@dataclass
class LabelledSet:
    """Images with a class and optional subtype / style / version / split per row.

    Attributes:
        name: What it is (``folder``, ``icons50``, ``cifar100``).
        root: Where it was read from.
        meta: One row per image: ``id`` (unique) and :data:`META_COLUMNS` present.
        read: ``read(ids, size)`` -> N x size x size x 3 uint8 for these ``id`` values (by id,
            not position, so ``meta`` may be filtered or reordered).
        blobs: The files that hold every image (``Icons-50.npy``, CIFAR's pickles); empty
            when each ``id`` is an image file under ``root``.
    """

    name: str
    root: Path
    meta: pd.DataFrame
    read: Callable[[Sequence[str], int], np.ndarray]
    blobs: tuple[Path, ...] = ()

    def load(self, rows: Sequence[int], size: int) -> np.ndarray:
        """Images of the rows at these positions of ``meta``."""
        ids = self.meta["id"].to_numpy()
        return self.read([ids[i] for i in rows], size)

    @property
    def classes(self) -> list[str]:
        return sorted(self.meta["class"].unique())

    @property
    def fingerprint(self) -> str:
        """Hash of the rows' metadata and of the pixels' bytes: each image file's content
        hash (folder layouts), or the content hashes of the files holding every image, so
        that a changed image is a new run, never a reused or resumed one."""
        from robustlab.records.content_hash import hash_files
        from robustlab.records.identity import data_fingerprint

        cols = [c for c in ("id", *META_COLUMNS) if c in self.meta.columns]
        rows = list(self.meta[cols].astype(str).itertuples(index=False, name=None))
        if self.blobs:
            return data_fingerprint([*rows, ("files", *hash_files(list(self.blobs)))])
        digests = hash_files([self.root / i for i in self.meta["id"]])
        return data_fingerprint(row + (d,) for row, d in zip(rows, digests, strict=True))


def _resize(rgb: np.ndarray, size: int) -> np.ndarray:
    if rgb.shape[0] == size and rgb.shape[1] == size:
        return rgb
    from PIL import Image

    return np.asarray(Image.fromarray(rgb).resize((size, size), Image.Resampling.BICUBIC))


def read_folder(root: str | Path, metadata: str | Path | None = None) -> LabelledSet:
    """A folder of images with a metadata CSV (default ``root/metadata.csv``).

    The CSV needs ``file`` (path relative to ``root``) and ``class``; ``subtype``, ``style``,
    ``version`` and ``split`` (train/test) are used by the protocols that need them.

    Raises:
        MissingResourceError: no folder, no CSV.
        InputError: missing columns, empty classes, files listed but absent.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise MissingResourceError(f"data folder {root} does not exist")
    # A CSV the user named is read where it is; the folder's own follows the link rule.
    path = Path(metadata).expanduser() if metadata else root / "metadata.csv"
    if not metadata:
        path = named_file(root, "metadata.csv", what="the metadata CSV") or path
    if not path.is_file():
        raise MissingResourceError(
            f"no metadata CSV at {path}",
            hint="give --metadata CSV with file and class columns "
            "(robustlab data icons writes one)",
        )
    try:
        meta = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"cannot read {path}: {str(exc).splitlines()[0]}") from None
    missing = [c for c in ("file", "class") if c not in meta.columns]
    if missing:
        raise InputError(
            f"{path} has no {' or '.join(missing)} column (columns: {', '.join(meta.columns)})"
        )
    if (meta["class"].str.strip() == "").any():
        n = int((meta["class"].str.strip() == "").sum())
        raise InputError(f"{path}: {n} row(s) have an empty class")
    if meta["file"].duplicated().any():
        raise InputError(
            f"{path}: file {meta['file'][meta['file'].duplicated()].iloc[0]!r} is listed twice"
        )
    _check_files(root, path, meta["file"])
    meta = meta.rename(columns={"file": "id"})
    keep = ["id", *[c for c in META_COLUMNS if c in meta.columns]]
    meta = meta[keep].sort_values("id", kind="stable").reset_index(drop=True)

    return LabelledSet("folder", root, meta, lambda ids, size: _read_files(root, ids, size))


def _check_files(root: Path, csv: Path, files: Sequence[str]) -> None:
    """Every row's file exists and is a regular file inside ``root`` (robustlab.files.safety' link
    rule: no absolute path, no ``..``, no link out of the folder), else one line naming
    how many rows fail and one of them. Refused rather than skipped: a training set that
    silently lost rows would be another protocol."""
    import os

    from robustlab.files.safety import file_inside

    absent, elsewhere = [], []
    for f in files:
        if file_inside(root, f) is not None:
            continue
        (elsewhere if os.path.lexists(root / f) else absent).append(f)
    if absent:
        raise InputError(f"{len(absent)} file(s) of {csv} are not in {root}, e.g. {absent[0]!r}")
    if elsewhere:
        raise InputError(
            f"{len(elsewhere)} file(s) of {csv} are not regular files inside {root}, "
            f"e.g. {elsewhere[0]!r}",
            hint="name files relative to the folder, without '..'; links may point only inside it",
        )


def _read_files(root: Path, ids: Sequence[str], size: int) -> np.ndarray:
    from robustlab.data.images import ImageError, load_image

    out = np.empty((len(ids), size, size, 3), np.uint8)
    for k, i in enumerate(ids):
        try:
            rgb, _ = load_image(root / i)
        except ImageError as exc:
            raise InputError(f"{i}: {exc}") from None
        out[k] = _resize(rgb, size)
    return out


def read_icons50(path: str | Path) -> LabelledSet:
    """ICONS-50 as released: ``Icons-50.npy`` (a pickled dict of ``image`` N x 3 x 32 x 32,
    ``class``, ``style``, ``subtype``, ``rendition``) or a folder holding it; or the folder
    layout its training code reads, ``<root>/<class>/.../<file>`` with the vendor in the path.

    In the folder layout the style is the one vendor of :data:`ICONS50_STYLES` that is a
    whole word of the file's path (``lg`` inside ``bulgaria`` does not count); files naming
    none or several are skipped and counted in the log. Subtypes and versions are not in
    that layout, so only the style protocol applies.

    The pickle is read by :func:`robustlab.data.pickles.load_npy_object`: containers,
    strings and numpy arrays only; a file asking for anything else is refused unread.
    """
    p = Path(path).expanduser()
    if p.is_dir() and named_file(p, "Icons-50.npy", what="ICONS-50's file") is None:
        return _icons50_folder(p)
    if p.is_dir():
        p = p / "Icons-50.npy"
    if not p.is_file():
        raise MissingResourceError(
            f"no Icons-50.npy at {p}", hint="download ICONS-50 (Icons-50.npy) and pass its path"
        )
    from robustlab.data.pickles import UnsafePickle, load_npy_object

    try:
        d = load_npy_object(p)
        images = np.asarray(d["image"], dtype=np.uint8)
        cols = {k: [str(v) for v in d[k]] for k in ("class", "style", "subtype", "rendition")}
    except UnsafePickle as exc:
        raise InputError(f"{p} is refused: {exc}", hint=_TRUSTED) from None
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
        EOFError,
        pickle.UnpicklingError,
        AttributeError,
    ) as exc:
        raise InputError(
            f"{p} is not ICONS-50's Icons-50.npy ({type(exc).__name__}: {exc})"
        ) from None
    if images.ndim != 4 or images.shape[1] != 3 or len(images) != len(cols["class"]):
        raise InputError(f"{p}: images must be N x 3 x H x W, one per label; got {images.shape}")
    meta = pd.DataFrame(
        {
            "id": [f"{i:05d}" for i in range(len(images))],
            "class": cols["class"],
            "subtype": cols["subtype"],
            "style": cols["style"],
            "version": cols["rendition"],
        }
    )

    def read(ids, size):
        return np.stack(
            [_resize(np.ascontiguousarray(images[int(i)].transpose(1, 2, 0)), size) for i in ids]
        )

    return LabelledSet("icons50", p, meta, read, blobs=(p,))


def _icons50_folder(root: Path) -> LabelledSet:
    import re

    from robustlab.data.sources import IMAGE_EXTENSIONS
    from robustlab.files.safety import walk_files

    rows, skipped = [], 0
    for rel in sorted(walk_files(root)[0]):  # robustlab.files.safety' link rule
        if len(rel.parts) < 2 or rel.suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        words = set(re.findall(r"emoji-one|[a-z0-9]+", rel.as_posix().lower()))
        found = [s for s in ICONS50_STYLES if s in words]
        if len(found) != 1:
            skipped += 1
            continue
        rows.append((rel.as_posix(), rel.parts[0], found[0]))
    if skipped:
        log.info("%s: %d file(s) name no single ICONS-50 vendor and are left out", root, skipped)
    if not rows:
        raise InputError(
            f"{root}: no image in <class>/ folders names an ICONS-50 vendor "
            f"({', '.join(ICONS50_STYLES)})",
            hint="or pass Icons-50.npy",
        )
    meta = pd.DataFrame(rows, columns=["id", "class", "style"])
    return LabelledSet("icons50", root, meta, lambda ids, size: _read_files(root, ids, size))


# CIFAR-100's python release: the files read_cifar100 needs.
NEED = ("train", "test", "meta")


def read_cifar100(path: str | Path) -> LabelledSet:
    """CIFAR-100's python release (``cifar-100-python/{train,test,meta}``): class = the 20
    superclasses (coarse labels), subtype = the 100 subclasses, split = train/test."""
    given = Path(path).expanduser()
    sub = "cifar-100-python" if (given / "cifar-100-python").is_dir() else "."
    root = given / sub if sub != "." else given
    # The link rule, from the folder the user named: a linked subfolder or file that
    # leaves it is refused with the reason.
    found = [named_file(given, f"{sub}/{n}", what="CIFAR-100's file") for n in NEED]
    need = [root / n for n in NEED]
    if not all(found):
        raise MissingResourceError(
            f"{root} is not CIFAR-100's python release (needs train, test and meta)",
            hint="extract cifar-100-python.tar.gz",
        )

    from robustlab.data.pickles import UnsafePickle, load_data_pickle

    def unpickle(f):
        try:
            with open(f, "rb") as fh:
                return load_data_pickle(fh, encoding="bytes")
        except UnsafePickle as exc:
            raise InputError(f"{f} is refused: {exc}", hint=_TRUSTED) from None
        except (OSError, pickle.UnpicklingError, EOFError, ValueError) as exc:
            raise InputError(f"cannot read {f}: {exc}") from None

    m = unpickle(root / "meta")
    try:
        fine = [n.decode() for n in m[b"fine_label_names"]]
        coarse = [n.decode() for n in m[b"coarse_label_names"]]
        parts, rows = [], []
        for split in ("train", "test"):
            d = unpickle(root / split)
            data = (
                np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            )
            names = [n.decode() for n in d[b"filenames"]]
            for k, (f, c) in enumerate(zip(d[b"fine_labels"], d[b"coarse_labels"])):
                rows.append((f"{split}/{names[k]}", coarse[c], fine[f], split))
            parts.append(data)
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise InputError(f"{root}: not CIFAR-100's format ({type(exc).__name__}: {exc})") from None
    images = np.concatenate(parts)
    meta = pd.DataFrame(rows, columns=["id", "class", "subtype", "split"])
    position = {i: k for k, i in enumerate(meta["id"])}

    def read(ids, size):
        return np.stack([_resize(images[position[i]], size) for i in ids])

    return LabelledSet("cifar100", root, meta, read, blobs=tuple(need))


READERS = {"folder": read_folder, "icons50": read_icons50, "cifar100": read_cifar100}


def read_set(data: str | Path, *, layout: str = "auto", metadata=None) -> LabelledSet:
    """Read ``data`` with the reader its layout needs (``auto``: guessed from the files)."""
    p = Path(data).expanduser()
    if layout == "auto":
        if p.suffix == ".npy" or (p / "Icons-50.npy").is_file():
            layout = "icons50"
        elif (
            (p / "cifar-100-python").is_dir() or (p / "meta").is_file() and (p / "train").is_file()
        ):
            layout = "cifar100"
        else:
            layout = "folder"
    if layout not in READERS:
        raise InputError(f"unknown layout {layout!r}; choose from auto, {', '.join(READERS)}")
    if layout == "folder":
        return read_folder(p, metadata)
    return READERS[layout](p)
