"""The card's numbers: each benchmark's own metric, a 95 % interval and the image count.

Every number is a function of per-image outcomes, so one interval rule serves all of
them: resample the images (a multinomial weight per image, the same weights for every
cell and for a baseline run on the same images, so paired quantities stay paired),
recompute the metric from the weighted counts, take the percentile interval. mCE, the
robustness score and the BG-gap are ratios and differences of cell accuracies; a cell's
count over a few hundred images moves them by points, which the interval shows.

mCE against AlexNet (:func:`normaliser`) only when the run covers what AlexNet's errors
were measured on: the full ImageNet val set (50,000 images, 1,000 classes) in every one of
the 15 x 5 cells. Otherwise CE is normalised by a baseline run on the same images, or left
unnormalised, and the card says which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from robustlab.cells import Cell, level_key


@dataclass(frozen=True)
class Number:
    """One number of the card.

    Attributes:
        benchmark: Suite key (``imagenet-c``, ..., ``imagenet-d``).
        metric: Machine key (``mce``, ``clean_acc``, ``drop:obj_size``, ...), the same key
            as the published rows (:mod:`robustlab.metrics.reference`) where one exists.
        label: What a reader sees.
        value, lo, hi: The number and its interval (percent, points or a score: ``unit``);
            None when it cannot be computed (``note`` says why).
        n_images: Distinct images the number is computed from.
        unit: ``%``, ``points`` or ``score``.
        headline: One of the benchmark's headline numbers (else a detail).
        note: What the number is measured against, or why it is missing.
    """

    benchmark: str
    metric: str
    label: str
    value: float | None
    lo: float | None
    hi: float | None
    n_images: int
    unit: str = "%"
    headline: bool = False
    note: str = ""


class ImageCells:
    """Outcomes per image (rows) and column (a run's cell, or a derived pairing) of one or
    more runs, aligned on the image ids: ``correct`` counts and ``n`` (1 where the image
    was predicted in that column)."""

    def __init__(self) -> None:
        self.samples: list[str] = []
        self._row: dict[str, int] = {}
        self.columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, prefix: str, rows: pd.DataFrame, key: Callable[[pd.DataFrame], pd.Series]):
        """Add one column per distinct ``key(rows)`` (rows: ``sample_id``, ``correct``)."""
        for s in rows["sample_id"].astype(str):
            if s not in self._row:
                self._row[s] = len(self.samples)
                self.samples.append(s)
        names = key(rows).astype(str)
        idx = rows["sample_id"].astype(str).map(self._row).to_numpy()
        correct = rows["correct"].astype(bool).to_numpy()
        for name in dict.fromkeys(names):
            sel = (names == name).to_numpy()
            self.columns[f"{prefix}{name}"] = (idx[sel], correct[sel])

    def pair(self, name: str, a: str, b: str) -> None:
        """Column ``name``: column ``a`` on the images that also have column ``b``."""
        ca, cb = self.matrix([a, b])
        both = (ca[1] > 0) & (cb[1] > 0)
        rows = np.nonzero(both)[0]
        self.columns[name] = (rows, ca[0][rows] > 0)

    def matrix(self, names: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Dense (correct, n) vectors over all images, one pair per column name."""
        out = []
        for name in names:
            idx, correct = self.columns[name]
            c, n = np.zeros(len(self.samples)), np.zeros(len(self.samples))
            np.add.at(c, idx, correct.astype(float))
            np.add.at(n, idx, 1.0)
            out.append((c, n))
        return out

    def n_images(self, names: list[str]) -> int:
        cols = self.matrix(names)
        return int(np.count_nonzero(sum((n for _, n in cols), np.zeros(len(self.samples)))))

    def estimate(
        self,
        names: list[str],
        stat: Callable[[np.ndarray], np.ndarray],
        rng: np.random.Generator,
        n_resamples: int,
        confidence: float = 0.95,
    ) -> tuple[float | None, float | None, float | None]:
        """``stat`` of the columns' accuracies (an R x k matrix -> R values): the value on
        the images as they are and its percentile bootstrap interval over images."""
        cols = self.matrix(names)
        c = np.stack([x for x, _ in cols], axis=1)
        n = np.stack([y for _, y in cols], axis=1)
        value = float(stat(_acc(np.ones((1, len(self.samples))), c, n))[0])
        if not np.isfinite(value):
            return None, None, None
        m = len(self.samples)
        draws: list[np.ndarray] = []
        chunk, done = max(1, 2_000_000 // max(m, 1)), 0  # bounds the weight matrix's memory
        while done < n_resamples:
            size = min(chunk, n_resamples - done)
            w = rng.multinomial(m, np.full(m, 1.0 / m), size=size).astype(float)
            draws.append(stat(_acc(w, c, n)))
            done += size
        dist = np.concatenate(draws)
        a = (1.0 - confidence) / 2.0
        lo, hi = np.nanquantile(dist, [a, 1.0 - a])
        return value, float(lo), float(hi)


def _acc(w: np.ndarray, c: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Weighted accuracy per column (R x k); NaN where a column has no weighted image."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (w @ c) / (w @ n)


def normaliser(cells: pd.DataFrame, n_classes: int, baseline: str | None) -> tuple[str, str]:
    """How CE is normalised for this ImageNet-C run: ``("alexnet", why)``,
    ``("baseline", why)`` or ``("none", why)``.

    Args:
        cells: The run's cell table (``shift``, ``level``, ``n``), clean cell included.
        n_classes: Distinct labels among the run's images.
        baseline: The baseline model spec the card ran on the same images, if any.
    """
    from robustlab.metrics.mce import check_full_imagenet_val
    from robustlab.shifts.corruptions import list_corruptions

    from robustlab.errors import InputError

    common = list_corruptions("common")
    have = {(str(s), level_key(lv)) for s, lv in zip(cells["shift"], cells["level"])}
    wanted = [Cell(c, s) for c in common for s in range(1, 6)]
    missing = [cell.folder for cell in wanted if cell.stored not in have]
    why = ""
    if missing:
        why = (
            f"the run lacks {len(missing)} of the 75 corruption cells the AlexNet errors "
            f"cover (first: {missing[0]})"
        )
    else:
        try:
            check_full_imagenet_val(cells, n_classes)
        except InputError:
            n = int(cells["n"].max()) if len(cells) else 0
            why = (
                f"the run has {n:,} images over {n_classes:,} classes, not the full ImageNet "
                "val set (50,000 images over 1,000 classes in every cell) AlexNet's errors "
                "were measured on"
            )
    if not why:
        return "alexnet", "AlexNet's errors on the full ImageNet-C (the paper's mCE)"
    if baseline:
        return "baseline", f"normalised by {baseline} on the same images: {why}"
    return "none", f"unnormalised (mean top-1 error): {why}; pass --baseline MODEL for CE"
