"""``robustlab results --compare A B``: cell-by-cell difference of two runs with paired
bootstrap intervals, checked on prediction tables whose answer is known."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest

from robustlab.cli import main as cli
from robustlab.metrics.compare import ALL_SHIFTED, compare_runs, paired_diff_ci
from robustlab.store import Store
from robustlab.store.schema import RunRecord


def _preds(correct: dict[tuple[str, str], list[bool]], prefix: str = "img") -> pd.DataFrame:
    rows = [
        {"sample_id": f"{prefix}{i:03d}", "shift": s, "level": lv, "correct": c}
        for (s, lv), cs in correct.items()
        for i, c in enumerate(cs)
    ]
    return pd.DataFrame(rows)


def _naive_ci(d: np.ndarray, seed: int, n: int, conf: float = 0.95) -> tuple[float, float]:
    """The textbook paired bootstrap: resample image indices, average the differences."""
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, len(d), size=(n, len(d)))].mean(axis=1)
    return tuple(np.quantile(means, [(1 - conf) / 2, (1 + conf) / 2]))


def test_known_difference_and_interval_match_a_plain_bootstrap():
    # 200 images: A right on all, B wrong on the first 50 (diff -0.25) in the noise cell;
    # both right on clean.
    a = _preds({("clean", "0"): [True] * 200, ("noise", "3"): [True] * 200})
    b = _preds({("clean", "0"): [True] * 200, ("noise", "3"): [False] * 50 + [True] * 150})
    t = compare_runs(a, b, np.random.default_rng(0), n_resamples=4000)
    clean, noise, pooled = (t.iloc[i] for i in range(3))
    assert (clean["shift"], noise["shift"], pooled["shift"]) == ("clean", "noise", ALL_SHIFTED)
    assert clean["diff"] == 0 and clean["diff_lo"] == 0 and clean["diff_hi"] == 0
    assert noise["top1_a"] == 1.0 and noise["top1_b"] == 0.75 and noise["diff"] == -0.25
    d = np.array([-1] * 50 + [0] * 150)
    lo, hi = _naive_ci(d, 1, 4000)
    assert noise["diff_lo"] == pytest.approx(lo, abs=0.015)
    assert noise["diff_hi"] == pytest.approx(hi, abs=0.015)
    assert noise["diff_lo"] < -0.25 < noise["diff_hi"] < 0  # B is worse, and it shows
    assert pooled["diff"] == -0.25 and pooled["n_shared"] == 200


def test_pairing_narrows_the_interval_of_correlated_outcomes():
    """Both runs wrong on the same hard images: the accuracies are far from 1 but the paired
    difference is exactly zero, so its interval is a point."""
    hard = [i % 3 != 0 for i in range(300)]
    t = compare_runs(
        _preds({("blur", "1"): hard}),
        _preds({("blur", "1"): hard}),
        np.random.default_rng(0),
        n_resamples=500,
    )
    row = t.iloc[0]
    assert row["top1_a"] == pytest.approx(2 / 3) and (row["diff_lo"], row["diff_hi"]) == (0, 0)


def test_only_shared_images_are_compared_and_missing_cells_are_blank():
    a = _preds({("clean", "0"): [True, True, False, False], ("fog", "1"): [True, False]})
    b = _preds({("clean", "0"): [True, False, True], ("snow", "1"): [True]})
    t = compare_runs(a, b, np.random.default_rng(0), n_resamples=200).set_index("shift")
    assert t.loc["clean", ["n_a", "n_b", "n_shared"]].tolist() == [4, 3, 3]
    assert t.loc["clean", "top1_a"] == pytest.approx(2 / 3)  # img000..img002 only
    assert t.loc["clean", "diff"] == pytest.approx(0.0)
    assert t.loc["fog", "n_shared"] == 0 and np.isnan(t.loc["fog", "diff"])
    assert t.loc["snow", "n_a"] == 0 and t.loc["snow", "n_b"] == 1
    assert ALL_SHIFTED not in t.index  # no shared shifted prediction at all


def test_same_seed_same_intervals_and_bad_input():
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    d = np.array([1, 0, 0, -1, 1, 1, 0, 0, 1, 0])
    assert paired_diff_ci(d, rng_a) == paired_diff_ci(d, rng_b)
    with pytest.raises(ValueError, match="-1, 0 or 1"):
        paired_diff_ci([2, 0], rng_a)
    with pytest.raises(ValueError, match="empty"):
        paired_diff_ci([], rng_a)


def _store_run(store: Store, run_id: str, spec: str, preds: pd.DataFrame) -> None:
    store.start_run(
        RunRecord(run_id=run_id, model_spec=spec, suite="imagenet-c", data_fingerprint="same")
    )
    store.write_predictions(
        run_id,
        {
            "sample_id": list(preds["sample_id"]),
            "shift": list(preds["shift"]),
            "level": list(preds["level"]),
            "label": [1] * len(preds),
            "class_name": ["x"] * len(preds),
            "top5_ids": [[1, 2, 3, 4, 5]] * len(preds),
            "top5_probs": [[0.5, 0.2, 0.1, 0.1, 0.1]] * len(preds),
            "correct": list(preds["correct"]),
            "correct5": list(preds["correct"]),
        },
    )
    store.finish_run(run_id, status="finished")


def test_cli_compare_prints_the_table_and_refuses_unknown_runs(tmp_path, capsys):
    store = Store(tmp_path / "c.duckdb")
    a = _preds({("clean", "0"): [True] * 40, ("contrast", "1"): [True] * 20 + [False] * 20})
    b = _preds({("clean", "0"): [True] * 40, ("contrast", "1"): [True] * 30 + [False] * 10})
    _store_run(store, "aaaa1111", "modelA", a)
    _store_run(store, "bbbb2222", "modelB", b)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert (
            cli(
                [
                    "results",
                    "--db",
                    str(store.path),
                    "--compare",
                    "aaaa",
                    "bbbb",
                    "--format",
                    "csv",
                    "--resamples",
                    "500",
                    "--seed",
                    "3",
                ]
            )
            == 0
        )
    t = pd.read_csv(io.StringIO(out.getvalue())).set_index("shift")
    assert t.loc["contrast", "diff"] == pytest.approx(0.25)
    assert t.loc["contrast", "diff_lo"] > 0  # 10 images flipped to correct, none the other way
    assert "B = modelB" in err.getvalue() and "seed 3" in err.getvalue()
    assert cli(["results", "--db", str(store.path), "--compare", "aaaa", "zzzz"]) != 0
    msg = capsys.readouterr().err
    assert "no run 'zzzz'" in msg and "Traceback" not in msg
