"""The card's numbers: each benchmark's own metric, a 95 % interval and the image count.

Every number is a function of per-image outcomes, so one interval rule serves all of
them: resample the images (a multinomial weight per image, the same weights for every
cell and for a baseline run on the same images, so paired quantities stay paired, and the
same resamples for every number of a benchmark), recompute the metric from the weighted
counts, take the percentile interval. mCE, the
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


def _factorize(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize`` of the values as str: codes, and the distinct values in the order
    first seen. A categorical is factorised on its integer codes (hashing 250,000 ids of
    a full run's shift as strings cost more than reading them)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes, first = pd.factorize(values.cat.codes.to_numpy())
        names = np.asarray([str(c) for c in values.cat.categories], dtype=object)
        return codes, names[first]
    return pd.factorize(values.astype(str).to_numpy())


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
    was predicted in that column).

    Every number of one ``ImageCells`` is bootstrapped over the same resamples of its
    images (:meth:`estimate`): the resampled accuracies of all its columns are computed
    once, in one pass of weight draws, and each number's statistic reads its columns from
    them. At ImageNet-C's full size (50,000 images, 76 cells, twice with a baseline) a
    pass of 2,000 resamples per number took 11 to 23 s, some 10 minutes per card; one pass
    for all of them takes seconds, and the card's numbers stay jointly consistent (a
    difference of two numbers is resampled as one).
    """

    def __init__(self) -> None:
        self.samples: list[str] = []
        self._row: dict[str, int] = {}
        self.columns: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._dense: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._seed: int | None = None
        self._boot: tuple[int, dict[str, int], np.ndarray] | None = None

    def add(self, prefix: str, rows: pd.DataFrame, key: Callable[[pd.DataFrame], pd.Series]):
        """Add one column per distinct ``key(rows)`` (rows: ``sample_id``, ``correct``).

        Images keep the order in which they were first seen; columns the order of their
        first row. Vectorised (factorised ids and names): 3.8 M rows of a full ImageNet-C
        run took 18 s through a Python loop and one mask per name.
        """
        codes, uniques = _factorize(rows["sample_id"])
        new = [u for u in uniques if u not in self._row]
        for u in new:
            self._row[u] = len(self.samples)
            self.samples.append(u)
        idx = np.array([self._row[u] for u in uniques], dtype=np.int64)[codes]
        name_codes, name_uniques = _factorize(key(rows))
        correct = rows["correct"].astype(bool).to_numpy()
        order = np.argsort(name_codes, kind="stable")
        bounds = np.searchsorted(name_codes[order], np.arange(len(name_uniques) + 1))
        for j, name in enumerate(name_uniques):
            sel = order[bounds[j] : bounds[j + 1]]
            self.columns[f"{prefix}{name}"] = (idx[sel], correct[sel])
        # more images or new columns: dense vectors and resamples are remade over all of them
        self._dense.clear()
        self._boot = None

    def pair(self, name: str, a: str, b: str) -> None:
        """Column ``name``: column ``a`` on the images that also have column ``b``."""
        ca, cb = self.matrix([a, b])
        both = (ca[1] > 0) & (cb[1] > 0)
        rows = np.nonzero(both)[0]
        self.columns[name] = (rows, ca[0][rows] > 0)

    def matrix(self, names: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Dense (correct, n) vectors over all images, one pair per column name (kept:
        every number asks for its columns twice, and many share them)."""
        out = []
        for name in names:
            hit = self._dense.get(name)
            if hit is None:
                idx, correct = self.columns[name]
                c, n = np.zeros(len(self.samples)), np.zeros(len(self.samples))
                np.add.at(c, idx, correct.astype(float))
                np.add.at(n, idx, 1.0)
                hit = self._dense[name] = (c, n)
            out.append(hit)
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
        the images as they are and its percentile bootstrap interval over images.

        The resamples are this object's (:meth:`_resampled`): ``rng`` is drawn from once,
        for their seed, by the first number that needs them."""
        cols = self.matrix(names)
        c = np.stack([x for x, _ in cols], axis=1)
        n = np.stack([y for _, y in cols], axis=1)
        value = float(stat(_acc(np.ones((1, len(self.samples))), c, n))[0])
        if not np.isfinite(value):
            return None, None, None
        if self._seed is None:
            self._seed = int(rng.integers(2**63))
        pos, acc = self._resampled(names, n_resamples)
        dist = stat(acc[:, [pos[k] for k in names]])
        a = (1.0 - confidence) / 2.0
        lo, hi = np.nanquantile(dist, [a, 1.0 - a])
        return value, float(lo), float(hi)

    def _resampled(self, names: list[str], n_resamples: int) -> tuple[dict[str, int], np.ndarray]:
        """Accuracy of every column under each of ``n_resamples`` resamples of the images
        (R x columns), made once and remade (with the same resamples, from the same seed)
        only when a column was added since.

        A resample draws ``m`` images with replacement: the weight of an image is how often
        it was drawn (multinomial with equal probabilities, drawn as counts of ``m``
        uniform picks), in chunks that bound the weight matrix's memory.
        """
        boot = self._boot
        if boot is not None and boot[0] == n_resamples and all(k in boot[1] for k in names):
            return boot[1], boot[2]
        order = list(self.columns)
        cols = self.matrix(order)
        m = len(self.samples)
        # counts times weights, summed: a column's sum is a whole number of at most m (the
        # weights of a resample add up to m), exact in float32 up to 2**24, so the products
        # run at float32's speed and give float64's sums
        exact = np.dtype(np.float32 if m <= 2**24 else np.float64)
        cn: np.ndarray = np.stack([x for x, _ in cols] + [y for _, y in cols], axis=1).astype(exact)
        k = len(order)
        gen = np.random.default_rng(self._seed)
        chunk, done, parts = max(1, 2_000_000 // max(m, 1)), 0, []
        while done < n_resamples:
            size = min(chunk, n_resamples - done)
            picks = gen.integers(0, m, size=(size, m)) + m * np.arange(size)[:, None]
            w: np.ndarray = np.bincount(picks.ravel(), minlength=size * m)
            sums = (w.reshape(size, m).astype(exact) @ cn).astype(np.float64)
            with np.errstate(invalid="ignore", divide="ignore"):
                parts.append(sums[:, :k] / sums[:, k:])
            done += size
        pos = {k: i for i, k in enumerate(order)}
        self._boot = (n_resamples, pos, np.concatenate(parts))
        return pos, self._boot[2]


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
