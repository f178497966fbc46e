"""The surface-variation protocols' splits: hold out a column's value, some subtypes of
each class, or one version of each icon; the rest is the training pool, with a seeded,
class-stratified in-distribution test carved from it."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from robustlab.errors import InputError
from robustlab.seeding import check_seed, derive_seed, make_rng

log = logging.getLogger(__name__)

PROTOCOLS = ("column", "subtypes", "versions")


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
        from robustlab.records.identity import data_fingerprint

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
    check_seed(seed)  # the one seed rule (robustlab.seeding)
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
