"""The report's regression: repeated runs of one measurement count once, classes by name."""

from __future__ import annotations

import numpy as np
import pytest
import pandas as pd

from robustlab.workflows.report.fits import FitData, _distinct_runs, _readable_classes, _regression
from robustlab.workflows.report.runs import RunView


def _run(rid, spec, fingerprint="fp1"):
    return RunView(
        rid,
        f"{spec} [{rid[:8]}]",
        {
            "model_spec": spec,
            "weights_hash": f"w-{spec}",
            "data_fingerprint": fingerprint,
            "label_space": "imagenet1k",
            "seed": 0,
        },
    )


def _preds(rng, run_ids):
    classes = [(0, "n01440764"), (134, "n02012849"), (517, "n03126707")]
    rows = []
    for rid in run_ids:
        for i in range(30):
            lab, key = classes[i % 3]
            for shift, level in (("clean", "0"), ("gaussian_noise", "3"), ("fog", "3")):
                p = 0.9 if shift == "clean" else 0.5
                rows.append(
                    {
                        "run_id": rid,
                        "sample_id": f"{key}/img{i}.JPEG",
                        "shift": shift,
                        "level": level,
                        "label": lab,
                        "class_name": key,
                        "correct": bool(rng.random() < p),
                        "correct5": True,
                    }
                )
    return pd.DataFrame(rows)


def test_a_repeated_run_is_counted_once_and_classes_are_named():
    runs = [
        _run("aaaaaaaa1111", "lite0"),
        _run("bbbbbbbb2222", "lite0"),
        _run("cccccccc3333", "lite1"),
        _run("dddddddd4444", "lite0", fingerprint="fp2"),
    ]
    preds = _preds(np.random.default_rng(0), [r.run_id for r in runs])
    notes: list[str] = []
    keep = _distinct_runs(FitData.from_predictions(preds).cellsets, runs, notes)
    # The second lite0 run on the same data and cells repeats the first; other data is new.
    assert keep == ["aaaaaaaa1111", "cccccccc3333", "dddddddd4444"]
    assert len(notes) == 1 and "bbbbbbbb repeats run aaaaaaaa" in notes[0]
    names = _readable_classes(preds, runs)
    assert set(names) == {"tench", "crane (n02012849)", "crane (n03126707)"}

    reg, logit = _regression(FitData.from_predictions(preds), runs, notes=[])
    terms = set(reg.table["term"])
    assert not any("bbbbbbbb" in t for t in terms)
    assert {"Class[crane (n02012849)]", "Class[crane (n03126707)]"} & terms
    # The Model factor is the checkpoint, not the run (issue 37): lite0's two distinct
    # runs (other data) are one level, so one cell per (model, shift, class) is
    # 2 models x 3 shifts x 3 classes, and the only Model term is lite1 against lite0.
    assert int(reg.fit.nobs) == 18
    assert {t for t in terms if t.startswith("Model[")} == {"Model[lite1]"}
    assert reg.reference["Model"] == "lite0"
    # The per-image logistic model uses every prediction of the distinct runs.
    assert int(logit.fit.nobs) == 3 * 30 * 3


def test_the_model_factor_is_the_checkpoint_not_the_run():
    """lite0 run on four suites is one model; two checkpoints under one spec are two
    (told apart by their weights hash); a defended or bf16 run is its own model."""
    from robustlab.workflows.report.fits import model_names

    runs = [_run(f"{c}{c}{c}{c}{c}{c}{c}{c}0000", "lite0") for c in "abcd"]
    other = _run("eeeeeeee0000", "timm:resnet50")
    mine = _run("ffffffff0000", "timm:resnet50")
    mine.record["weights_hash"] = "mine-finetuned"
    clahe = _run("99999999aaaa", "lite0")
    clahe.record["config"] = {"defence": {"preprocess": {"name": "clahe"}}}
    names = model_names([*runs, other, mine, clahe])
    assert {names[r.run_id] for r in runs} == {"lite0"}
    assert names["eeeeeeee0000"] != names["ffffffff0000"]
    assert names["ffffffff0000"] == "timm:resnet50 (mine-fin)"
    assert names["99999999aaaa"] == "lite0 +clahe"


def _clustered_frame(rng, n_images=120, image_sd=2.5):
    """Per-prediction rows: correct ~ logit(1 - 1.2 [fog] + u_image); Model and the image's
    class have no effect."""
    u = rng.normal(0, image_sd, n_images)
    rows = []
    for i in range(n_images):
        for model in ("lite0", "lite1"):
            for shift in ("clean", "fog", "gaussian_noise"):
                eta = 1.0 - (1.2 if shift == "fog" else 0.0) + u[i]
                rows.append(
                    {
                        "sample_id": f"img{i}",
                        "model": model,
                        "shift": shift,
                        "class_name": "abc"[i % 3],
                        "correct": bool(rng.random() < 1 / (1 + np.exp(-eta))),
                    }
                )
    return pd.DataFrame(rows)


def test_logit_matches_statsmodels_and_clusters_by_image():
    import statsmodels.formula.api as smf

    from robustlab.metrics.regression import logit_correctness

    df = _clustered_frame(np.random.default_rng(3))
    res = logit_correctness(
        df,
        {"Model": "model", "Shift": "shift", "Class": "class_name"},
        reference={"Model": "lite0", "Shift": "clean", "Class": "a"},
    )
    t = res.table.set_index("term")
    d = df.assign(y=df["correct"].astype(int), g=pd.factorize(df["sample_id"])[0])
    formula = (
        "y ~ C(model, Treatment('lite0')) + C(shift, Treatment('clean'))"
        " + C(class_name, Treatment('a'))"
    )
    ref = smf.logit(formula, d).fit(disp=0, cov_type="cluster", cov_kwds={"groups": d["g"]})
    naive = smf.logit(formula, d).fit(disp=0)
    fog = "C(shift, Treatment('clean'))[T.fog]"
    assert t.loc["Shift[fog]", "estimate"] == pytest.approx(ref.params[fog], rel=1e-6)
    assert t.loc["Shift[fog]", "std_error"] == pytest.approx(ref.bse[fog], rel=1e-6)
    assert t.loc["Shift[fog]", "std_error_naive"] == pytest.approx(naive.bse[fog], rel=1e-6)
    assert t.loc["Shift[fog]", "estimate"] < 0 and t.loc["Shift[fog]", "p"] < 0.01
    # The class is constant within an image: its naive error treats an image's six
    # predictions as six independent photos and comes out far too small.
    for term in ("Class[b]", "Class[c]"):
        assert t.loc[term, "std_error"] > 1.5 * t.loc[term, "std_error_naive"]
        assert t.loc[term, "p"] > t.loc[term, "p_naive"]


def test_logit_refuses_what_it_cannot_fit():
    from robustlab.metrics.regression import logit_correctness

    df = _clustered_frame(np.random.default_rng(4)).assign(correct=True)
    with pytest.raises(ValueError, match="nothing to explain"):
        logit_correctness(df, {"Shift": "shift"})


def test_logit_says_when_it_did_not_converge():
    from robustlab.metrics.regression import logit_correctness

    df = _clustered_frame(np.random.default_rng(5))
    df.loc[df["class_name"] == "c", "correct"] = True  # a level that is always right
    res = logit_correctness(df, {"Shift": "shift", "Class": "class_name"})
    assert res.table.attrs["converged"] is False
    ok = logit_correctness(_clustered_frame(np.random.default_rng(6)), {"Shift": "shift"})
    assert ok.table.attrs["converged"] is True


def _separated_frame(seed=0):
    """Four images per class, one class always right and one always wrong: the fit does not
    converge and the clustered covariance has negative variances (NaN errors)."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, cls in enumerate(("a", "b", "c", "h")):
        p = {"a": 1.0, "h": 0.0}.get(cls, 0.4)
        for rep in range(2):
            for model in ("m0", "m1", "m2"):
                for shift in ("clean", "fog", "noise", "blur"):
                    rows.append(
                        {
                            "sample_id": f"img{i}_{rep}",
                            "model": model,
                            "shift": shift,
                            "class_name": cls,
                            "correct": bool(rng.random() < p),
                        }
                    )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    "make, converged",
    [
        (lambda: _clustered_frame(np.random.default_rng(11), n_images=90), True),
        (_separated_frame, False),
    ],
)
def test_logit_fits_once_and_matches_the_two_fit_cluster_covariance(make, converged):
    """One fit plus the sandwich covariance gives what statsmodels' own cluster fit gives
    (same CRV1 small-sample correction G/(G-1) (N-1)/(N-K), normal-based inference), NaN
    where it has NaN, and no warning on the console."""
    import warnings

    import statsmodels.api as sm

    from robustlab.metrics.regression import design_matrix, logit_correctness

    df = make()
    factors = {"Model": "model", "Shift": "shift", "Class": "class_name"}
    fits = []
    real_logit = sm.Logit

    class CountingLogit(real_logit):
        def fit(self, *args, **kwargs):
            fits.append(kwargs.get("cov_type", "nonrobust"))
            return super().fit(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp, warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        mp.setattr(sm, "Logit", CountingLogit)
        res = logit_correctness(df, factors, alpha=0.1)
    assert fits == ["nonrobust"]

    X, _ = design_matrix(df, factors)
    y = df["correct"].astype(float).to_numpy()
    groups = pd.factorize(df["sample_id"])[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clustered = real_logit(y, X).fit(
            disp=0, maxiter=200, cov_type="cluster", cov_kwds={"groups": groups}
        )
        naive = real_logit(y, X).fit(disp=0, maxiter=200)
        ci = clustered.conf_int(0.1)
    t = res.table.set_index("term").loc[list(X.columns)]
    assert t["std_error"].isna().any() == (not converged)
    for col, want in (
        ("estimate", clustered.params),
        ("std_error", clustered.bse),
        ("z", clustered.tvalues),
        ("p", clustered.pvalues),
        ("ci_low", ci[0]),
        ("ci_high", ci[1]),
        ("std_error_naive", naive.bse),
        ("p_naive", naive.pvalues),
    ):
        np.testing.assert_allclose(
            t[col].to_numpy(), np.asarray(want), rtol=1e-10, equal_nan=True, err_msg=col
        )
    assert int(res.fit.nobs) == len(df) and res.table.attrs["converged"] is converged


def _shift_decides_frame():
    """Every clean and blurred image right, every noisy one wrong: the shift predicts each
    prediction exactly (statsmodels: perfect separation)."""
    return pd.DataFrame(
        {
            "sample_id": f"img{i}",
            "shift": shift,
            "class_name": "ab"[i % 2],
            "correct": shift != "noise",
        }
        for i in range(30)
        for shift in ("clean", "blur", "noise")
    )


def test_perfect_separation_is_a_counted_note_not_a_console_warning():
    import warnings

    from robustlab.metrics.regression import logit_correctness
    from robustlab.workflows.report.fits import separation_note

    df = _shift_decides_frame()
    runs = [_run("aaaaaaaa1111", "lite0")]
    preds = df.assign(run_id=runs[0].run_id, label=0, level="3", correct5=True)
    preds.loc[preds["shift"] == "clean", "level"] = "0"
    notes: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # statsmodels' raw warning would fail here
        _, logit = _regression(FitData.from_predictions(preds), runs, notes)
    assert logit.table.attrs["separated"] is True
    levels = ["Shift[blur]", "Shift[clean]", "Shift[noise]"]
    assert logit.table.attrs["constant_levels"] == levels
    assert separation_note(levels) in notes
    assert "3 level(s) always right or always wrong: Shift[blur]" in separation_note(levels)
    # an ordinary fit carries no such flag
    ok = logit_correctness(_clustered_frame(np.random.default_rng(6)), {"Shift": "shift"})
    assert ok.table.attrs["separated"] is False


def test_an_attribute_that_separates_is_noted_not_warned():
    import warnings

    from robustlab.metrics.attributes import fit_logit

    x = np.r_[np.arange(15.0), np.arange(15.0) + 100]  # right exactly when x >= 100
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fit_logit(x >= 100, x, np.arange(30) // 3)
    assert got["note"].startswith("perfect separation")


def test_r_squared_caption_says_why_a_constant_response_has_none():
    import warnings

    import pandas as pd

    from robustlab.metrics.regression import regress_accuracy
    from robustlab.workflows.report.analysis import r_squared_text

    data = pd.DataFrame({"err": [0.5] * 6, "bg": ["a", "b", "c"] * 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = r_squared_text(regress_accuracy(data, ["bg"], response="err").fit)
    assert text == "R^2 undefined (every cell has the same value)"
    varied = pd.DataFrame({"err": [0.1, 0.5, 0.9, 0.2, 0.4, 1.0], "bg": ["a", "b", "c"] * 2})
    assert r_squared_text(regress_accuracy(varied, ["bg"], response="err").fit).startswith(
        "R^2 = 0."
    )
