"""The DuckDB results store: schema, idempotent batch writes, resume queries, export,
and two real processes writing to one file at the same time."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from robustlab.errors import MissingResourceError
from robustlab.metrics.accuracy import cell_table
from robustlab.records.manifest import this_process
from robustlab.store import RunRecord, Store


def _batch(sample_ids, shift="gaussian_noise", level="3", correct=None):
    n = len(sample_ids)
    ids = np.tile(np.arange(5, dtype=np.int32), (n, 1)) + np.arange(n, dtype=np.int32)[:, None]
    probs = np.tile(np.array([0.5, 0.2, 0.1, 0.1, 0.1], np.float32), (n, 1))
    correct = np.ones(n, bool) if correct is None else np.asarray(correct, bool)
    return {
        "sample_id": list(sample_ids),
        "shift": [shift] * n,
        "level": [level] * n,
        "label": list(range(n)),
        "class_name": ["n01440764"] * n,
        "top5_ids": ids,
        "top5_probs": probs,
        "correct": correct,
        "correct5": np.ones(n, bool),
    }


def _run(store, run_id="r1", **kw):
    rec = RunRecord(
        run_id=run_id,
        model_spec="lite0",
        suite="imagenet-c",
        seed=0,
        preprocessing={"input_size": 224},
        versions={"robustlab": "x"},
        config={"batch_size": 8},
        **kw,
    )
    return store.start_run(rec)


def test_nothing_is_created_until_the_first_write(tmp_path):
    store = Store(tmp_path / "sub" / "r.duckdb")
    assert store.runs().empty and store.done_counts("x") == {} and store.count() == 0
    with pytest.raises(MissingResourceError, match="no results database"):
        store.predictions()
    assert not store.path.exists()


def test_rows_round_trip_and_replayed_batches_do_not_duplicate(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    assert _run(store) is True
    assert _run(store) is False  # same run id: resumed, not duplicated
    assert len(store.runs()) == 1
    assert store.write_predictions("r1", _batch(["a", "b", "c"])) == 3
    store.write_predictions("r1", _batch(["a", "b", "c"]))  # replay after a crash
    store.write_predictions("r1", _batch(["a"], shift="clean", level="0"))
    assert store.count("r1") == 4
    df = store.predictions(["r1"])
    row = df[(df.sample_id == "b") & (df["shift"] == "gaussian_noise")].iloc[0]
    assert list(row.top5_ids) == [1, 2, 3, 4, 5]
    np.testing.assert_allclose(list(row.top5_probs), [0.5, 0.2, 0.1, 0.1, 0.1], rtol=1e-6)
    assert row.level == "3" and row.label == 1 and bool(row.correct)
    assert store.done_counts("r1") == {"a": 2, "b": 1, "c": 1}
    assert store.done_keys("r1", ["a", "zzz"]) == {
        ("a", "gaussian_noise", "3"),
        ("a", "clean", "0"),
    }


def test_run_record_json_and_finish(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    _run(store)
    store.finish_run(
        "r1",
        status="finished",
        n_samples=7,
        skipped=[["bad.jpg", "not an image (unrecognised format)"]],
    )
    run = store.get_run("r1")
    assert run["status"] == "finished" and run["n_samples"] == 7 and run["n_skipped"] == 1
    assert run["skipped"] == [["bad.jpg", "not an image (unrecognised format)"]]
    assert run["preprocessing"] == {"input_size": 224}
    # The config as given, plus the process that ran it (a later run tells a killed one).
    assert run["config"] == {"batch_size": 8, "process": this_process()}
    assert run["finished_at"] >= run["started_at"]


def test_sql_cell_table_matches_pandas(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    _run(store)
    store.write_predictions("r1", _batch(list("abcd"), correct=[1, 0, 1, 1]))
    store.write_predictions(
        "r1", _batch(list("abcd"), shift="clean", level="0", correct=[1, 1, 1, 0])
    )
    sql = store.cell_table(["r1"])
    pdf = cell_table(store.predictions(["r1"]))
    pd.testing.assert_frame_equal(sql, pdf, check_dtype=False)
    assert list(sql["shift"]) == ["clean", "gaussian_noise"]
    assert sql["top1"].tolist() == [0.75, 0.75] and sql["n"].tolist() == [4, 4]


def test_shift_outcomes_are_the_predictions_rows_in_their_order(tmp_path):
    # the card's fast read: the rows of predictions(shifts=[...]) in the same order (level,
    # then id, both as text: "10" before "2", byte order of UTF-8 for accents), though
    # sorted outside SQL; other shifts and runs are left out
    store = Store(tmp_path / "r.duckdb")
    _run(store)
    _run(store, "r2")
    ids = ["b/\u00e9.jpg", "a/Z.jpg", "a/z.jpg", "a/\u00e4.jpg", "b/e.jpg", "a/10.jpg", "a/2.jpg"]
    rng = np.random.default_rng(3)
    for level in ["2", "10", "1"]:
        for half in (ids[:4], ids[4:]):  # several batches: several Arrow chunks
            store.write_predictions(
                "r1",
                _batch(
                    list(rng.permutation(half)), level=level, correct=rng.random(len(half)) < 0.5
                ),
            )
    store.write_predictions("r1", _batch(ids[:3], shift="clean", level="0"))
    store.write_predictions("r2", _batch(ids[:2], level="5"))
    want = store.predictions(
        ["r1"], columns=["sample_id", "shift", "level", "correct"], shifts=["gaussian_noise"]
    )
    got = store.shift_outcomes("r1", "gaussian_noise")
    assert len(got) == len(want) == 21
    pd.testing.assert_frame_equal(
        got.astype({c: str for c in ("sample_id", "shift", "level")}), want, check_dtype=False
    )
    assert got["level"].astype(str).tolist()[:7] == ["1"] * 7 and got["level"].iloc[7] == "10"
    assert store.shift_outcomes("r1", "motion_blur").empty


def test_parquet_export(tmp_path):
    store = Store(tmp_path / "r.duckdb")
    _run(store)
    store.write_predictions("r1", _batch(list("abc")))
    paths = store.export_parquet(tmp_path / "out")
    runs = pd.read_parquet(paths[0])
    preds = pd.read_parquet(paths[1])
    assert runs["run_id"].tolist() == ["r1"]
    assert len(preds) == 3 and list(preds.iloc[0]["top5_ids"]) == [0, 1, 2, 3, 4]


WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from robustlab.store import RunRecord, Store
    db, run_id, n_batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store = Store(db)
    store.start_run(RunRecord(run_id=run_id, model_spec="lite0"))
    for b in range(n_batches):
        ids = [f"s{b:04d}_{i:03d}" for i in range(size)]
        store.write_predictions(run_id, {
            "sample_id": ids, "shift": ["clean"] * size, "level": ["0"] * size,
            "label": [0] * size, "class_name": ["x"] * size,
            "top5_ids": np.zeros((size, 5), np.int32), "top5_probs": np.zeros((size, 5), np.float32),
            "correct": np.ones(size, bool), "correct5": np.ones(size, bool)})
""")


@pytest.mark.long
def test_two_processes_write_concurrently_without_losing_rows(tmp_path):
    db = tmp_path / "shared.duckdb"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    # Two different runs plus a third process replaying run A: the PK keeps A exact.
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(db), rid, "40", "16"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for rid in ("A", "B", "A")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    store = Store(db)
    assert store.count("A") == 40 * 16
    assert store.count("B") == 40 * 16
    assert sorted(store.runs()["run_id"]) == ["A", "B"]
    # the sidecar lock file goes with the last holder: nothing left next to the database
    assert sorted(x.name for x in tmp_path.iterdir()) == ["shared.duckdb", "writer.py"]


COUNTER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from robustlab.locks import file_lock
    lock, counter, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    for _ in range(n):
        with file_lock(lock, timeout=120):
            value = int(counter.read_text())
            counter.write_text(str(value + 1))
""")


def test_a_lock_file_removed_on_release_still_excludes_every_other_holder(tmp_path):
    """Read-modify-write of one counter by four processes under :func:`file_lock`, which
    removes its file on every release: a process that waited on a removed file must start
    over, or two would hold "the" lock at once and increments would be lost."""
    script, counter, lock = tmp_path / "count.py", tmp_path / "counter", tmp_path / "c.lock"
    script.write_text(COUNTER)
    counter.write_text("0")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(lock), str(counter), "150"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert counter.read_text() == str(4 * 150)
    assert not lock.exists()
