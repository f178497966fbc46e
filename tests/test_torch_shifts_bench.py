"""The statistics of benchmarks/torch_shifts.py, the issue-11 fidelity check, on constructed
per-photo correctness: the paired standard error, the 95 % interval, the verdict against
+-1.5 points, the pooled line and the summary. The model run itself is the benchmark's."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "torch_shifts.py"


@pytest.fixture(scope="module")
def ts():
    spec = importlib.util.spec_from_file_location("torch_shifts_bench_under_test", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def outcomes(n: int, only_a: int, only_b: int, both: int):
    """Correctness of sides A and B on n photos: ``only_a`` photos right on A alone,
    ``only_b`` on B alone, ``both`` on both, the rest wrong on both."""
    a = np.zeros(n)
    b = np.zeros(n)
    a[:only_a] = 1
    b[only_a : only_a + only_b] = 1
    a[only_a + only_b : only_a + only_b + both] = 1
    b[only_a + only_b : only_a + only_b + both] = 1
    return a, b


def test_paired_difference_and_its_standard_error_match_the_closed_form(ts):
    a, b = outcomes(100, only_a=10, only_b=5, both=60)
    st = ts.paired_stats(a, b)
    assert st["error_a"] == pytest.approx(30.0)
    assert st["error_b"] == pytest.approx(35.0)
    assert st["diff"] == pytest.approx(5.0)  # error B - error A: B got 5 % more wrong
    # Paired binary outcomes: var(c_A - c_B) = p10 + p01 - (p10 - p01)^2, sample (n - 1).
    n, p10, p01 = 100, 0.10, 0.05
    se = 100 * math.sqrt((p10 + p01 - (p10 - p01) ** 2) / (n - 1))
    assert st["se"] == pytest.approx(se)
    assert st["lo"] == pytest.approx(5.0 - 1.959964 * se, abs=1e-5)
    assert st["hi"] == pytest.approx(5.0 + 1.959964 * se, abs=1e-5)
    assert st["flips"] == pytest.approx(15.0)
    assert st["verdict"] == "INCONCLUSIVE"  # [-2.6, +12.6]: 100 photos cannot decide
    swapped = ts.paired_stats(b, a)
    assert swapped["diff"] == pytest.approx(-5.0)
    assert swapped["se"] == pytest.approx(se)


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (-1.4, 1.4, "PASS"),
        (-1.5, 1.5, "PASS"),
        (1.6, 3.0, "FAIL"),
        (-3.0, -1.6, "FAIL"),
        (-1.0, 2.0, "INCONCLUSIVE"),
        (-2.0, 2.0, "INCONCLUSIVE"),
        (1.0, 1.6, "INCONCLUSIVE"),
    ],
)
def test_verdict_needs_the_whole_interval_inside_or_outside_the_bound(ts, lo, hi, expected):
    assert ts.verdict(lo, hi) == expected


def test_verdicts_from_per_photo_outcomes(ts):
    # 20 flips out of 2,000, balanced: difference 0, SE 0.22: within +-1.5.
    assert ts.paired_stats(*outcomes(2000, 10, 10, 1500))["verdict"] == "PASS"
    # 40 photos lost by B, none gained, of 500: +8 points, SE 1.2: a shown violation.
    st = ts.paired_stats(*outcomes(500, 40, 0, 300))
    assert st["diff"] == pytest.approx(8.0)
    assert st["verdict"] == "FAIL"
    # 25 lost and 15 gained of 500: +2 points, SE 1.26: 500 photos cannot decide.
    st = ts.paired_stats(*outcomes(500, 25, 15, 300))
    assert st["diff"] == pytest.approx(2.0)
    assert st["verdict"] == "INCONCLUSIVE"


def test_no_flip_is_not_certainty_on_few_photos(ts):
    """Identical outcomes give a zero sample SE; the rule of three bounds the flip rate."""
    few = ts.paired_stats(*outcomes(10, 0, 0, 7))
    assert (few["diff"], few["se"]) == (0.0, 0.0)
    assert few["verdict"] == "INCONCLUSIVE"
    many = ts.paired_stats(*outcomes(500, 0, 0, 400))
    assert many["hi"] == pytest.approx(0.6)
    assert many["verdict"] == "PASS"


def test_averaged_draws_and_bad_shapes(ts):
    st = ts.paired_stats([1.0, 0.5, 0.0, 1.0], [1.0, 1.0, 0.0, 0.5])
    assert st["diff"] == pytest.approx(0.0)
    assert st["flips"] == pytest.approx(25.0)
    with pytest.raises(ValueError, match="same length"):
        ts.paired_stats([1, 0], [1, 0, 1])


def test_the_standard_error_matches_the_spread_of_independent_draws(ts):
    """Two independent draws per photo of one source: the per-cell differences are pure
    noise, so their RMS over many cells must match the RMS of the paired SE. Photo
    difficulty varies strongly (most photos almost always right or wrong), so an unpaired
    formula would come out about twice too large and fail this."""
    rng = np.random.default_rng(11)
    diffs, ses = [], []
    for _ in range(400):
        p = rng.beta(0.3, 0.3, size=500)
        st = ts.paired_stats(rng.random(500) < p, rng.random(500) < p)
        diffs.append(st["diff"])
        ses.append(st["se"])
    rms_diff = math.sqrt(np.mean(np.square(diffs)))
    rms_se = math.sqrt(np.mean(np.square(ses)))
    assert rms_diff / rms_se == pytest.approx(1.0, abs=0.12)
    summary = ts.summary([{"diff": d, "se": s, "verdict": "PASS"} for d, s in zip(diffs, ses)])
    assert summary["rms_diff"] == pytest.approx(rms_diff)
    assert summary["rms_se"] == pytest.approx(rms_se)


def test_pooled_line_averages_levels_as_independent(ts):
    p = ts.pooled([1.0, 2.0, 3.0], [3.0, 4.0, 0.0])
    assert p["diff"] == pytest.approx(2.0)
    assert p["se"] == pytest.approx(5.0 / 3.0)
    assert p["verdict"] == "INCONCLUSIVE"
    assert ts.pooled([0.2, -0.2], [0.3, 0.4])["verdict"] == "PASS"
    assert ts.pooled([3.0, 4.0], [0.3, 0.4])["verdict"] == "FAIL"


def test_summary_counts_verdicts_and_point_misses_and_skips_unsplit_cells(ts):
    rows = [
        {"diff": 0.2, "se": 0.3, "verdict": "PASS"},
        {"diff": -1.8, "se": 1.0, "verdict": "INCONCLUSIVE"},
        {"diff": 4.0, "se": 1.0, "verdict": "FAIL"},
        {"corruption": "snow", "level": 1, "status": ts.NOT_SPLIT},
    ]
    s = ts.summary(rows)
    assert (s["PASS"], s["FAIL"], s["INCONCLUSIVE"], s["not_split"]) == (1, 1, 1, 1)
    assert s["cells"] == 3
    assert s["miss_point"] == 2
    assert s["worst"] == pytest.approx(4.0)
    assert s["mean_diff"] == pytest.approx(2.4 / 3)


def test_corruption_choice_draw_ids_and_unsplit_cells(ts):
    from robustlab.shifts.registry import get_shift, list_shifts

    random_ones = ts.select_corruptions("random")
    assert "gaussian_noise" in random_ones and "frost" in random_ones
    assert not any(get_shift(c).deterministic for c in random_ones)
    assert set(random_ones) < set(ts.select_corruptions("common"))
    assert ts.select_corruptions("fog,snow") == ["fog", "snow"]
    assert not ts.is_unsplit("contrast")  # deterministic: nothing to replay
    assert not ts.is_unsplit("spatter")  # no batched version: apply runs the exact shift
    split = [sh.name for sh in list_shifts() if get_shift(sh.name, batched=True).parts]
    assert "gaussian_noise" in split
    assert all(not ts.is_unsplit(c) for c in split)
    assert ts.draw_ids(["a.jpg"], 1) == [["a.jpg"]]
    assert ts.draw_ids(["a.jpg", "b.jpg"], 2) == [
        ["a.jpg/draw0", "b.jpg/draw0"],
        ["a.jpg/draw1", "b.jpg/draw1"],
    ]


def test_bad_arguments_are_one_line_errors(ts, capsys):
    with pytest.raises(SystemExit):
        ts.parse_args(["--compare", "null,exact"])
    assert "--compare takes null,matched,torch" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ts.parse_args(["--draws", "0"])
    assert ts.parse_args(["--compare", "null"]).compare == ["null"]


def test_torch_is_judged_against_the_mean_of_both_exact_draws(ts, tmp_path, capsys):
    # 4 photos: exact seed 0, exact seed 1, torch. Per photo, torch - mean(exact) is
    # -0.5, +0.5, 0, -1 (correctness), so the error difference is +25 points.
    seed0 = [1.0, 0.0, 1.0, 1.0]
    seed1 = [0.0, 1.0, 1.0, 1.0]
    torch_ = [0.0, 1.0, 1.0, 0.0]
    null_rows = [{"corruption": "fog", "level": 1, **ts.paired_stats(seed0, seed1)}]
    timing = {"mad": 0.0, "a_s": 0.002, "b_s": 0.003}
    null_rows[0].update(c_a=seed0, c_b=seed1, **timing)
    torch_rows = [{"corruption": "fog", "level": 1, **ts.paired_stats(seed0, torch_)}]
    torch_rows[0].update(c_a=seed0, c_b=torch_, **timing)
    unsplit = {"corruption": "snow", "level": 1, "status": "not split"}
    rows = ts.against_both_seeds(null_rows + [unsplit], torch_rows + [unsplit])
    assert len(rows) == 1
    d = 100 * np.array([0.5, -0.5, 0.0, 1.0])  # error_torch - error_ref per photo
    assert rows[0]["diff"] == pytest.approx(d.mean())
    assert rows[0]["se"] == pytest.approx(d.std(ddof=1) / 2)
    assert rows[0]["error_a"] == pytest.approx(100 - 100 * np.mean([0.5, 0.5, 1, 1]))
    # and a saved run prints it again from its JSON
    record = {
        "photos": 4,
        "clean_error": 0.0,
        "comparisons": {"null": {"rows": null_rows}, "torch": {"rows": torch_rows}},
    }
    saved = tmp_path / "run.json"
    saved.write_text(__import__("json").dumps(record))
    assert ts.main(["--from-json", str(saved)]) == 0
    assert "### torch-vs-both" in capsys.readouterr().out
