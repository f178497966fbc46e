"""The bootstrap intervals are kept hand-written (an explicit generator, chunked memory, the
Binomial shortcut for accuracies) and checked against ``scipy.stats.bootstrap``'s percentile
method: on the same outcomes both estimate the same interval, so with enough resamples they
agree to the Monte Carlo error of the quantiles (about 0.005 here)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from robustlab.metrics.bootstrap import accuracy_ci, bootstrap_ci, drop_ci

N_RESAMPLES = 20_000
TOL = 0.01  # two Monte Carlo estimates of the 2.5 % and 97.5 % quantiles


def _scipy(data, statistic, *, paired=False, seed=1):
    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=N_RESAMPLES,
        confidence_level=0.95,
        method="percentile",
        paired=paired,
        vectorized=True,
        random_state=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@pytest.mark.parametrize("n,rate", [(60, 0.83), (400, 0.5), (400, 0.97)])
def test_accuracy_interval_is_scipys_percentile_bootstrap(n, rate):
    correct = np.random.default_rng(n).random(n) < rate
    ours = accuracy_ci(correct, np.random.default_rng(0), n_resamples=N_RESAMPLES)
    ref = _scipy((correct.astype(float),), lambda a, axis: np.mean(a, axis=axis))
    assert ours == pytest.approx(ref, abs=TOL), (ours, ref)
    # and the general resampler gives the same as the Binomial shortcut
    general = bootstrap_ci(correct.astype(float), np.random.default_rng(2), n_resamples=N_RESAMPLES)
    assert general == pytest.approx(ref, abs=TOL), (general, ref)


def test_paired_drop_interval_is_scipys_paired_bootstrap():
    rng = np.random.default_rng(7)
    clean = rng.random(300) < 0.85
    shifted = clean & (rng.random(300) < 0.7)  # errors mostly where clean was right: paired
    ours = drop_ci(clean, shifted, np.random.default_rng(0), n_resamples=N_RESAMPLES)
    ref = _scipy(
        (clean.astype(float), shifted.astype(float)),
        lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
        paired=True,
    )
    assert ours == pytest.approx(ref, abs=TOL), (ours, ref)
    # unpaired resampling would give a wider interval: the pairing is what is checked
    unpaired = _scipy(
        (clean.astype(float), shifted.astype(float)),
        lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
    )
    assert unpaired[1] - unpaired[0] > 1.2 * (ours[1] - ours[0])


def _cells(columns: dict[str, np.ndarray]):
    """A card's ImageCells with one column per entry (every image predicted in each)."""
    import pandas as pd

    from robustlab.workflows.card.numbers import ImageCells

    ic = ImageCells()
    for name, correct in columns.items():
        rows = pd.DataFrame(
            {"sample_id": [f"i{j}" for j in range(len(correct))], "cell": name, "correct": correct}
        )
        ic.add("", rows, lambda r: r["cell"])
    return ic


def test_card_intervals_are_scipys_percentile_bootstrap():
    """The card resamples all its columns at once: a paired difference of two columns
    and a single accuracy have scipy's percentile intervals."""
    rng = np.random.default_rng(7)
    clean = rng.random(300) < 0.85
    shifted = clean & (rng.random(300) < 0.7)
    ic = _cells({"clean": clean, "shifted": shifted})
    gen = np.random.default_rng(0)
    value, lo, hi = ic.estimate(["clean", "shifted"], lambda a: a[:, 0] - a[:, 1], gen, N_RESAMPLES)
    assert value == pytest.approx(clean.mean() - shifted.mean())
    ref = _scipy(
        (clean.astype(float), shifted.astype(float)),
        lambda a, b, axis: np.mean(a, axis=axis) - np.mean(b, axis=axis),
        paired=True,
    )
    assert (lo, hi) == pytest.approx(ref, abs=TOL), ((lo, hi), ref)
    _, lo1, hi1 = ic.estimate(["shifted"], lambda a: a[:, 0], gen, N_RESAMPLES)
    ref1 = _scipy((shifted.astype(float),), lambda a, axis: np.mean(a, axis=axis))
    assert (lo1, hi1) == pytest.approx(ref1, abs=TOL), ((lo1, hi1), ref1)


def test_card_numbers_share_their_resamples_even_after_a_column_is_added():
    rng = np.random.default_rng(3)
    ic = _cells({"a": rng.random(200) < 0.6, "b": rng.random(200) < 0.4})
    ic.estimate(["a"], lambda a: a[:, 0], np.random.default_rng(0), 500)
    pos, before = ic._resampled(["a", "b"], 500)
    ic.pair("a|b", "a", "b")  # a derived column: the resamples are remade from the same seed
    pos2, after = ic._resampled(["a", "b", "a|b"], 500)
    np.testing.assert_array_equal(after[:, pos2["a"]], before[:, pos["a"]])
    np.testing.assert_array_equal(after[:, pos2["a|b"]], before[:, pos["a"]])  # same images
    # every resample draws as many images as there are, with replacement
    assert np.isfinite(after).all() and not np.allclose(after[:, pos2["a"]], after[0, pos2["a"]])
