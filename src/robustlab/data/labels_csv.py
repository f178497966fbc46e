"""Reading a labels CSV for the images of one folder: one streaming pass, only the rows
that name those images kept.

Why streaming: a labels CSV is often the list of a whole benchmark (ImageNet's 50,000
validation files, a million-row index) while the folder holds a few of its images. Reading
every row into dictionaries, checking every row's path on disk and recording every absent
file one by one took 142 s and 2.3 GB for 8 images and a million rows; here each row costs
one ``csv.reader`` step, a few string tests and a set lookup, and memory holds the rows of
the folder's images plus a bounded record of the others (:data:`MAX_ROW_SKIPS` rows by name
per reason, then one entry that counts the rest).

Checks run where they decide a label: a ``file`` column and a label column are required; a
row of an image in the folder may not repeat an earlier row's file, nor pair a class with
another index than an earlier row of the folder's images did. Rows of absent files are
reported (counted, with their reason) but never read further: nothing is scored from them.
"""

from __future__ import annotations

import csv
import itertools
import operator
import re
from collections.abc import Collection, Set
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from robustlab.errors import InputError

# Columns a labels CSV may use for the class, in order of preference.
LABEL_COLUMNS = ("wnid", "class", "label", "index")
# Rows of files not in the folder recorded one by one, per reason; the rest are one entry.
MAX_ROW_SKIPS = 20
# Names that are not plainly spelled relative paths: a backslash, a doubled or trailing
# slash, an absolute path or drive, a part starting with a dot ("./", "../", hidden). A row
# without any is already in the walk's spelling, inside the folder and not hidden.
_SPECIAL = re.compile(r"\\|//|/$|^/|^.:|(?:^|/)\.")
# Substrings of "\n" + names joined by "\n" + "\n" that every such name brings (a colon
# for a drive): a chunk without any needs no look at its rows one by one.
_SPECIAL_MARKS = ("\\", "//", "/\n", "\n/", "\n.", "/.", ":")
CHUNK = 1024  # rows sorted at once (more would keep enough lists alive to slow the collector)


@dataclass
class RowSkips:
    """Rows left out for one reason: the first :data:`MAX_ROW_SKIPS` by file, and a count."""

    reason: str
    files: list[str] = field(default_factory=list)
    n: int = 0

    def add(self, key: str) -> None:
        self.n += 1
        if len(self.files) < MAX_ROW_SKIPS:
            self.files.append(key)

    def entries(self, csv_name: str) -> list[tuple[str, str]]:
        """``(file, reason)`` per named row, and one ``(<csv>: N more rows, reason)``."""
        out = [(f, self.reason) for f in self.files]
        more = self.n - len(self.files)
        if more:
            out.append((f"{csv_name}: {more:,} more rows", self.reason))
        return out


@dataclass
class LabelRows:
    """What a labels CSV says about one folder's images.

    Attributes:
        labels: ``file -> (class name, index)`` for the rows naming listed files, in row
            order.
        skips: Rows naming files that were not read, by reason.
    """

    labels: dict[str, tuple[str | None, int | None]]
    skips: list[RowSkips]

    def skipped(self, csv_name: str) -> list[tuple[str, str]]:
        return [e for s in self.skips for e in s.entries(csv_name)]


def read_label_rows(csv_path: Path, images: Set[str], others: Collection[str]) -> LabelRows:
    """The rows of ``csv_path`` that label ``images`` (relative posix paths).

    Args:
        csv_path: The labels CSV (columns ``file`` and one of :data:`LABEL_COLUMNS`; an
            ``index`` column also gives the label index).
        images: The image files of the folder (the rows that matter).
        others: Its other files (not images, robustlab's own): a row naming one is neither
            read nor reported (the folder's listing reports it).

    Raises:
        InputError: unreadable CSV, no ``file`` or label column, an image listed twice, an
            index that is not an integer, a class paired with two indices.
    """
    name = csv_path.name
    outside = {
        way: RowSkips(f"listed in {name} but outside the data folder ({way}); not read")
        for way in ("absolute path", "path with '..'")
    }
    missing = RowSkips(f"listed in {name} but missing")
    labels: dict[str, tuple[str | None, int | None]] = {}
    pairs: dict[tuple[str, object], tuple[int, object]] = {}
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            col, fi, ci, ii = _columns(csv_path, next(reader, []))
            first_line = 2
            while chunk := list(itertools.islice(reader, CHUNK)):
                for j, key in _rows_that_matter(chunk, fi, images, others, missing):
                    if key not in images:
                        key = PurePosixPath(key.replace("\\", "/")).as_posix()
                    if key not in images:
                        way_out = _outside_row(key)
                        if way_out:  # never read (it may name a file outside --data)
                            outside[way_out].add(key)
                        elif key not in others and not _hidden(key):
                            missing.add(key)
                        continue
                    row = chunk[j]
                    cls = (row[ci].strip() if ci < len(row) else "") or None
                    index = row[ii].strip() if ii is not None and ii < len(row) else ""
                    _keep(csv_path, labels, pairs, first_line + j, key, (col, cls), index)
                first_line += len(chunk)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read labels CSV {csv_path}: {exc}") from None
    return LabelRows(labels, [*outside.values(), missing])


def _rows_that_matter(
    chunk: list[list[str]],
    fi: int,
    images: Set[str],
    others: Collection[str],
    missing: RowSkips,
) -> list[tuple[int, str]]:
    """``(position, file)`` of the rows of ``chunk`` that name an image of the folder or
    are spelled otherwise than plainly (they are looked at one by one); the plainly spelled
    files that are not in the folder (nearly every row of a benchmark-wide CSV) are only
    counted into ``missing``, with set and regular-expression operations over the chunk."""
    try:
        keys = list(map(str.strip, map(operator.itemgetter(fi), chunk)))
    except IndexError:  # a row shorter than the header: its file is empty
        keys = [row[fi].strip() if fi < len(row) else "" for row in chunk]
    hits = [] if images.isdisjoint(keys) else [i for i, k in enumerate(keys) if k in images]
    odd: list[int] = []
    joined = "\n" + "\n".join(keys) + "\n"
    if any(mark in joined for mark in _SPECIAL_MARKS):  # rare: look row by row
        odd = [i for i, k in enumerate(keys) if k and _SPECIAL.search(k) and k not in images]
    n_other = sum(map(others.__contains__, keys)) if others else 0
    n_other -= sum(1 for i in odd if keys[i] in others)
    plain = len(keys) - len(hits) - len(odd) - keys.count("") - n_other
    if plain:
        odd_set = set(odd)
        room = MAX_ROW_SKIPS - len(missing.files)
        named: list[str] = []
        for i, k in enumerate(keys):
            if room <= len(named):
                break
            if k and k not in images and i not in odd_set and k not in others:
                named.append(k)
        missing.files.extend(named)
        missing.n += plain
    return sorted((i, keys[i]) for i in (*hits, *odd))


def _columns(csv_path: Path, header: list[str]) -> tuple[str, int, int, int | None]:
    """(class column's name, file, class and index column positions) of a header row."""
    header = [h.strip().lower() for h in header]
    if "file" not in header:
        raise InputError(f"labels CSV {csv_path} needs a 'file' column; it has {header}")
    col = next((c for c in LABEL_COLUMNS if c in header), None)
    if col is None:
        raise InputError(
            f"labels CSV {csv_path} needs one of the columns {', '.join(LABEL_COLUMNS)}; "
            f"it has {header}"
        )
    ii = header.index("index") if "index" in header else None
    return col, header.index("file"), header.index(col), ii


def _keep(
    csv_path: Path,
    labels: dict,
    pairs: dict,
    n: int,
    key: str,
    column: tuple[str, str | None],
    index: str,
) -> None:
    """Add the row of a listed image to ``labels``: refused when its file was listed
    before, its index is not an integer, or a class and an index column disagree with an
    earlier row (the first row pairing a class with an index fixes the pair).
    ``column``: (the class column's name, the row's class)."""
    col, cls = column
    if key in labels:
        raise InputError(f"labels CSV {csv_path} line {n}: {key!r} is listed twice")
    label = None
    if index:
        try:
            label = int(index)
        except ValueError:
            raise InputError(
                f"labels CSV {csv_path} line {n}: index {index!r} is not an integer"
            ) from None
    if col != "index" and cls is not None and label is not None:
        for pair, other in ((("class", cls), label), (("index", label), cls)):
            first = pairs.setdefault(pair, (n, other))
            if first[1] != other:
                raise InputError(
                    f"labels CSV {csv_path} line {n}: {key!r} has {col} {cls!r} and index "
                    f"{label}, but line {first[0]} pairs {pair[0]} {pair[1]!r} with "
                    f"{first[1]!r}",
                    hint="fix the row so that each class has one index",
                )
    labels[key] = (cls, label)


def _outside_row(key: str) -> str | None:
    """Why a row's file may not be read, or None: an absolute path or a ``..`` part
    (``../x.jpg``, ``a/../b.jpg``) names a file by a way out of the data folder; rows name
    files relative to it, plainly."""
    if key.startswith("/") or (len(key) > 1 and key[1] == ":"):  # /x.jpg, C:/x.jpg
        return "absolute path"
    if ".." in PurePosixPath(key).parts:
        return "path with '..'"
    return None


def _hidden(key: str) -> bool:
    """.DS_Store, .ipynb_checkpoints/ and generate's temp files are never inputs."""
    return key.startswith(".") or "/." in key
