"""Label spaces: which classes a test set has and how ImageNet-1k predictions map onto them.

A benchmark's labels are not always the 1,000 ImageNet classes. Three kinds are handled:

- **full**: the 1,000 ImageNet-1k classes themselves (``imagenet1k``).
- **subset**: some of the 1,000 classes (``imagenet-a``, ``imagenet-r``: 200 each). An
  ImageNet classifier is scored on its logits restricted to those columns, so a prediction
  can only be one of the subset's classes (the ImageNet-A/R protocol).
- **mapping**: classes that each stand for one or more ImageNet classes (``imagenet9``: 9
  super-classes over 370 ImageNet classes; ``imagenet-d``: 113 classes over 1 to 3 ImageNet
  ids each). A prediction is correct when it hits any ImageNet id mapped to the label.

The tables are data files in ``robustlab/data/assets`` (their sources are listed in the
README there), never lists buried in code. A user-defined space is a CSV file with a
``name`` column plus either ``wnid`` (a subset of ImageNet-1k) or ``imagenet_ids``
(space-separated ImageNet-1k indices: a mapping); an optional ``folder`` column gives the
folder name the class has in the dataset.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError

NUM_IMAGENET_CLASSES = 1000
KINDS = ("full", "subset", "mapping")


@dataclass(frozen=True)
class LabelSpace:
    """The classes of a test set and, for non-ImageNet spaces, their ImageNet-1k ids.

    Attributes:
        name: Registry name (``"imagenet1k"``, ``"imagenet9"``, ...) or the CSV path.
        classes: Readable class names, in label order.
        wnids: WordNet id per class (for ImageNet-9 the super-class synset; None when a
            class has no single synset, as in ImageNet-D).
        folders: Folder name of each class in the official dataset layout (an ImageNet
            wnid, ``"00_dog"`` for ImageNet-9, ``"alarm_clock"`` for ImageNet-D).
        kind: ``"full"``, ``"subset"`` or ``"mapping"`` (see the module docstring).
        imagenet_ids: ImageNet-1k indices per class: one each for full and subset spaces,
            one or more for a mapping.
        source: Where the table comes from (for the record).
    """

    name: str
    classes: tuple[str, ...]
    wnids: tuple[str | None, ...]
    folders: tuple[str, ...]
    kind: str
    imagenet_ids: tuple[tuple[int, ...], ...]
    source: str = ""
    _lookup: dict[str, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _ambiguous: frozenset = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.classes)
        if self.kind not in KINDS:
            raise InputError(
                f"label space kind must be one of {', '.join(KINDS)}, not {self.kind!r}"
            )
        if not n or not (len(self.wnids) == len(self.folders) == len(self.imagenet_ids) == n):
            raise InputError(
                f"label space {self.name!r}: classes, wnids, folders and ids differ in length"
            )
        for i, ids in enumerate(self.imagenet_ids):
            if not ids or any(not 0 <= j < NUM_IMAGENET_CLASSES for j in ids):
                raise InputError(
                    f"label space {self.name!r}: class {self.classes[i]!r} has ImageNet "
                    f"ids {list(ids)} (need 1+ ids in 0..{NUM_IMAGENET_CLASSES - 1})"
                )
            if self.kind != "mapping" and len(ids) != 1:
                raise InputError(f"label space {self.name!r}: a {self.kind} class maps to one id")
        lookup: dict[str, int] = {}
        ambiguous: set[str] = set()
        # Exact keys first (folder, wnid), then names; a readable name used by two classes
        # (ImageNet's two "crane"s and two "maillot"s) is ambiguous and refused.
        for i in range(n):
            for key in (self.folders[i], self.wnids[i]):
                if key:
                    lookup.setdefault(key, i)
        names: dict[str, int] = {}
        for i, name in enumerate(self.classes):
            for key in {name, name.lower(), name.replace(" ", "_"), name.lower().replace(" ", "_")}:
                if key in names and names[key] != i:
                    ambiguous.add(key)
                names.setdefault(key, i)
        for key, i in names.items():
            if key not in ambiguous:
                lookup.setdefault(key, i)
        if self.kind == "mapping":
            # An ImageNet photo filed under its wnid (an ImageNet val tree used as the source
            # of ImageNet-9 scenes) belongs to the class its ImageNet id is mapped to.
            rows = _imagenet_rows()
            for i, ids in enumerate(self.imagenet_ids):
                for j in ids:
                    lookup.setdefault(rows[j][0], i)
        object.__setattr__(self, "_lookup", lookup)
        object.__setattr__(self, "_ambiguous", frozenset(ambiguous - set(lookup)))

    def __len__(self) -> int:
        return len(self.classes)

    def index_of(self, key) -> int:
        """Label index of ``key``: a folder name, wnid, readable name or index string.

        In a mapping space the wnid of a mapped ImageNet class also gives its class
        (``n02085620``, Chihuahua, is ImageNet-9's ``dog``).

        Raises:
            ValueError: naming the key when it is not a class of this space (or a readable
                name shared by two classes, which must then be given by wnid).
        """
        if isinstance(key, bool):
            raise InputError(f"{key!r} is not a class of label space {self.name!r}")
        if isinstance(key, int):
            if 0 <= key < len(self.classes):
                return key
            raise InputError(
                f"class index {key} is outside label space {self.name!r} (0..{len(self) - 1})"
            )
        text = str(key).strip()
        if text in self._lookup:
            return self._lookup[text]
        if text.lower() in self._lookup:
            return self._lookup[text.lower()]
        if text.isdigit():
            return self.index_of(int(text))
        if text in self._ambiguous or text.lower() in self._ambiguous:
            raise InputError(
                f"class name {text!r} is used by more than one class of label space "
                f"{self.name!r}; name it by wnid"
            )
        raise InputError(f"{text!r} is not a class of label space {self.name!r}")

    @property
    def subset_ids(self) -> tuple[int, ...] | None:
        """ImageNet-1k column per class for a subset space (None otherwise)."""
        if self.kind != "subset":
            return None
        return tuple(ids[0] for ids in self.imagenet_ids)

    def describe(self) -> dict:
        """A JSON-able record: name, kind, size and source."""
        return {
            "name": self.name,
            "kind": self.kind,
            "num_classes": len(self),
            "source": self.source,
        }


# ---------------------------------------------------------------- built-in tables
def _asset(name: str):
    return resources.files("robustlab.data").joinpath("assets", name)


def _read_csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(text.splitlines()))


@lru_cache(maxsize=1)
def _imagenet_rows() -> tuple[tuple[str, str], ...]:
    """(wnid, name) of the 1,000 classes in index order (sorted wnids)."""
    rows = _read_csv(_asset("imagenet_classes.csv").read_text(encoding="utf-8"))
    rows.sort(key=lambda r: int(r["index"]))
    if [int(r["index"]) for r in rows] != list(range(NUM_IMAGENET_CLASSES)):
        raise ValueError("imagenet_classes.csv must list indices 0..999 once each")
    return tuple((r["wnid"], r["name"]) for r in rows)


def _imagenet1k() -> LabelSpace:
    rows = _imagenet_rows()
    return LabelSpace(
        name="imagenet1k",
        classes=tuple(n for _, n in rows),
        wnids=tuple(w for w, _ in rows),
        folders=tuple(w for w, _ in rows),
        kind="full",
        imagenet_ids=tuple((i,) for i in range(len(rows))),
        source="ImageNet-1k (ILSVRC-2012) classes, index = position of the sorted wnid",
    )


def _subset(name: str, wnids: list[str], source: str) -> LabelSpace:
    rows = _imagenet_rows()
    index = {w: i for i, (w, _) in enumerate(rows)}
    unknown = [w for w in wnids if w not in index]
    if unknown:
        raise InputError(f"label space {name!r}: {unknown[0]!r} is not an ImageNet-1k wnid")
    ids = sorted({index[w] for w in wnids})  # ImageNet index order, like the reference masks
    return LabelSpace(
        name=name,
        classes=tuple(rows[i][1] for i in ids),
        wnids=tuple(rows[i][0] for i in ids),
        folders=tuple(rows[i][0] for i in ids),
        kind="subset",
        imagenet_ids=tuple((i,) for i in ids),
        source=source,
    )


def _wnid_list(file: str) -> list[str]:
    return [
        line.strip()
        for line in _asset(file).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def _imagenet_a() -> LabelSpace:
    return _subset(
        "imagenet-a",
        _wnid_list("imagenet_a_wnids.txt"),
        "ImageNet-A 200 classes (hendrycks/natural-adv-examples)",
    )


def _imagenet_r() -> LabelSpace:
    return _subset(
        "imagenet-r",
        _wnid_list("imagenet_r_wnids.txt"),
        "ImageNet-R 200 classes (hendrycks/imagenet-r)",
    )


def _imagenet9() -> LabelSpace:
    classes = _read_csv(_asset("imagenet9_classes.csv").read_text(encoding="utf-8"))
    pairs = _read_csv(_asset("imagenet9_map.csv").read_text(encoding="utf-8"))
    ids: list[list[int]] = [[] for _ in classes]
    for row in pairs:
        ids[int(row["imagenet9_index"])].append(int(row["imagenet_index"]))
    return LabelSpace(
        name="imagenet9",
        classes=tuple(r["name"] for r in classes),
        wnids=tuple(r["wnid"] for r in classes),
        folders=tuple(r["folder"] for r in classes),
        kind="mapping",
        imagenet_ids=tuple(tuple(sorted(x)) for x in ids),
        source="ImageNet-9 in_to_in9.json (MadryLab/backgrounds_challenge): 9 classes over 370 ImageNet classes",
    )


def _imagenet_d() -> LabelSpace:
    rows = _read_csv(_asset("imagenet_d_classes.csv").read_text(encoding="utf-8"))
    rows.sort(key=lambda r: int(r["index"]))
    return LabelSpace(
        name="imagenet-d",
        classes=tuple(r["name"] for r in rows),
        wnids=tuple(None for _ in rows),
        folders=tuple(r["folder"] for r in rows),
        kind="mapping",
        imagenet_ids=tuple(tuple(int(x) for x in r["imagenet_ids"].split()) for r in rows),
        source="ImageNet-D imgnet_d2imgnet_id.txt (chenshuang-zhang/imagenet_d): 113 classes, 1-3 ImageNet ids each",
    )


def _cifar10() -> LabelSpace:
    rows = _read_csv(_asset("cifar10_classes.csv").read_text(encoding="utf-8"))
    rows.sort(key=lambda r: int(r["index"]))
    return LabelSpace(
        name="cifar10",
        classes=tuple(r["name"] for r in rows),
        wnids=tuple(None for _ in rows),
        folders=tuple(r["folder"] for r in rows),
        kind="mapping",
        imagenet_ids=tuple(tuple(int(x) for x in r["imagenet_ids"].split()) for r in rows),
        source="CIFAR-10's 10 classes in its label order; ImageNet ids: robustlab's own mapping",
    )


def _demo() -> LabelSpace:
    rows = _read_csv(_asset("demo/classes.csv").read_text(encoding="utf-8"))
    return LabelSpace(
        name="demo",
        classes=tuple(r["name"] for r in rows),
        wnids=tuple(None for _ in rows),
        folders=tuple(r["folder"] for r in rows),
        kind="mapping",
        imagenet_ids=tuple(tuple(int(x) for x in r["imagenet_ids"].split()) for r in rows),
        source="robustlab demo set (docs/demo.md): 6 classes, 1-3 ImageNet ids each",
    )


_BUILTIN = {
    "imagenet1k": (_imagenet1k, "the 1,000 ImageNet-1k classes"),
    "imagenet-a": (_imagenet_a, "ImageNet-A's 200 classes: logits restricted to them"),
    "imagenet-r": (_imagenet_r, "ImageNet-R's 200 classes: logits restricted to them"),
    "imagenet9": (_imagenet9, "ImageNet-9: 9 super-classes over 370 ImageNet classes"),
    "imagenet-d": (_imagenet_d, "ImageNet-D: 113 classes, each 1-3 ImageNet ids"),
    "demo": (_demo, "robustlab demo photos: 6 classes, each 1-3 ImageNet ids"),
    "cifar10": (_cifar10, "CIFAR-10: 10 classes (a 10-output model, or ImageNet ids mapped)"),
}
_ALIASES = {
    "imagenet": "imagenet1k",
    "imagenet-1k": "imagenet1k",
    "in1k": "imagenet1k",
    "imagenet-9": "imagenet9",
    "in9": "imagenet9",
    "imagenet_d": "imagenet-d",
    "imagenet_a": "imagenet-a",
    "imagenet_r": "imagenet-r",
    "cifar-10": "cifar10",
}


def list_label_spaces() -> list[tuple[str, str]]:
    """(name, description) of the built-in label spaces."""
    return [(name, desc) for name, (_, desc) in _BUILTIN.items()]


@lru_cache(maxsize=32)
def _cached(name: str) -> LabelSpace:
    return _BUILTIN[name][0]()


def get_label_space(name) -> LabelSpace:
    """The label space called ``name``, or one read from a CSV file path.

    Args:
        name: A built-in name (see :func:`list_label_spaces`), a path to a CSV file (see the
            module docstring), or a LabelSpace (returned as is).

    Raises:
        ValueError: one line naming the unknown space or the bad CSV row.
    """
    if isinstance(name, LabelSpace):
        return name
    key = str(name).strip()
    canon = _ALIASES.get(key.lower(), key.lower())
    if canon in _BUILTIN:
        return _cached(canon)
    if key.lower().endswith(".csv"):
        return _from_csv(Path(key).expanduser())
    raise InputError(f"unknown label space {key!r}; use one of {', '.join(_BUILTIN)} or a CSV file")


def _from_csv(path: Path) -> LabelSpace:
    """A user label space: ``name`` plus ``wnid`` (subset) or ``imagenet_ids`` (mapping)."""
    if not path.is_file():
        raise MissingResourceError(f"label space file {path} does not exist")
    try:
        rows = _read_csv(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read label space file {path}: {exc}") from None
    cols = set(rows[0]) if rows else set()
    if not rows or "name" not in cols or not ({"wnid", "imagenet_ids"} & cols):
        raise InputError(
            f"{path}: a label space CSV needs a 'name' column and 'wnid' or "
            "'imagenet_ids', and at least one row"
        )
    if "imagenet_ids" in cols:
        ids = []
        for n, row in enumerate(rows, start=2):
            try:
                ids.append(tuple(int(x) for x in (row["imagenet_ids"] or "").split()))
            except ValueError:
                raise InputError(
                    f"{path} line {n}: imagenet_ids must be integers, got {row['imagenet_ids']!r}"
                ) from None
        wnids = tuple((row.get("wnid") or None) for row in rows)
        folders = tuple(row.get("folder") or row["name"] for row in rows)
        return LabelSpace(
            name=str(path),
            classes=tuple(r["name"] for r in rows),
            wnids=wnids,
            folders=folders,
            kind="mapping",
            imagenet_ids=tuple(ids),
            source=f"user file {path}",
        )
    index = {w: i for i, (w, _) in enumerate(_imagenet_rows())}
    bad = [r["wnid"] for r in rows if r["wnid"] not in index]
    if bad:
        raise InputError(f"{path}: {bad[0]!r} is not an ImageNet-1k wnid")
    order = sorted(rows, key=lambda r: index[r["wnid"]])
    return LabelSpace(
        name=str(path),
        classes=tuple(r["name"] for r in order),
        wnids=tuple(r["wnid"] for r in order),
        folders=tuple(r.get("folder") or r["wnid"] for r in order),
        kind="subset",
        imagenet_ids=tuple((index[r["wnid"]],) for r in order),
        source=f"user file {path}",
    )
