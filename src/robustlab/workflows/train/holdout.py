"""Surface-variation protocols: train on some styles or subtypes, test on the ones held out.

The ImageNet-C paper measures robustness to *surface variation* with ICONS-50: a network
trained on every icon style but one (say Microsoft's) is tested on the held-out style, and
one trained without some subtypes of each class ("duck" in "bird") is tested on those
subtypes, scored on the broad class. Its control holds out one *version* of icons that have
several (the same vendor's older drawing): accuracy stays high there, so a low score on a
held-out style is about style, not about unseen images. The appendix repeats the subtype
protocol on CIFAR-100 (hold out 1-4 subclasses of each of the 20 superclasses).

Any labelled image set works: a folder with a metadata CSV (``file``, ``class`` and any of
``subtype``, ``style``, ``version``, ``split``), ICONS-50's ``Icons-50.npy``, or CIFAR-100's
``cifar-100-python`` pickles (class = superclass, subtype = subclass, split = its own
train/test). The protocols:

- ``column=value`` (``style=openmoji``): train on rows whose column differs, test on the rest.
- ``subtypes``: N subtypes of each class (seeded choice) or an explicit list are held out;
  test accuracy is on the broad class.
- ``versions``: among (class, subtype, style) icons with several versions, one version each
  (seeded) is held out.

Besides the held-out test, a seeded, class-stratified share of the training pool is kept
aside as an in-distribution test (or the set's own ``split == test`` rows): "how well does
the network do on what it was trained for" beside "on what was held out". A small network is
trained from scratch at 32 x 32 (a small CNN, the paper's ResNeXt / Shake-Shake ResNeXt /
DenseNet / MSDNet-style pairs of :mod:`robustlab.workflows.train.networks`, or a timm ResNet with a
3x3 stride-1 stem), and
every protocol is stored as one run (predictions of both tests; shift ``clean`` for the
in-distribution test, shift ``holdout`` with the protocol as level), so ``robustlab results``
and ``robustlab report`` show it. The run id covers the data, the split and the training
config, so a rerun reuses the stored run.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustlab.errors import InputError, MissingResourceError, environment_errors
from robustlab.seeding import derive_seed, make_rng

log = logging.getLogger(__name__)

HOLDOUT_SHIFT = "holdout"
SUITE = "surface-variation"
SUITE_VERSION = "1"
PROTOCOLS = ("column", "subtypes", "versions")
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
# ICONS-50's normalisation (mean 0.5, std 0.25 per channel).
MEAN, STD = 0.5, 0.25
META_COLUMNS = ("class", "subtype", "style", "version", "split")


# ---------------------------------------------------------------------------- data sets
@dataclass
class LabelledSet:
    """Images with a class and optional subtype / style / version / split per row.

    Attributes:
        name: What it is (``folder``, ``icons50``, ``cifar100``).
        root: Where it was read from.
        meta: One row per image: ``id`` (unique) and :data:`META_COLUMNS` present.
        read: ``read(ids, size)`` -> N x size x size x 3 uint8 for these ``id`` values (by id,
            not position, so ``meta`` may be filtered or reordered).
    """

    name: str
    root: Path
    meta: pd.DataFrame
    read: Callable[[Sequence[str], int], np.ndarray]

    def load(self, rows: Sequence[int], size: int) -> np.ndarray:
        """Images of the rows at these positions of ``meta``."""
        ids = self.meta["id"].to_numpy()
        return self.read([ids[i] for i in rows], size)

    @property
    def classes(self) -> list[str]:
        return sorted(self.meta["class"].unique())

    @property
    def fingerprint(self) -> str:
        from robustlab.run.identity import data_fingerprint

        cols = [c for c in ("id", *META_COLUMNS) if c in self.meta.columns]
        return data_fingerprint(self.meta[cols].astype(str).itertuples(index=False, name=None))


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
    path = Path(metadata).expanduser() if metadata else root / "metadata.csv"
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
    absent = [f for f in meta["file"] if not (root / f).is_file()]
    if absent:
        raise InputError(f"{len(absent)} file(s) of {path} are not in {root}, e.g. {absent[0]!r}")
    meta = meta.rename(columns={"file": "id"})
    keep = ["id", *[c for c in META_COLUMNS if c in meta.columns]]
    meta = meta[keep].sort_values("id", kind="stable").reset_index(drop=True)

    return LabelledSet("folder", root, meta, lambda ids, size: _read_files(root, ids, size))


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

    The pickle is loaded with ``allow_pickle``; read only a file you trust.
    """
    p = Path(path).expanduser()
    if p.is_dir() and not (p / "Icons-50.npy").is_file():
        return _icons50_folder(p)
    if p.is_dir():
        p = p / "Icons-50.npy"
    if not p.is_file():
        raise MissingResourceError(
            f"no Icons-50.npy at {p}", hint="download ICONS-50 (Icons-50.npy) and pass its path"
        )
    try:
        d = np.load(p, allow_pickle=True).item()
        images = np.asarray(d["image"], dtype=np.uint8)
        cols = {k: [str(v) for v in d[k]] for k in ("class", "style", "subtype", "rendition")}
    except (OSError, ValueError, KeyError, pickle.UnpicklingError, AttributeError) as exc:
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

    return LabelledSet("icons50", p, meta, read)


def _icons50_folder(root: Path) -> LabelledSet:
    import re

    from robustlab.data.sources import IMAGE_EXTENSIONS
    from robustlab.paths import walk_files

    rows, skipped = [], 0
    for rel in sorted(walk_files(root)[0]):  # robustlab.paths' link rule
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


def read_cifar100(path: str | Path) -> LabelledSet:
    """CIFAR-100's python release (``cifar-100-python/{train,test,meta}``): class = the 20
    superclasses (coarse labels), subtype = the 100 subclasses, split = train/test."""
    root = Path(path).expanduser()
    if (root / "cifar-100-python").is_dir():
        root = root / "cifar-100-python"
    need = [root / n for n in ("train", "test", "meta")]
    if not all(f.is_file() for f in need):
        raise MissingResourceError(
            f"{root} is not CIFAR-100's python release (needs train, test and meta)",
            hint="extract cifar-100-python.tar.gz",
        )

    def unpickle(f):
        try:
            with open(f, "rb") as fh:
                return pickle.load(fh, encoding="bytes")
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

    return LabelledSet("cifar100", root, meta, read)


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


# ---------------------------------------------------------------------------- splits
@dataclass(frozen=True)
class HoldoutSplit:
    """Row positions of one protocol's three parts, and what was held out.

    Attributes:
        protocol: ``column``, ``subtypes`` or ``versions``.
        label: The held-out part's name, e.g. ``style=openmoji`` (the stored level).
        train, seen, held: Row positions: training, in-distribution test, held-out test.
        held_values: What was held out (subtypes, versions...), for the record.
        seed: Split seed.
    """

    protocol: str
    label: str
    train: tuple[int, ...]
    seen: tuple[int, ...]
    held: tuple[int, ...]
    held_values: tuple[str, ...]
    seed: int

    def fingerprint(self, meta: pd.DataFrame) -> str:
        from robustlab.run.identity import data_fingerprint

        ids = meta["id"].to_numpy()
        return data_fingerprint(
            [
                (part, ids[i])
                for part, rows in (("train", self.train), ("seen", self.seen), ("held", self.held))
                for i in rows
            ]
        )

    def describe(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "held_out": self.label,
            "seed": self.seed,
            "n_train": len(self.train),
            "n_seen_test": len(self.seen),
            "n_held_out": len(self.held),
            "held_values": list(self.held_values),
        }


def _need(meta: pd.DataFrame, column: str, what: str) -> None:
    if column not in meta.columns:
        raise InputError(
            f"{what} needs a {column!r} column; the data has "
            f"{', '.join(c for c in meta.columns if c != 'id')}",
            hint=f"add a {column} column to the metadata CSV",
        )


def _choices(values, k: int = 12) -> str:
    vals = sorted(set(map(str, values)))
    return ", ".join(vals[:k]) + (f", ... ({len(vals)} in all)" if len(vals) > k else "")


def _pick(rng_key: tuple, items: Sequence[str], k: int) -> list[str]:
    order = make_rng(derive_seed(*rng_key)).permutation(len(items))
    return [items[i] for i in order[:k]]


def _finish(
    meta: pd.DataFrame,
    protocol: str,
    label: str,
    held_mask: np.ndarray,
    held_values,
    seed: int,
    test_fraction: float,
) -> HoldoutSplit:
    """Common checks, and the in-distribution test carved from what is not held out."""
    rest = ~held_mask
    if not rest.any():
        raise InputError(
            f"{label} covers every image: nothing is left to train on",
            hint="hold out a value that only part of the images have",
        )
    if not held_mask.any():
        raise InputError(f"{label} holds out no image")
    train_classes = set(meta.loc[rest, "class"])
    orphans = sorted(set(meta.loc[held_mask, "class"]) - train_classes)
    if orphans:
        raise InputError(
            f"class(es) {_choices(orphans, 6)} have no training image outside {label}",
            hint="drop those classes from the metadata, or hold out less",
        )
    idx = np.flatnonzero(rest)
    if "split" in meta.columns and {"train", "test"} <= set(meta["split"]):
        is_test = meta["split"].to_numpy() == "test"
        train = idx[~is_test[idx]]
        seen = idx[is_test[idx]]
        held = np.flatnonzero(held_mask & is_test)
        if len(held) == 0:
            raise InputError(f"{label}: no test-split image is held out")
    else:
        seen_list, train_list = [], []
        classes = meta["class"].to_numpy()
        for c in sorted(train_classes):
            rows = idx[classes[idx] == c]
            k = min(len(rows) - 1, math.ceil(len(rows) * test_fraction))
            order = make_rng(
                derive_seed(seed, f"class:{c}", "holdout-seen", test_fraction)
            ).permutation(len(rows))
            seen_list += rows[order[:k]].tolist()
            train_list += rows[order[k:]].tolist()
        train, seen, held = (
            np.array(sorted(train_list)),
            np.array(sorted(seen_list)),
            np.flatnonzero(held_mask),
        )
    missing = sorted(train_classes - set(meta["class"].to_numpy()[train]))
    if missing:
        raise InputError(
            f"class(es) {_choices(missing, 6)} have no training image left under {label}"
        )
    return HoldoutSplit(
        protocol,
        label,
        tuple(int(i) for i in train),
        tuple(int(i) for i in seen),
        tuple(int(i) for i in held),
        tuple(sorted(map(str, held_values))),
        int(seed),
    )


def split_column(
    meta: pd.DataFrame, spec: str, *, seed: int = 0, test_fraction: float = 0.1
) -> HoldoutSplit:
    """``style=openmoji``: test on the rows with that value, train on the others."""
    column, sep, value = spec.partition("=")
    column, value = column.strip(), value.strip()
    if not sep or not column or not value:
        raise InputError(f"--holdout {spec!r}: write COLUMN=VALUE, e.g. style=openmoji")
    _need(meta, column, f"--holdout {spec}")
    values = meta[column].astype(str)
    if value not in set(values):
        raise InputError(f"no image has {column}={value!r}; choose from {_choices(values)}")
    return _finish(
        meta,
        "column",
        f"{column}={value}",
        (values == value).to_numpy(),
        [value],
        seed,
        test_fraction,
    )


def split_subtypes(
    meta: pd.DataFrame, subtypes: int | Sequence[str], *, seed: int = 0, test_fraction: float = 0.1
) -> HoldoutSplit:
    """Hold out N subtypes of each class (seeded), or the subtypes named."""
    _need(meta, "subtype", "--holdout-subtypes")
    sub = meta["subtype"].astype(str).to_numpy()
    cls = meta["class"].astype(str).to_numpy()
    if isinstance(subtypes, (int, np.integer)):
        n = int(subtypes)
        if n < 1:
            raise InputError(f"--holdout-subtypes must be 1 or more, got {n}")
        held, single = [], []
        for c in sorted(set(cls)):
            names = sorted(set(sub[cls == c]))
            if len(names) < 2:
                single.append(c)
                continue
            held += [
                (c, s)
                for s in _pick(
                    (seed, f"class:{c}", "holdout-subtypes", n), names, min(n, len(names) - 1)
                )
            ]
        if single:
            log.info(
                "%d class(es) with one subtype keep it in training: %s",
                len(single),
                _choices(single, 6),
            )
        label = f"subtypes:{n}-per-class"
    else:
        wanted = [str(s).strip() for s in subtypes if str(s).strip()]
        unknown = [s for s in wanted if s not in set(sub)]
        if unknown:
            raise InputError(f"no subtype {unknown[0]!r}; choose from {_choices(sub)}")
        held = sorted({(c, s) for c, s in zip(cls, sub) if s in set(wanted)})
        label = "subtypes:" + ",".join(sorted(set(wanted)))
    keys = set(held)
    mask = np.array([(c, s) in keys for c, s in zip(cls, sub)], bool)
    return _finish(
        meta, "subtypes", label, mask, [f"{c}/{s}" for c, s in held], seed, test_fraction
    )


def split_versions(
    meta: pd.DataFrame, *, seed: int = 0, test_fraction: float = 0.1
) -> HoldoutSplit:
    """The control: of each (class, subtype, style) icon with several versions, hold one out."""
    _need(meta, "version", "the version hold-out")
    _need(meta, "subtype", "the version hold-out")
    style = meta["style"].astype(str) if "style" in meta.columns else pd.Series([""] * len(meta))
    key = list(zip(meta["class"].astype(str), meta["subtype"].astype(str), style))
    ver = meta["version"].astype(str).to_numpy()
    by_icon: dict[tuple, set] = {}
    for k, v in zip(key, ver):
        by_icon.setdefault(k, set()).add(v)
    several = {k: sorted(v) for k, v in by_icon.items() if len(v) > 1}
    if not several:
        raise InputError(
            "no icon has several versions, so no version can be held out",
            hint="the control needs a version column with 2+ values per icon",
        )
    held_key = {
        k: _pick((seed, "/".join(k), "holdout-version", 1), v, 1)[0] for k, v in several.items()
    }
    mask = np.array([held_key.get(k) == v for k, v in zip(key, ver)], bool)
    return _finish(
        meta,
        "versions",
        "versions:one-per-icon",
        mask,
        [f"{'/'.join(k)}@{v}" for k, v in held_key.items()],
        seed,
        test_fraction,
    )


# ---------------------------------------------------------------------------- training
@dataclass(frozen=True)
class HoldoutConfig:
    """How the network is trained from scratch (all of it is in the run's identity).

    Attributes:
        arch: ``small-cnn``, ``resnext``, ``shake-resnext``, ``densenet``, ``msdnet`` (see
            :mod:`robustlab.workflows.train.networks`) or ``timm:NAME`` (a ResNet gets a 3x3 stride-1
            stem, no max-pool, as CIFAR-sized ResNets have).
        width: Base width of the network: the small CNN's first-stage channels, and the
            size knob of the others (:func:`robustlab.workflows.train.networks.network_params`).
        image_size: Square input side.
        epochs, batch_size, lr, weight_decay: AdamW with a cosine schedule.
        augment: Random shifts of up to 2 px and horizontal flips (ICONS-50's training used
            crops and flips too).
        seed: Seed of initialisation, batch order and augmentation.
    """

    arch: str = "small-cnn"
    width: int = 16
    image_size: int = 32
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 5e-4
    augment: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.epochs < 1 or self.batch_size < 1 or self.width < 1:
            raise InputError("epochs, batch size and width must be at least 1")
        if self.image_size < 16:
            raise InputError(f"image size must be 16 or more, got {self.image_size}")
        if not self.lr > 0:
            raise InputError(f"learning rate must be positive, got {self.lr}")
        from robustlab.workflows.train.networks import OWN_ARCHS

        if self.arch not in OWN_ARCHS and not self.arch.startswith("timm:"):
            raise InputError(
                f"--arch must be {', '.join(OWN_ARCHS)} or timm:NAME, not {self.arch!r}"
            )

    @property
    def network(self) -> dict[str, Any] | None:
        """The architecture's hyper-parameters (None for small-cnn and timm models, whose
        ``width``/name say it all and whose run ids predate this field)."""
        from robustlab.workflows.train.networks import PARAM_ARCHS, network_params

        if self.arch not in PARAM_ARCHS:
            return None
        return {"arch": self.arch, **network_params(self.arch, self.width)}


def build_network(config: HoldoutConfig, n_classes: int):
    """The untrained network (the weights' seed is set by the caller; Shake-Shake's
    coefficient generator is seeded here from ``config.seed``)."""
    from torch import nn

    from robustlab.workflows.train import networks

    if config.arch in networks.OWN_ARCHS:
        seed = derive_seed(config.seed, "network", "shake-shake", config.arch) % 2**63
        return networks.build(config.arch, n_classes, config.width, seed=seed)
    import timm

    name = config.arch.split(":", 1)[1]
    if not timm.models.is_model(name):
        raise InputError(f"unknown timm model {name!r} (see timm.list_models())")
    net = timm.create_model(name, pretrained=False, num_classes=n_classes)
    if hasattr(net, "conv1") and hasattr(net, "maxpool") and hasattr(net, "bn1"):
        net.conv1 = nn.Conv2d(3, net.bn1.num_features, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    return net


def _to_tensor(images: np.ndarray):
    import torch

    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
    return (x - MEAN) / STD


def _augment(x, gen):
    import torch

    n, _, h, w = x.shape
    pad = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
    dx = torch.randint(0, 5, (n,), generator=gen)
    dy = torch.randint(0, 5, (n,), generator=gen)
    out = torch.stack([pad[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


def train_network(
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    config: HoldoutConfig,
    progress: Callable[[int, float], None] | None = None,
):
    """Train from scratch; returns (network in eval mode, mean loss per epoch)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(config.seed))
        net = build_network(config, n_classes)
        gen = torch.Generator().manual_seed(int(config.seed))
        x_all, y_all = _to_tensor(images), torch.as_tensor(labels, dtype=torch.long)
        steps = config.epochs * math.ceil(len(x_all) / config.batch_size)
        opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, max_lr=config.lr, total_steps=steps, pct_start=0.15
        )
        losses = []
        net.train()
        for epoch in range(config.epochs):
            order = torch.randperm(len(x_all), generator=gen)
            total = 0.0
            for k in range(0, len(order), config.batch_size):
                idx = order[k : k + config.batch_size]
                x = x_all[idx]
                if config.augment:
                    x = _augment(x, gen)
                loss = torch.nn.functional.cross_entropy(net(x), y_all[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            losses.append(total / len(x_all))
            if progress:
                progress(epoch + 1, losses[-1])
    net.eval()
    return net, losses


def predict(net, images: np.ndarray, batch: int = 256) -> np.ndarray:
    """Softmax probabilities, N x classes."""
    import torch

    out = []
    with torch.no_grad():
        for k in range(0, len(images), batch):
            out.append(torch.softmax(net(_to_tensor(images[k : k + batch])), 1).numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


# ---------------------------------------------------------------------------- runs
@dataclass
class HoldoutResult:
    """One protocol's run.

    Attributes:
        run_id: The stored run.
        split: The :class:`HoldoutSplit`.
        seen_top1, held_top1: Accuracy on the in-distribution and the held-out test.
        n_seen, n_held: Their sizes.
        reused: The run was already stored (nothing was trained).
        checkpoint: The state dict (None when reused and not found).
        losses: Mean training loss per epoch.
    """

    run_id: str
    split: HoldoutSplit
    seen_top1: float
    held_top1: float
    n_seen: int
    n_held: int
    reused: bool = False
    checkpoint: Path | None = None
    losses: list[float] = field(default_factory=list)


def make_split(
    meta: pd.DataFrame,
    *,
    holdout: str | None = None,
    holdout_subtypes: int | Sequence[str] | None = None,
    versions: bool = False,
    seed: int = 0,
    test_fraction: float = 0.1,
) -> HoldoutSplit:
    """The split of exactly one protocol (``holdout``, ``holdout_subtypes`` or ``versions``)."""
    given = [holdout is not None, holdout_subtypes is not None, bool(versions)]
    if sum(given) != 1:
        raise InputError(
            "give exactly one of --holdout COLUMN=VALUE, --holdout-subtypes and --holdout-versions"
        )
    if not 0.0 < float(test_fraction) < 1.0:
        raise InputError(f"test fraction must be between 0 and 1, got {test_fraction}")
    if holdout is not None:
        return split_column(meta, holdout, seed=seed, test_fraction=test_fraction)
    if holdout_subtypes is not None:
        return split_subtypes(meta, holdout_subtypes, seed=seed, test_fraction=test_fraction)
    return split_versions(meta, seed=seed, test_fraction=test_fraction)


def run_holdout(
    data: LabelledSet,
    split: HoldoutSplit,
    config: HoldoutConfig = HoldoutConfig(),
    *,
    db="robustlab.duckdb",
    out="checkpoints",
    progress: Callable[[int, float], None] | None = None,
) -> HoldoutResult:
    """Train on ``split.train``, test on ``split.seen`` and ``split.held``, store the run.

    A run with the same identity (data, split, config) already finished is reused.
    """
    import torch

    from robustlab.models.base import weights_hash
    from robustlab.run.identity import RecordStyle, make_record
    from robustlab.run.identity import run_id as hash_id
    from robustlab.store import CLEAN_LEVEL, CLEAN_SHIFT, Store

    meta = data.meta
    classes = data.classes
    index = {c: i for i, c in enumerate(classes)}
    labels = meta["class"].map(index).to_numpy()
    identity = {
        "suite": SUITE,
        "version": SUITE_VERSION,
        "data": data.fingerprint,
        "split": split.fingerprint(meta),
        "split_spec": split.describe(),
        "config": asdict(config),
    }
    if config.network is not None:  # only the new architectures: old run ids stay as they were
        identity["network"] = config.network
    rid = hash_id(identity)
    store = Store(db)
    if store.exists():
        prev = store.get_run(rid)
        if prev is not None and prev.get("status") == "finished":
            return _result_from_store(store, rid, split)
    size = config.image_size
    train_rows = list(split.train)
    log.info(
        "%s: training %s on %d images, testing on %d seen and %d held-out images",
        split.label,
        config.arch,
        len(train_rows),
        len(split.seen),
        len(split.held),
    )
    started, cpu_started = time.perf_counter(), time.process_time()
    load_before = _loadavg()
    net, losses = train_network(
        data.load(train_rows, size), labels[train_rows], len(classes), config, progress
    )
    timing = {
        "train_seconds": round(time.perf_counter() - started, 1),
        "train_cpu_seconds": round(time.process_time() - cpu_started, 1),
        "loadavg": [load_before, _loadavg()],
        "parameters": sum(int(t.numel()) for t in net.parameters()),
    }
    ckpt = Path(out) / f"holdout-{config.arch.replace(':', '_')}-{rid}.pth"
    with environment_errors(f"cannot write checkpoint {ckpt}"):
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        tmp = ckpt.with_name(f".{ckpt.name}.tmp")
        torch.save({k: v.detach().cpu() for k, v in net.state_dict().items()}, tmp)
        tmp.replace(ckpt)
    record = make_record(
        identity,
        data_root=data.root,
        n_samples=0,  # counted when the run finishes
        style=RecordStyle(resolve_root=False),  # holdout runs store the folder as read
        model_spec=f"holdout:{config.arch}",
        weights_hash=weights_hash(ckpt),
        suite_version=SUITE_VERSION,
        data_fingerprint=data.fingerprint,
        label_space=None,
        preprocessing={
            "input_size": size,
            "mean": [MEAN] * 3,
            "std": [STD] * 3,
            "resize": "bicubic",
        },
        seed=int(split.seed),
        config={
            "holdout": split.describe(),
            "data_layout": data.name,
            "classes": classes,
            "train": {
                **asdict(config),
                **({"network": config.network} if config.network is not None else {}),
                **timing,
                "losses": losses,
                "checkpoint": str(ckpt),
            },
            "cells": [[CLEAN_SHIFT, CLEAN_LEVEL], [HOLDOUT_SHIFT, split.label]],
        },
    )
    store.start_run(record)
    accs = {}
    for shift, level, rows in (
        (CLEAN_SHIFT, CLEAN_LEVEL, split.seen),
        (HOLDOUT_SHIFT, split.label, split.held),
    ):
        rows = list(rows)
        if not rows:
            continue
        probs = predict(net, data.load(rows, size))
        k = min(5, probs.shape[1])
        top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
        y = labels[rows]
        correct = top[:, 0] == y
        store.write_predictions(
            rid,
            {
                "sample_id": meta["id"].to_numpy()[rows].tolist(),
                "shift": [shift] * len(rows),
                "level": [level] * len(rows),
                "label": y.tolist(),
                "class_name": meta["class"].to_numpy()[rows].tolist(),
                "top5_ids": top,
                "top5_probs": np.take_along_axis(probs, top, 1),
                "correct": correct,
                "correct5": (top == y[:, None]).any(1),
            },
        )
        accs[shift] = float(correct.mean())
    store.finish_run(
        rid, status="finished", n_samples=len(split.seen) + len(split.held), skipped=[]
    )
    return HoldoutResult(
        rid,
        split,
        accs.get(CLEAN_SHIFT, float("nan")),
        accs.get(HOLDOUT_SHIFT, float("nan")),
        len(split.seen),
        len(split.held),
        False,
        ckpt,
        losses,
    )


def _loadavg() -> float | None:
    """The 1-minute load average (Linux), recorded beside training times."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _result_from_store(store, rid: str, split: HoldoutSplit) -> HoldoutResult:
    from robustlab.store import CLEAN_SHIFT

    preds = store.predictions([rid])
    acc = preds.groupby("shift")["correct"].agg(["mean", "size"])

    def get(shift, col):
        return float(acc.loc[shift, col]) if shift in acc.index else float("nan")

    rec = store.get_run(rid)
    train = (rec.get("config") or {}).get("train", {})
    ckpt = Path(train["checkpoint"]) if train.get("checkpoint") else None
    return HoldoutResult(
        rid,
        split,
        get(CLEAN_SHIFT, "mean"),
        get(HOLDOUT_SHIFT, "mean"),
        int(get(CLEAN_SHIFT, "size") if CLEAN_SHIFT in acc.index else 0),
        int(get(HOLDOUT_SHIFT, "size") if HOLDOUT_SHIFT in acc.index else 0),
        True,
        ckpt,
        list(train.get("losses", [])),
    )


def holdout_table(runs: pd.DataFrame, preds: pd.DataFrame) -> pd.DataFrame:
    """One row per surface-variation run: protocol, what was held out, sizes and accuracies.

    Args:
        runs: ``Store.runs()`` rows (others than surface-variation runs are ignored).
        preds: Their predictions (``run_id``, ``shift``, ``correct``).
    """
    from robustlab.store import CLEAN_SHIFT

    rows = []
    for r in runs.itertuples():
        cfg = r.config if isinstance(r.config, dict) else json.loads(r.config or "{}")
        if r.suite != SUITE or "holdout" not in cfg:
            continue
        g = preds[preds["run_id"] == r.run_id]
        seen, held = g[g["shift"] == CLEAN_SHIFT], g[g["shift"] == HOLDOUT_SHIFT]
        h = cfg["holdout"]
        rows.append(
            {
                "run_id": r.run_id,
                "model": r.model_spec,
                "protocol": h.get("protocol"),
                "held_out": h.get("held_out"),
                "seed": h.get("seed"),
                "n_train": h.get("n_train"),
                "n_seen": len(seen),
                "seen_top1": float(seen["correct"].mean()) if len(seen) else np.nan,
                "n_held": len(held),
                "held_top1": float(held["correct"].mean()) if len(held) else np.nan,
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "run_id",
            "model",
            "protocol",
            "held_out",
            "seed",
            "n_train",
            "n_seen",
            "seen_top1",
            "n_held",
            "held_top1",
        ],
    )


__all__ = [
    "HOLDOUT_SHIFT",
    "PROTOCOLS",
    "SUITE",
    "HoldoutConfig",
    "HoldoutResult",
    "HoldoutSplit",
    "LabelledSet",
    "build_network",
    "holdout_table",
    "make_split",
    "predict",
    "read_cifar100",
    "read_folder",
    "read_icons50",
    "read_set",
    "run_holdout",
    "split_column",
    "split_subtypes",
    "split_versions",
    "train_network",
]
