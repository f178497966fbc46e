"""Deterministic, class-stratified train/test splits.

EX1 and EX2 (REFERENCE.md section 2) compare models trained on different scenarios, so
every model must be trained and tested on the *same* images: the split depends only on
the sample ids, their classes, the fraction and the seed, never on order or machine. Each
class is shuffled by its own generator (the seed rule keyed by the class name), so adding a
class does not reshuffle the others.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from robustlab.errors import InputError
from robustlab.records.identity import data_fingerprint
from robustlab.seeding import derive_seed, make_rng


@dataclass(frozen=True)
class Split:
    """Sample ids of the train and test parts, plus how they were made.

    Attributes:
        train, test: Sorted sample ids.
        test_fraction: Share of each class sent to test (rounded up, at least one image
            when the class has two or more).
        seed: Split seed.
        fingerprint: Hash of both id lists (recorded with every run that uses the split).
    """

    train: tuple[str, ...]
    test: tuple[str, ...]
    test_fraction: float
    seed: int
    fingerprint: str

    def describe(self) -> dict:
        return {
            "test_fraction": self.test_fraction,
            "seed": self.seed,
            "n_train": len(self.train),
            "n_test": len(self.test),
            "fingerprint": self.fingerprint,
        }


def split_samples(
    samples: Sequence, labels: Sequence[int], *, test_fraction: float = 0.3, seed: int = 0
) -> Split:
    """Split samples per class: ``ceil(n * test_fraction)`` of each class go to test.

    A class with a single image goes to train (it cannot be on both sides); a split with an
    empty side is refused.

    Args:
        samples: Objects with an ``id`` (sorted or not; the result does not depend on order).
        labels: Class index per sample (the stratum).
        test_fraction: In (0, 1).
        seed: Split seed.

    Raises:
        ValueError: bad fraction, length mismatch, or a side of the split would be empty.
    """
    f = float(test_fraction)
    if not 0.0 < f < 1.0:
        raise InputError(f"test fraction must be between 0 and 1, got {test_fraction}")
    if len(samples) != len(labels):
        raise ValueError(f"{len(samples)} samples but {len(labels)} labels")
    by_class: dict[int, list[str]] = defaultdict(list)
    for s, lab in zip(samples, labels):
        by_class[int(lab)].append(s.id)
    train, test = [], []
    for lab in sorted(by_class):
        ids = sorted(by_class[lab])
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate sample ids in class {lab}")
        k = min(len(ids) - 1, math.ceil(len(ids) * f))
        order = make_rng(derive_seed(seed, f"class:{lab}", "split", f)).permutation(len(ids))
        test += [ids[i] for i in order[:k]]
        train += [ids[i] for i in order[k:]]
    if not train or not test:
        raise InputError(
            f"the split of {len(samples)} images has an empty side "
            f"({len(train)} train, {len(test)} test); give each class two or more images"
        )
    train, test = sorted(train), sorted(test)
    fp = data_fingerprint([("train", i) for i in train] + [("test", i) for i in test])
    return Split(tuple(train), tuple(test), f, int(seed), fp)


__all__ = ["Split", "split_samples"]
