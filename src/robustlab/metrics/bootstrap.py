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


def accuracy_ci(
    correct, rng: np.random.Generator, *, n_resamples: int = 2000, confidence: float = 0.95
) -> tuple[float, float]:
    """Bootstrap interval of a mean of 0/1 outcomes (accuracy).

    Resampling n Bernoulli outcomes with replacement and counting the successes is exactly
    a Binomial(n, k/n) draw, so this draws the counts directly: the same distribution as
    :func:`bootstrap_ci` with ``np.mean``, in O(n_resamples) time and memory.
    """
    _check(rng, n_resamples, confidence)
    c = np.asarray(correct, dtype=bool)
    n = c.size
    if n == 0:
        raise ValueError("cannot bootstrap an empty sample")
    counts = rng.binomial(n, c.sum() / n, size=int(n_resamples))
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
    rows = []
    for key, g in predictions.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        lo1, hi1 = accuracy_ci(
            g["correct"].to_numpy(), rng, n_resamples=n_resamples, confidence=confidence
        )
        lo5, hi5 = accuracy_ci(
            g["correct5"].to_numpy(), rng, n_resamples=n_resamples, confidence=confidence
        )
        rows.append((*key, lo1, hi1, lo5, hi5))
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
