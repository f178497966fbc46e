"""BG-gap and the XIMAGENET-12 robustness score."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from robustlab.metrics.scenes import bg_gap, robustness_score, scenario_accuracies


def _preds(rows):
    return pd.DataFrame(rows, columns=["run_id", "sample_id", "shift", "level", "correct"])


def test_bg_gap_per_run_and_paired():
    rows = []
    for i in range(10):
        rows.append(("r1", f"s{i}", "mixed_same", "default", i < 9))  # 0.9
        rows.append(("r1", f"s{i}", "mixed_rand", "default", i < 6))  # 0.6
        rows.append(("r2", f"s{i}", "mixed_same", "default", i < 5))
        rows.append(("r2", f"s{i}", "mixed_rand", "default", i < 5))
    rows.append(("r1", "extra", "mixed_same", "default", False))  # no mixed_rand partner
    out = bg_gap(_preds(rows)).set_index("run_id")
    assert out.loc["r1", "bg_gap"] == pytest.approx(0.3) and out.loc["r1", "n"] == 10
    assert out.loc["r2", "bg_gap"] == pytest.approx(0.0)
    unpaired = bg_gap(_preds(rows), paired=False).set_index("run_id")
    assert unpaired.loc["r1", "acc_same"] == pytest.approx(9 / 11)
    # the ImageNet-9 reference ResNet-50: 86.2 % - 78.9 % = 7.3 points
    ref = [("x", f"s{i}", "mixed_same", "default", i < 862) for i in range(1000)]
    ref += [("x", f"s{i}", "mixed_rand", "default", i < 789) for i in range(1000)]
    assert bg_gap(_preds(ref))["bg_gap"].iloc[0] == pytest.approx(0.073)


def test_bg_gap_errors():
    only_same = _preds([("r", "a", "mixed_same", "default", True)])
    with pytest.raises(ValueError, match="no paired predictions"):
        bg_gap(only_same)
    with pytest.raises(ValueError, match="lacks column"):
        bg_gap(only_same.drop(columns="sample_id"))


def test_robustness_score_complete():
    cross = {
        "blur_bg": 0.9097,
        "blur_obj": 0.8817,
        "color_grey": 0.9213,
        "random_bg": 0.2241,
        "segmented": 0.6855,
    }
    inner = {k: v + 0.05 for k, v in cross.items()}
    mu = 0.95
    r = robustness_score(mu, cross, inner)
    s2c = np.mean([(v - mu) ** 2 for v in cross.values()])
    s2i = np.mean([(v - mu) ** 2 for v in inner.values()])
    assert (
        r.complete and r.sigma2_cross == pytest.approx(s2c) and r.sigma2_inner == pytest.approx(s2i)
    )
    assert r.s_robust == pytest.approx(1 - s2c - s2i) and r.s_partial == r.s_robust
    # a model whose accuracy never moves scores exactly 1
    flat = robustness_score(0.8, dict.fromkeys(cross, 0.8), dict.fromkeys(cross, 0.8))
    assert flat.s_robust == 1.0


def test_robustness_score_partial():
    # EX2 (fine-tuning per scenario) not run yet: only the cross part exists
    r = robustness_score(0.9, {"a": 0.8, "b": 0.6}, scenarios=["a", "b", "c"])
    assert not r.complete and r.s_robust is None and r.sigma2_inner is None
    assert r.sigma2_cross == pytest.approx((0.01 + 0.09) / 2)
    assert r.s_partial == pytest.approx(1 - 0.05)
    assert r.missing_cross == ("c",) and r.missing_inner == ("a", "b", "c")
    with pytest.raises(ValueError, match="not a fraction"):
        robustness_score(90.0, {"a": 80.0})
    with pytest.raises(ValueError, match="outside the set"):
        robustness_score(0.9, {"z": 0.5}, scenarios=["a"])
    with pytest.raises(ValueError, match="at least one"):
        robustness_score(0.9, {})


def test_scenario_accuracies_from_predictions():
    rows = [("r", f"s{i}", "clean", "0", i < 8) for i in range(10)]
    rows += [("r", f"s{i}", "blur_bg", "default", i < 7) for i in range(10)]
    rows += [("r", f"s{i}", "random_bg", "add", i < 2) for i in range(10)]
    rows += [("r", f"s{i}", "random_bg", "paste", i < 4) for i in range(10)]
    mu, acc = scenario_accuracies(_preds(rows))
    assert mu == pytest.approx(0.8)
    assert acc == pytest.approx({"blur_bg": 0.7, "random_bg:add": 0.2, "random_bg:paste": 0.4})
    with pytest.raises(ValueError, match="clean"):
        scenario_accuracies(_preds(rows[10:]))
