"""Bootstrap confidence intervals with an explicit random generator.

Percentile bootstrap: resample the rows with replacement ``n_resamples`` times, compute
the statistic on each resample and take the (1-c)/2 and (1+c)/2 quantiles. Resamples
are drawn in chunks so memory stays bounded for 50,000-image cells.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def _check(rng, n_resamples: int, confidence: float) -> None:
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator (e.g. np.random.default_rng(0))")
    if int(n_resamples) < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def bootstrap_distribution(
    values,
    rng: np.random.Generator,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 2000,
    chunk_elements: int = 4_000_000,
) -> np.ndarray:
    """The statistic on ``n_resamples`` row resamples of ``values``.

    Args:
        values: 1-D array, or 2-D (rows are resampled together, for paired statistics).
        rng: The generator every draw comes from.
        statistic: Function of one resampled array -> float.
        n_resamples: Number of resamples.
        chunk_elements: Index draws per chunk (bounds memory).
    """
    _check(rng, n_resamples, 0.5)
    x = np.asarray(values)
    n = len(x)
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    out = np.empty(int(n_resamples), dtype=np.float64)
    per_chunk = max(1, chunk_elements // n)
    done = 0
    while done < n_resamples:
        m = min(per_chunk, n_resamples - done)
        idx = rng.integers(0, n, size=(m, n))
        for j in range(m):
            out[done + j] = statistic(x[idx[j]])
        done += m
    return out


def bootstrap_ci(
    values,
    rng: np.random.Generator,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over the rows of ``values``."""
    _check(rng, n_resamples, confidence)
    dist = bootstrap_distribution(values, rng, statistic=statistic, n_resamples=n_resamples)
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(dist, [a, 1.0 - a])
    return float(lo), float(hi)


def ratio_ci(
    pairs,
    rng: np.random.Generator,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    chunk_elements: int = 4_000_000,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``sum(pairs[:, 0]) / sum(pairs[:, 1])`` over
    resampled rows: pooled accuracy with the images as the units (per image: right
    predictions, predictions).

    The same draws as :func:`bootstrap_ci` with that statistic (one ``rng.integers`` call
    per chunk of resamples), the sums taken over the whole chunk at once instead of one
    resample at a time in Python (50,000 images x 1,000 resamples: 1 s, not 12). Sums of
    integer counts are exact in float64, so for counts the interval is the same to the bit.
    """
    _check(rng, n_resamples, confidence)
    x = np.asarray(pairs, dtype=np.float64)
    n = len(x)
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    out = np.empty(int(n_resamples), dtype=np.float64)
    per_chunk = max(1, chunk_elements // n)
    done = 0
    while done < n_resamples:
        m = min(per_chunk, n_resamples - done)
        idx = rng.integers(0, n, size=(m, n))
        out[done : done + m] = x[idx, 0].sum(axis=1) / x[idx, 1].sum(axis=1)
        done += m
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(out, [a, 1.0 - a])
    return float(lo), float(hi)


def accuracy_ci(
    correct, rng: np.random.Generator, *, n_resamples: int = 2000, confidence: float = 0.95
) -> tuple[float, float]:
    """Bootstrap interval of a mean of 0/1 outcomes (accuracy).

    Resampling n Bernoulli outcomes with replacement and counting the successes is exactly
    a Binomial(n, k/n) draw, so this draws the counts directly: the same distribution as
    :func:`bootstrap_ci` with ``np.mean``, in O(n_resamples) time and memory.
    """
    c = np.asarray(correct, dtype=bool)
    return count_ci(c.size, int(c.sum()), rng, n_resamples=n_resamples, confidence=confidence)


def count_ci(
    n: int, k: int, rng: np.random.Generator, *, n_resamples: int = 2000, confidence: float = 0.95
) -> tuple[float, float]:
    """:func:`accuracy_ci` of ``k`` right out of ``n``: the interval needs only the counts,
    so a cell of 50,000 images never has to leave the database as rows."""
    _check(rng, n_resamples, confidence)
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    counts = rng.binomial(n, k / n, size=int(n_resamples))
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(counts / n, [a, 1.0 - a])
    return float(lo), float(hi)


def cell_intervals(
    predictions: pd.DataFrame,
    rng: np.random.Generator,
    *,
    by=("run_id", "shift", "level"),
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Bootstrap intervals of top-1 and top-5 accuracy for each group (cell).

    Groups are visited in sorted order so the result depends only on ``rng``'s state and
    the data, not on row order.
    """
    keys = [c for c in by if c in predictions.columns]
    counts = (
        predictions.assign(
            correct=predictions["correct"].astype(bool),
            correct5=predictions["correct5"].astype(bool),
        )
        .groupby(keys, sort=True)
        .agg(n=("correct", "size"), n_correct=("correct", "sum"), n_correct5=("correct5", "sum"))
        .reset_index()
    )
    return count_intervals(counts, rng, by=keys, n_resamples=n_resamples, confidence=confidence)


def count_intervals(
    counts: pd.DataFrame,
    rng: np.random.Generator,
    *,
    by=("run_id", "shift", "level"),
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """:func:`cell_intervals` from per-group counts (``n``, ``n_correct``, ``n_correct5``,
    e.g. :meth:`robustlab.store.Store.cell_table`'s): the same draws in the same (sorted)
    order, so the same intervals for the same seed."""
    keys = [c for c in by if c in counts.columns]
    rows = []
    for rec in counts.sort_values(keys, kind="stable").itertuples(index=False):
        n = int(rec.n)
        lo1, hi1 = count_ci(
            n, int(rec.n_correct), rng, n_resamples=n_resamples, confidence=confidence
        )
        lo5, hi5 = count_ci(
            n, int(rec.n_correct5), rng, n_resamples=n_resamples, confidence=confidence
        )
        rows.append((*(getattr(rec, k) for k in keys), lo1, hi1, lo5, hi5))
    return pd.DataFrame(rows, columns=[*keys, "top1_lo", "top1_hi", "top5_lo", "top5_hi"])


def drop_ci(
    clean_correct,
    shifted_correct,
    rng: np.random.Generator,
    *,
    n_resamples: int = 2000,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Paired bootstrap interval of the accuracy drop (clean minus shifted).

    Both arrays are aligned by sample (same images), and samples are resampled together so
    the interval accounts for the pairing.
    """
    a = np.asarray(clean_correct, dtype=np.float64)
    b = np.asarray(shifted_correct, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired arrays differ in length: {a.shape} vs {b.shape}")
    return bootstrap_ci(a - b, rng, n_resamples=n_resamples, confidence=confidence)
