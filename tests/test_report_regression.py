"""The report's regression: repeated runs of one measurement count once, classes by name."""

from __future__ import annotations

import numpy as np
import pandas as pd

from robustlab.report.gather import RunView, _distinct_runs, _readable_classes, _regression


def _run(rid, spec, fingerprint="fp1"):
    return RunView(rid, f"{spec} [{rid[:8]}]", {
        "model_spec": spec, "weights_hash": f"w-{spec}", "data_fingerprint": fingerprint,
        "label_space": "imagenet1k", "seed": 0})


def _preds(rng, run_ids):
    classes = [(0, "n01440764"), (134, "n02012849"), (517, "n03126707")]
    rows = []
    for rid in run_ids:
        for i in range(30):
            lab, key = classes[i % 3]
            for shift, level in (("clean", "0"), ("gaussian_noise", "3"), ("fog", "3")):
                p = 0.9 if shift == "clean" else 0.5
                rows.append({"run_id": rid, "sample_id": f"{key}/img{i}.JPEG", "shift": shift,
                             "level": level, "label": lab, "class_name": key,
                             "correct": bool(rng.random() < p), "correct5": True})
    return pd.DataFrame(rows)


def test_a_repeated_run_is_counted_once_and_classes_are_named():
    runs = [_run("aaaaaaaa1111", "lite0"), _run("bbbbbbbb2222", "lite0"),
            _run("cccccccc3333", "lite1"), _run("dddddddd4444", "lite0", fingerprint="fp2")]
    preds = _preds(np.random.default_rng(0), [r.run_id for r in runs])
    notes: list[str] = []
    keep = _distinct_runs(preds, runs, notes)
    # The second lite0 run on the same data and cells repeats the first; other data is new.
    assert keep == ["aaaaaaaa1111", "cccccccc3333", "dddddddd4444"]
    assert len(notes) == 1 and "bbbbbbbb repeats run aaaaaaaa" in notes[0]
    names = _readable_classes(preds, runs)
    assert set(names) == {"tench", "crane (n02012849)", "crane (n03126707)"}

    reg = _regression(preds, runs, notes=[])
    terms = set(reg.table["term"])
    assert not any("bbbbbbbb" in t for t in terms)
    assert {"Class[crane (n02012849)]", "Class[crane (n03126707)]"} & terms
    # One cell per (model, shift, class): 3 distinct runs x 3 shifts x 3 classes.
    assert int(reg.fit.nobs) == 27
