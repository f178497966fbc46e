"""Segmentation runs in the results database, `robustlab segment`, and `results` beside them."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from conftest import make_masked_folder

from robustlab.metrics.segmentation import cell_scores
from robustlab.store import RunRecord, Store

SPEC = "torchvision:lraspp_mobilenet_v3_large"
SHIFTS = ["blur_bg", "segmented"]


@pytest.fixture(scope="module")
def masked_photos(samples_dir, tmp_path_factory):
    """2 real photos in class folders, each with an elliptic mask PNG (as in test_segmentation)."""
    return make_masked_folder(samples_dir, tmp_path_factory.mktemp("segstore"), 2, 0.05)


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """A random-weight lraspp state dict with 3 classes, saved like a user's checkpoint."""
    import torch
    import torchvision.models.segmentation as tvs

    torch.manual_seed(0)
    net = tvs.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3)
    path = tmp_path_factory.mktemp("w") / "lraspp.pth"
    torch.save(net.state_dict(), path)
    return path


@pytest.fixture(scope="module")
def model(weights):
    from robustlab.workflows.segment import load_segmentation_model

    return load_segmentation_model(SPEC, weights=weights, num_classes=3, device="cpu")


def test_cell_scores_by_hand():
    counts = pd.DataFrame(
        [
            {
                "run_id": "r",
                "shift": "blur_bg",
                "level": "default",
                "tp": 30,
                "fp": 10,
                "fn": 20,
                "tn": 40,
            },
            {"run_id": "r", "shift": "clean", "level": "0", "tp": 8, "fp": 2, "fn": 0, "tn": 90},
            {"run_id": "r", "shift": "clean", "level": "0", "tp": 2, "fp": 0, "fn": 8, "tn": 90},
        ]
    )
    out = cell_scores(counts)
    assert list(out["shift"]) == ["clean", "blur_bg"]  # clean first, as classification tables
    clean, blur = out.iloc[0], out.iloc[1]
    # clean summed: tp 10, fp 2, fn 8, tn 180 -> fg IoU 10/20, bg IoU 180/190, acc 190/200
    assert clean["n"] == 2
    assert clean["fg_iou"] == pytest.approx(0.5)
    assert clean["bg_iou"] == pytest.approx(180 / 190)
    assert clean["miou"] == pytest.approx((0.5 + 180 / 190) / 2)
    assert clean["pixel_acc"] == pytest.approx(0.95)
    assert clean["image_fg_iou"] == pytest.approx((0.8 + 0.2) / 2)
    # blur: fg 30/60, bg 40/70, acc 70/100
    assert blur["miou"] == pytest.approx((0.5 + 40 / 70) / 2)
    assert blur["pixel_acc"] == pytest.approx(0.7)
    assert cell_scores(counts.iloc[:0]).empty
    with pytest.raises(ValueError, match="lack"):
        cell_scores(pd.DataFrame({"shift": ["clean"], "level": ["0"], "tp": [1]}))


def test_store_rows_resume_and_match_the_evaluator(masked_photos, model, tmp_path):
    from robustlab.workflows.segment import evaluate_segmentation, segment_to_store

    data, masks = masked_photos
    db = tmp_path / "r.duckdb"
    res = segment_to_store(model, data, masks=masks, db=db, shifts=SHIFTS, seed=2, batch_size=4)
    store = Store(db)
    stored = store.segmentation_counts()
    assert len(stored) == 2 * 3 and res.record["n_written"] == 6 and not res.record["resumed"]
    assert (stored[["tp", "fp", "fn", "tn"]].sum(axis=1) == 224 * 224).all()
    run = store.get_run(res.record["run_id"])
    assert run["config"]["task"] == "segmentation" and run["status"] == "finished"
    assert run["model_spec"] == SPEC and run["weights_hash"] == model.weights_hash
    assert run["suite"] == "ximagenet12" and run["seed"] == 2 and run["n_samples"] == 2
    assert store.count() == 0  # nothing in predictions

    # rerun: same run id, nothing recomputed, nothing added
    again = segment_to_store(model, data, masks=masks, db=db, shifts=SHIFTS, seed=2)
    assert again.record["run_id"] == res.record["run_id"]
    assert again.record["resumed"] and again.record["n_written"] == 0
    assert len(store.segmentation_counts()) == 6

    # the stored counts and scores are the in-memory evaluator's
    ref = evaluate_segmentation(model, data, masks=masks, shifts=SHIFTS, seed=2)
    key = ["sample_id", "shift", "level"]
    merged = ref.counts.merge(stored, on=key, suffixes=("", "_db"))
    assert len(merged) == 6
    for c in ("tp", "fp", "fn", "tn"):
        assert (merged[c] == merged[c + "_db"]).all()
    ours = cell_scores(stored).set_index(["shift", "level"])
    theirs = ref.summary.set_index(["shift", "level"])
    assert (
        set(ours.index)
        == set(theirs.index)
        == {("clean", "0"), ("blur_bg", "default"), ("segmented", "default")}
    )
    cols = ["n", "pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou"]
    pd.testing.assert_frame_equal(
        ours.loc[theirs.index, cols].astype(float), theirs[cols].astype(float)
    )
    pd.testing.assert_frame_equal(
        again.summary.set_index(["shift", "level"]).loc[theirs.index, cols].astype(float),
        theirs[cols].astype(float),
    )

    # a different seed is a different run (different cells' pixels)
    other = segment_to_store(model, data, masks=masks, db=db, shifts=["blur_bg"], seed=3)
    assert other.record["run_id"] != res.record["run_id"] and other.record["n_written"] == 4


def test_random_weights_and_bad_rows_are_refused(masked_photos, tmp_path):
    from robustlab.workflows.segment import load_segmentation_model, segment_to_store

    data, masks = masked_photos
    rnd = load_segmentation_model(SPEC, weights="random", num_classes=3, device="cpu")
    with pytest.raises(ValueError, match="weights file"):
        segment_to_store(rnd, data, masks=masks, db=tmp_path / "x.duckdb")
    assert not (tmp_path / "x.duckdb").exists()
    store = Store(tmp_path / "y.duckdb")
    row = {
        "sample_id": ["a"],
        "shift": ["clean"],
        "level": ["0"],
        "class_name": [None],
        "tp": [1],
        "fp": [0],
        "fn": [0],
        "tn": [-1],
    }
    with pytest.raises(ValueError, match="non-negative"):
        store.write_segmentation("r", row)
    with pytest.raises(ValueError, match="lack"):
        store.write_segmentation("r", {"sample_id": ["a"]})
    row["tn"] = [3]
    assert store.write_segmentation("r", row) == 1
    row["tn"] = [5]
    store.write_segmentation("r", row)  # same key: ignored, first row kept
    assert store.segmentation_counts()["tn"].tolist() == [3]


def test_old_database_without_the_table_keeps_working(tmp_path):
    from robustlab.workflows.results import results_table, segmentation_table

    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    con.close()
    store = Store(db)
    _classifier_run(store)  # a write: creates the tables it lacks
    con = duckdb.connect(str(db))
    con.execute("DROP TABLE segmentation")  # as a database from before segmentation runs
    con.close()
    assert store.segmentation_counts().empty and store.segmentation_done_keys("r") == set()
    table, notes = results_table(store)
    assert len(table) == 1 and not notes
    seg, _ = segmentation_table(store)
    assert seg.empty
    Store(db).write_segmentation(
        "s",
        {
            "sample_id": ["a"],
            "shift": ["clean"],
            "level": ["0"],
            "class_name": ["c"],
            "tp": [1],
            "fp": [0],
            "fn": [0],
            "tn": [0],
        },
    )
    assert len(Store(db).segmentation_counts()) == 1
    # a fresh Store whose first call on an existing file is a batch write (regression:
    # the schema check left a result open that blocked DuckDB's register())
    Store(db).write_predictions(
        "c1",
        {
            "sample_id": ["z"],
            "shift": ["clean"],
            "level": ["0"],
            "label": [1],
            "class_name": ["x"],
            "top5_ids": [[1, 0, 3, 4, 5]],
            "top5_probs": [[0.5, 0.2, 0.1, 0.1, 0.1]],
            "correct": [True],
            "correct5": [True],
        },
    )
    assert Store(db).count("c1") == 3


def _classifier_run(store):
    store.start_run(RunRecord(run_id="c1", model_spec="lite0", suite=None))
    store.write_predictions(
        "c1",
        {
            "sample_id": ["a", "b"],
            "shift": ["clean", "clean"],
            "level": ["0", "0"],
            "label": [1, 2],
            "class_name": ["x", "y"],
            "top5_ids": [[1, 0, 3, 4, 5], [0, 2, 3, 4, 5]],
            "top5_probs": [[0.5, 0.2, 0.1, 0.1, 0.1]] * 2,
            "correct": [True, False],
            "correct5": [True, True],
        },
    )
    store.finish_run("c1", status="finished")


def test_cli_segment_then_results(masked_photos, weights, tmp_path, capsys):
    from robustlab.cli import main

    data, masks = masked_photos
    db = tmp_path / "cli.duckdb"
    argv = [
        "segment",
        SPEC,
        "--weights",
        str(weights),
        "--data",
        str(data),
        "--masks",
        str(masks),
        "--db",
        str(db),
        "--num-classes",
        "3",
        "--shift",
        "segmented",
    ]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    lines = out.strip().splitlines()
    assert "miou %" in lines[0] and "pixel_acc %" in lines[0]
    assert [ln.split()[2] for ln in lines[1:]] == ["clean", "segmented"]
    assert "4 new rows" in err
    store = Store(db)
    counts = store.segmentation_counts()
    assert len(counts) == 4
    # the printed mIoU is the metric function's over the stored rows
    scores = cell_scores(counts).set_index("shift")
    printed = {ln.split()[2]: float(ln.split()[6]) for ln in lines[1:]}
    for shift, v in printed.items():
        assert v == pytest.approx(100 * scores.loc[shift, "miou"], abs=0.006)

    assert main(argv) == 0
    _, err = capsys.readouterr()
    assert "0 new rows, resumed" in err and len(store.segmentation_counts()) == 4

    # results: a database of segmentation runs only shows them, not an error
    assert main(["results", "--db", str(db)]) == 0
    out, _ = capsys.readouterr()
    assert "miou %" in out and "segmented" in out
    # beside a classification run: the classifier's table plus a note; --segmentation lists them
    _classifier_run(store)
    assert main(["results", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "top1 %" in out and "lite0" in out and SPEC not in out
    assert "1 segmentation run(s) not in this table" in err
    assert main(["results", "--db", str(db), "--segmentation", "--format", "csv"]) == 0
    out, _ = capsys.readouterr()
    df = pd.read_csv(__import__("io").StringIO(out))
    assert list(df["shift"]) == ["clean", "segmented"] and (df["model"] == SPEC).all()
    assert df["miou"].tolist() == pytest.approx(scores.loc[["clean", "segmented"], "miou"].tolist())
    # export: the segmentation rows come along only when there are some
    assert main(["results", "--db", str(db), "--export", str(tmp_path / "pq")]) == 0
    capsys.readouterr()
    assert len(pd.read_parquet(tmp_path / "pq" / "segmentation.parquet")) == 4
    paths = store.export_parquet(tmp_path / "pq2", ["c1"])
    assert [p.name for p in paths] == ["runs.parquet", "predictions.parquet"]
    # a bad checkpoint is a one-line error, exit status 2
    assert main([*argv[:2], "--weights", str(tmp_path / "none.pth"), *argv[4:]]) == 2
    _, err = capsys.readouterr()
    assert "does not exist" in err and "Traceback" not in err
