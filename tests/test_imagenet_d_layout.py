"""Evaluating ImageNet-D's published layout: <subset>/<class>/<file>."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robustlab.errors import InputError
from robustlab.workflows.evaluate import EvaluateRequest, make_plan


def _tree(root):
    rng = np.random.default_rng(0)
    for rel in ("background/alarm_clock/a.png", "texture/backpack/b.png", "material/t-shirt/c.png"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)).save(path)
    return root


def test_the_class_is_the_folder_inside_the_subset(tmp_path):
    root = _tree(tmp_path / "ImageNet-D")
    plan = make_plan(EvaluateRequest.build("lite0", root, label_space="imagenet-d", device="cpu"))
    space = plan.label_space
    got = {s.id: (s.class_name, space.classes[lab]) for s, lab in zip(plan.samples, plan.labels)}
    assert got == {
        "background/alarm_clock/a.png": ("alarm_clock", "alarm clock"),
        "material/t-shirt/c.png": ("t-shirt", "t-shirt"),
        "texture/backpack/b.png": ("backpack", "backpack"),
    }


def test_a_labels_csv_gives_the_class_not_the_folder(tmp_path):
    """A review's export relabels an image where it lies: the CSV's class is its label, and
    a CSV that changes a label is another run (labels are content)."""
    root = _tree(tmp_path / "ImageNet-D")
    agreed, relabelled = tmp_path / "agreed.csv", tmp_path / "final.csv"
    agreed.write_text(
        "file,class\nbackground/alarm_clock/a.png,alarm_clock\ntexture/backpack/b.png,backpack\n"
    )
    relabelled.write_text(agreed.read_text().replace("b.png,backpack", "b.png,banana"))
    plans = [
        make_plan(
            EvaluateRequest.build(
                "lite0", root, labels_csv=csv, label_space="imagenet-d", device="cpu"
            )
        )
        for csv in (agreed, relabelled)
    ]
    space = plans[1].label_space
    got = {s.id: space.classes[lab] for s, lab in zip(plans[1].samples, plans[1].labels)}
    assert got == {
        "background/alarm_clock/a.png": "alarm clock",
        "texture/backpack/b.png": "banana",
    }
    assert plans[0].record.run_id != plans[1].record.run_id


def test_other_label_spaces_still_read_the_first_folder(tmp_path):
    root = _tree(tmp_path / "ImageNet-D")
    with pytest.raises(InputError, match="'background' is not in label space"):
        make_plan(EvaluateRequest.build("lite0", root, label_space="imagenet1k", device="cpu"))


def test_the_layout_is_recognised_without_a_label_space(tmp_path):
    root = _tree(tmp_path / "ImageNet-D")
    plan = make_plan(EvaluateRequest.build("lite0", root, device="cpu"))
    assert plan.label_space.name == "imagenet-d"
    assert plan.record.config["published"]["layout"] == "imagenet-d"


def test_evaluate_and_report_per_subset(tmp_path):
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.report import build_report
    from robustlab.workflows.report.gather import gather
    from robustlab.store import Store

    root = _tree(tmp_path / "ImageNet-D")
    db = tmp_path / "r.duckdb"
    df = evaluate(
        "lite0", root, label_space="imagenet-d", device="cpu", db=db, workers=0, progress=False
    )
    rid = df.run_id
    preds = Store(db).predictions([rid]).set_index("sample_id")
    d = gather(db, run_ids=[rid], n_resamples=20)
    t = d.imagenet_d.set_index("subset")
    assert list(t.index) == ["background", "texture", "material", "all"]
    assert t.loc["background", "top1"] == float(
        preds.loc["background/alarm_clock/a.png", "correct"]
    )
    assert t.loc["all", "n"] == 3
    assert t.loc["all", "top1"] == pytest.approx(preds["correct"].mean())
    res = build_report(db, tmp_path / "report.html", run_ids=[rid], grid=False, n_resamples=20)
    assert "imagenet-d-subsets" in res.tables


def test_report_shows_mining_and_review_statistics(tmp_path):
    import pandas as pd

    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.report import build_report
    from robustlab.workflows.report.gather import gather
    from robustlab.store import Store
    from robustlab.store.mining import write_mining
    from robustlab.store.reviews import ReviewStore

    root = _tree(tmp_path / "ImageNet-D")
    db = tmp_path / "r.duckdb"
    rid = evaluate(
        "lite0", root, label_space="imagenet-d", device="cpu", db=db, workers=0, progress=False
    ).run_id
    store = Store(db)
    kept = pd.DataFrame(
        {
            "sample_id": ["texture/backpack/b.png"],
            "shift": ["clean"],
            "level": ["0"],
            "class_name": ["backpack"],
            "label": [1],
            "n_wrong": [3],
            "top1_ids": [[1, 2, 3]],
            "path": [None],
        }
    )
    write_mining(
        store,
        {
            "mining_id": "m" * 16,
            "data_root": str(root),
            "label_space": "imagenet-d",
            "surrogates": ["lite0", "lite1", "lite2"],
            "run_ids": [rid],
            "k": 3,
            "n": 3,
            "n_candidates": 3,
            "n_kept": 1,
            "out": None,
            "config": {},
        },
        kept,
    )
    reviews = ReviewStore(db)
    reviews.open(
        "set1", data_root=str(root), label_space="imagenet-d", predictions=None, n_images=3
    )
    for annotator, decisions in (
        ("ann", ["accept", "accept", "reject"]),
        ("bob", ["accept", "reject", "reject"]),
    ):
        for image, decision in zip(("a", "b", "c"), decisions):
            reviews.record("set1", image, annotator, decision, label="backpack")
    d = gather(db, run_ids=[rid], n_resamples=20)
    m = d.mining.iloc[0]
    assert (m["rule"], m["n_candidates"], m["n_kept"]) == ("3 of 3 wrong", 3, 1)
    assert m["kept"] == pytest.approx(1 / 3)
    r = d.reviews.set_index("review_set").loc["set1"]
    assert (r["images"], r["annotators"], r["accept"], r["reject"], r["kept"]) == (3, 2, 3, 3, 1)
    # Fleiss' kappa by hand: per-image agreement 1, 0, 1 (mean 2/3); P_e = 0.5^2 + 0.5^2.
    assert r["kappa"] == pytest.approx((2 / 3 - 0.5) / (1 - 0.5))
    res = build_report(db, tmp_path / "report.html", run_ids=[rid], grid=False, n_resamples=20)
    assert {"mining", "reviews"} <= set(res.tables)
