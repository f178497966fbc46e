"""End-to-end evaluation with the real bundled lite0 model on a few real photos.

8 photos x (clean + 2 corruptions' worth of cells at 2 severities) keeps each run to a few
seconds on 2 CPU cores.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import robustlab
from robustlab.cli import main as cli
from robustlab.store import Store

N_PHOTOS = 8
LEVELS = [1, 3]


def _corruptions() -> list[str]:
    from robustlab.shifts.registry import list_shifts

    have = {s.name for s in list_shifts()}
    names = [n for n in ("gaussian_noise", "jpeg_compression", "contrast") if n in have]
    return names[:2]


CORRUPTIONS = _corruptions()


def _make_folder(src: Path, dst: Path, n: int, *, extra_rows=()) -> Path:
    """A flat folder of ``n`` real photos (hard links) plus a labels.csv subset."""
    dst.mkdir(parents=True)
    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for r in rows:
        os.link(src / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        for extra in extra_rows:
            w.writerow(extra)
    return dst


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory) -> Path:
    return _make_folder(samples_dir, tmp_path_factory.mktemp("data") / "photos", N_PHOTOS)


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


@pytest.fixture(scope="module")
def first_run(photos, lite0, tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "r.duckdb"
    res = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=CORRUPTIONS,
        levels=LEVELS,
        db=db,
        seed=0,
        workers=1,
        batch_size=6,
        progress=False,
    )
    return res, db


def test_one_row_per_cell_and_predictions_stored(first_run, lite0, photos):
    first, db = first_run
    df = first.table
    cells = [("clean", "0")] + [(c, str(lv)) for c in CORRUPTIONS for lv in LEVELS]
    assert list(zip(df["shift"], df["level"])) == cells
    assert (df["n"] == N_PHOTOS).all() and (df["model"] == "lite0").all()
    # lite0 scores ~89 % on these photos; corruptions at severity 3 never help on average.
    assert df.loc[df["shift"] == "clean", "top1"].item() >= 0.5
    assert ((df["top5"] >= df["top1"]) & (df["error"] == 1 - df["top1"])).all()
    store = Store(db)
    assert store.count(first.run_id) == N_PHOTOS * len(cells)
    run = store.get_run(first.run_id)
    assert run["status"] == "finished" and run["n_samples"] == N_PHOTOS and run["n_skipped"] == 0
    assert run["model_spec"] == "lite0" and run["weights_hash"] == lite0.weights_hash
    assert run["seed"] == 0 and run["suite"] == "imagenet-c" and run["label_space"] == "imagenet1k"
    assert run["preprocessing"]["protocol"]["crop"] == 224 and run["versions"]["torch"]
    assert run["config"]["source"] == "on-the-fly" and run["config"]["labels_csv"].endswith(
        "labels.csv"
    )
    preds = store.predictions([first.run_id])
    clean = preds[preds["shift"] == "clean"]
    with open(photos / "labels.csv", newline="") as fh:
        index = {r["file"]: int(r["index"]) for r in csv.DictReader(fh)}
    assert dict(zip(clean["sample_id"], clean["label"])) == index
    assert all(
        len(ids) == 5 and list(p) == sorted(p, reverse=True)
        for ids, p in zip(preds["top5_ids"], preds["top5_probs"])
    )
    assert (
        preds["correct"] == [ids[0] == lab for ids, lab in zip(preds["top5_ids"], preds["label"])]
    ).all()


def test_rerun_skips_stored_keys_and_worker_count_does_not_matter(first_run, photos, lite0):
    first, db = first_run
    before = Store(db).predictions([first.run_id])
    again = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=CORRUPTIONS,
        levels=LEVELS,
        db=db,
        seed=0,
        workers=0,
        batch_size=5,
        progress=False,
    )
    assert again.run_id == first.run_id and again.n_written == 0
    # Simulate a crash that lost some rows, then resume with a different worker count.
    with Store(db).connect() as con:
        con.execute(
            "DELETE FROM predictions WHERE run_id = ? AND (sample_id LIKE 'n015%' OR shift = ?)",
            [first.run_id, CORRUPTIONS[-1]],
        )
    resumed = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=CORRUPTIONS,
        levels=LEVELS,
        db=db,
        seed=0,
        workers=2,
        batch_size=7,
        progress=False,
    )
    assert 0 < resumed.n_written < len(before)
    after = Store(db).predictions([first.run_id])
    pd.testing.assert_frame_equal(before, after)


def test_generated_folder_gives_identical_predictions(first_run, photos, lite0, tmp_path):
    from robustlab.workflows.generate import generate

    first, db = first_run
    out = tmp_path / "gen"
    generate(
        "imagenet-c",
        photos,
        out,
        shifts=CORRUPTIONS,
        levels=",".join(map(str, LEVELS)),
        seed=0,
        workers=0,
        progress=False,
    )
    gen = robustlab.evaluate(
        lite0,
        out,
        shifts=CORRUPTIONS,
        levels=LEVELS,
        db=db,
        workers=1,
        batch_size=6,
        progress=False,
    )
    assert gen.run_id != first.run_id
    store = Store(db)
    a = store.predictions([first.run_id]).drop(columns="run_id")
    b = store.predictions([gen.run_id]).drop(columns="run_id")
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(ValueError, match="generated with seed 0, not 1"):
        robustlab.evaluate(lite0, out, db=db, seed=1, progress=False)
    # Nothing asked for: the cells the folder holds, the same run (nothing new to compute).
    held = robustlab.evaluate(lite0, out, db=db, workers=0, progress=False)
    assert held.run_id == gen.run_id
    assert list(zip(held.table["shift"], held.table["level"])) == list(
        zip(gen.table["shift"], gen.table["level"])
    )


def test_a_generated_folder_is_evaluated_on_the_cells_it_holds(samples_dir, tmp_path, capsys):
    """Two generate runs into one folder (gaussian_noise at 1, jpeg_compression at 3): with
    no --shift or --level the run covers exactly those cells, not the cross product and not
    the whole suite; asking for more names what is missing."""
    from robustlab.workflows.generate import generate

    photos = _make_folder(samples_dir, tmp_path / "photos", 2)
    out = tmp_path / "gen"
    for shift, level in (("gaussian_noise", "1"), ("jpeg_compression", "3")):
        generate("imagenet-c", photos, out, shifts=[shift], levels=level, workers=0, progress=False)
    db = tmp_path / "r.duckdb"
    argv = ["evaluate", "lite0", "--data", str(out), "--db", str(db), "--workers", "0"]
    assert cli([*argv, "--no-progress"]) == 0
    (run,) = Store(db).runs().to_dict("records")
    assert [tuple(c) for c in run["config"]["cells"]] == [
        ("clean", "0"),
        ("gaussian_noise", "1"),
        ("jpeg_compression", "3"),
    ]
    assert run["n_samples"] == 2 and not run["skipped"]
    capsys.readouterr()
    assert cli([*argv, "--shift", "gaussian_noise", "--level", "1-2"]) == 2
    assert "has no generated images for gaussian_noise/2" in capsys.readouterr().err


def test_a_folder_generated_with_a_limit_is_evaluated_on_what_it_holds(samples_dir, tmp_path):
    """``generate --limit 2`` on four photos holds two: the run on it has two samples and
    no skips, not four samples with two counted as missing files."""
    from robustlab.workflows.generate import generate

    photos = _make_folder(samples_dir, tmp_path / "photos", 4)
    out = tmp_path / "gen"
    generate(
        "imagenet-c", photos, out, shifts=["contrast"], levels="1", limit=2, workers=0,
        progress=False,
    )  # fmt: skip
    res = robustlab.evaluate("lite0", out, db=tmp_path / "r.duckdb", workers=0, progress=False)
    assert list(zip(res.table["shift"], res.table["n"])) == [("clean", 2), ("contrast", 2)]
    run = Store(tmp_path / "r.duckdb").get_run(res.run_id)
    assert run["n_samples"] == 2 and not run["skipped"]


def test_a_generated_folder_carries_its_skip_reasons_into_the_run(tmp_path):
    """An ImageNet-E cell that generate could not make (an empty mask) is the same skip,
    with the manifest's reason, in a run on the folder: not "generated file missing"."""
    import numpy as np
    from PIL import Image

    from robustlab.workflows.demo import materialise
    from robustlab.workflows.generate import generate

    data, masks = materialise(tmp_path / "demo", ["rocket/rocket.jpg", "cat/chelsea.png"])
    blank = masks / "cat" / "chelsea.png"  # the demo's mask of the cat, made empty
    size = Image.open(blank).size
    Image.fromarray(np.zeros(size[::-1], np.uint8)).save(blank)
    out = tmp_path / "imagenet-e"
    res = generate(
        "imagenet-e", data, out, shifts=["obj_direction"], levels="90", masks=masks, workers=0,
        progress=False,
    )  # fmt: skip
    reason = "mask is empty (no foreground pixels)"
    assert res.written == 1 and [f[-1] for f in res.failures] == [reason]
    df = robustlab.evaluate(
        "lite0", out, db=tmp_path / "r.duckdb", label_space="demo", workers=0, progress=False
    )
    assert list(zip(df.table["shift"], df.table["n"])) == [("clean", 2), ("obj_direction", 1)]
    run = Store(tmp_path / "r.duckdb").get_run(df.run_id)
    assert [list(x) for x in run["skipped"]] == [["cat/chelsea.png", f"obj_direction/90: {reason}"]]


def test_a_batch_size_below_one_is_refused_before_the_database(photos, lite0, tmp_path):
    db = tmp_path / "r.duckdb"
    with pytest.raises(ValueError, match="batch size must be at least 1, got -1"):
        robustlab.evaluate(lite0, photos, db=db, batch_size=-1, workers=0, progress=False)
    assert not db.exists()


def test_other_seed_is_another_run(first_run, photos, lite0):
    first, db = first_run
    other = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=CORRUPTIONS[:1],
        levels=[3],
        db=db,
        seed=1,
        workers=0,
        batch_size=8,
        progress=False,
    )
    assert other.run_id != first.run_id
    store = Store(db)
    key = ["sample_id", "shift", "level"]
    a = store.predictions([first.run_id]).set_index(key)
    b = store.predictions([other.run_id]).set_index(key)
    clean = "clean" == b.index.get_level_values("shift")
    assert (a.loc[b.index[clean], "top5_ids"].map(list) == b.loc[clean, "top5_ids"].map(list)).all()
    noisy = b.index[~clean]
    # a different seed draws different noise: some probabilities must move.
    assert not np.allclose(
        np.stack(a.loc[noisy, "top5_probs"]), np.stack(b.loc[noisy, "top5_probs"])
    )


def test_bad_inputs_fail_before_anything_is_written(photos, tmp_path, samples_dir):
    db = tmp_path / "never.duckdb"
    with pytest.raises(ValueError, match="nosuchmodel"):
        robustlab.evaluate("nosuchmodel", photos, db=db, progress=False)
    with pytest.raises((ValueError, FileNotFoundError), match="missing.pth"):
        robustlab.evaluate("lite0", photos, db=db, weights=tmp_path / "missing.pth", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        robustlab.evaluate("lite0", tmp_path / "empty", db=db, progress=False)
    bad = _make_folder(samples_dir, tmp_path / "badlabel", 2)
    text = (bad / "labels.csv").read_text()
    (bad / "labels.csv").write_text(text.replace(",n01440764,", ",n99999999,"))  # the wnid column
    with pytest.raises(ValueError, match="n99999999"):
        robustlab.evaluate("lite0", bad, db=db, progress=False)
    with pytest.raises(ValueError, match="unknown suite"):
        robustlab.evaluate("lite0", photos, suite="nosuite", db=db, progress=False)
    assert not db.exists()
    assert cli(["evaluate", "nosuchmodel", "--data", str(photos), "--db", str(db)]) == 2
    assert not db.exists()


def test_unreadable_images_are_skipped_counted_and_listed(samples_dir, lite0, tmp_path):
    data = _make_folder(samples_dir, tmp_path / "d", 3)
    rows = (data / "labels.csv").read_text().splitlines()
    (data / "broken.JPEG").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (data / "labels.csv").write_text("\n".join([*rows, "broken.JPEG,0,n01440764,tench"]) + "\n")
    db = tmp_path / "r.duckdb"
    res = robustlab.evaluate(
        lite0,
        data,
        suite="imagenet-c",
        shifts=CORRUPTIONS[:1],
        levels=[1],
        db=db,
        workers=1,
        batch_size=4,
        progress=False,
    )
    assert (res.table["n"] == 3).all()
    run = Store(db).get_run(res.run_id)
    assert run["n_skipped"] == 1 and run["skipped"][0][0] == "broken.JPEG"
    assert run["status"] == "finished" and run["n_samples"] == 4


def test_cli_evaluate_results_formats_and_export(photos, tmp_path, capsys):
    db = tmp_path / "cli.duckdb"
    assert (
        cli(
            [
                "evaluate",
                "lite0",
                "--data",
                str(photos),
                "--suite",
                "imagenet-c",
                "--db",
                str(db),
                "--shift",
                CORRUPTIONS[0],
                "--level",
                "2",
                "--workers",
                "0",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "clean" in out and CORRUPTIONS[0] in out
    assert cli(["results", "--db", str(db), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["shift"], r["level"]) for r in rows] == [("clean", "0"), (CORRUPTIONS[0], "2")]
    assert all(r["n"] == N_PHOTOS and r["model"] == "lite0" for r in rows)
    assert cli(["results", "--db", str(db), "--format", "csv"]) == 0
    cap = capsys.readouterr()
    assert cap.out.splitlines()[0].startswith("model,suite,run_id,shift,level,n,top1,top5,error")
    assert "full ImageNet validation set" in cap.err  # why there are no CE rows
    assert cli(["results", "--db", str(db), "--format", "markdown"]) == 0
    assert capsys.readouterr().out.startswith("| model | suite |")
    assert cli(["results", "--db", str(db), "--baseline", "alexnet"]) == 2
    assert "full ImageNet validation set" in capsys.readouterr().err
    assert cli(["results", "--db", str(db), "--baseline", "lite1"]) == 2
    assert "no run of baseline 'lite1'" in capsys.readouterr().err
    assert cli(["results", "--db", str(db), "--export", str(tmp_path / "pq")]) == 0
    preds = pd.read_parquet(tmp_path / "pq" / "predictions.parquet")
    assert len(preds) == 2 * N_PHOTOS


@pytest.mark.slow
def test_ce_rows_against_a_stored_baseline(photos, tmp_path, capsys):
    db = tmp_path / "ce.duckdb"
    kw = dict(
        suite="imagenet-c", shifts=CORRUPTIONS, levels=LEVELS, db=db, workers=1, progress=False
    )
    a = robustlab.evaluate("lite0", photos, **kw).table
    b = robustlab.evaluate("lite1", photos, **kw).table
    assert (
        cli(
            [
                "results",
                "--db",
                str(db),
                "--model",
                "lite0",
                "--baseline",
                "lite1",
                "--format",
                "json",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    ce = {r["shift"]: r for r in rows if r["ce"] is not None}
    ea, eb = a.set_index(["shift", "level"])["error"], b.set_index(["shift", "level"])["error"]
    for c in CORRUPTIONS:
        num = sum(ea[(c, str(lv))] for lv in LEVELS)
        den = sum(eb[(c, str(lv))] for lv in LEVELS)
        if den > 0:
            assert ce[c]["ce"] == pytest.approx(num / den)
    mrow = [r for r in rows if r["shift"].startswith("mCE")]
    assert len(mrow) == 1


def _stop_then_resume(folder: Path, n_photos: int, db: Path, sig: int, status: int) -> None:
    """Send ``sig`` to a running ``robustlab evaluate`` once rows land, then rerun it.

    The run must end with exit status ``status``, be recorded as interrupted with only
    part of the rows, and the same command must then complete it without duplicate rows.
    """
    args = (
        [
            sys.executable,
            "-m",
            "robustlab.cli",
            "evaluate",
            "lite0",
            "--data",
            str(folder),
            "--suite",
            "imagenet-c",
            "--db",
            str(db),
            "--batch-size",
            "2",
            "--workers",
            "1",
            "--no-progress",
        ]
        + sum((["--shift", c] for c in CORRUPTIONS), [])
        + sum((["--level", str(lv)] for lv in LEVELS), [])
    )
    total = n_photos * (1 + len(CORRUPTIONS) * len(LEVELS))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    store = Store(db)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if store.exists() and 0 < store.count() < total - 4:
            break
        time.sleep(0.2)
    if proc.poll() is not None:
        _, err = proc.communicate()
        assert proc.returncode == 0, err
        pytest.skip("the run finished before it could be interrupted")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    assert "rerun the same command to resume" in err and "Traceback" not in err
    runs = store.runs()
    assert runs["status"].tolist() == ["interrupted"]
    partial = store.count()
    assert 0 < partial < total
    assert subprocess.run(args, capture_output=True, text=True, timeout=300).returncode == 0
    assert store.count() == total and store.runs()["status"].tolist() == ["finished"]
    keys = store.predictions(columns=["sample_id", "shift", "level"])
    assert not keys.duplicated().any() and len(keys) == total


@pytest.mark.slow
def test_interrupt_then_resume_loses_at_most_a_batch(photos, tmp_path):
    """A real Ctrl-C (SIGINT) to a running ``robustlab evaluate``, then the same command."""
    _stop_then_resume(photos, N_PHOTOS, tmp_path / "int.duckdb", signal.SIGINT, 130)


@pytest.mark.slow
def test_sigterm_is_recorded_as_interrupted_and_resumes(samples_dir, tmp_path):
    """``kill`` (SIGTERM) behaves like Ctrl-C: run marked interrupted, exit status 143."""
    folder = _make_folder(samples_dir, tmp_path / "four", 4)
    _stop_then_resume(folder, 4, tmp_path / "term.duckdb", signal.SIGTERM, 143)


def test_rerun_of_a_finished_run_starts_no_workers(first_run, photos, lite0, monkeypatch):
    """Nothing left to do: the executor (and its worker processes) is never started."""
    from robustlab.execution import executors

    calls = []

    def counting(dataset, **kw):
        calls.append((len(dataset), kw["workers"]))
        return executors.iterate_local(dataset, **kw)

    monkeypatch.setitem(executors.EXECUTORS, "counting", counting)
    first, db = first_run
    kw = {
        "suite": "imagenet-c",
        "shifts": CORRUPTIONS,
        "levels": LEVELS,
        "db": db,
        "seed": 0,
        "backend": "counting",
        "progress": False,
    }
    again = robustlab.evaluate(lite0, photos, workers=2, **kw)
    assert calls == [] and again.n_written == 0
    assert Store(db).get_run(first.run_id)["status"] == "finished"
    # The same path with something left does ask the executor (the counter is live).
    with Store(db).connect() as con:
        con.execute("DELETE FROM predictions WHERE run_id = ? AND shift = 'clean'", [first.run_id])
    resumed = robustlab.evaluate(lite0, photos, workers=0, **kw)
    assert calls == [(N_PHOTOS, 0)] and resumed.n_written == N_PHOTOS


def test_resuming_ai_bg_with_another_inpainter_is_refused(tmp_path):
    """A run's ai_bg images must all come from one checkpoint (it is not in the run id)."""
    from robustlab.workflows.evaluate.resume import check_same_resources
    from robustlab.store import RunRecord, Store

    store = Store(tmp_path / "r.duckdb")
    first = RunRecord(
        run_id="r1",
        model_spec="lite0",
        config={"inpainter": {"path": "/ckpt/a", "fingerprint": "aaaa"}},
    )
    check_same_resources(store, first)  # no database yet: nothing to compare
    store.start_run(first)
    same = RunRecord(
        run_id="r1",
        model_spec="lite0",
        config={"inpainter": {"path": "/ckpt/a-copy", "fingerprint": "aaaa"}},
    )
    check_same_resources(store, same)
    other = RunRecord(
        run_id="r1",
        model_spec="lite0",
        config={"inpainter": {"path": "/ckpt/b", "fingerprint": "bbbb"}},
    )
    with pytest.raises(
        ValueError,
        match=r"already holds ai_bg images drawn by the inpainter /ckpt/a \(fingerprint aaaa\).*/ckpt/b \(bbbb\)",
    ):
        check_same_resources(store, other)
    check_same_resources(store, RunRecord(run_id="r2", model_spec="lite0", config=other.config))


def test_resuming_attribute_edits_with_another_fill_backend_is_refused(tmp_path):
    """The hole-fill backend is checked like the checkpoints: same mechanism, same words."""
    from robustlab.errors import InputChangedError
    from robustlab.workflows.evaluate.resume import check_same_resources
    from robustlab.shifts.attributes import describe_hole_fill
    from robustlab.store import RunRecord, Store

    telea, ns = describe_hole_fill("telea"), describe_hole_fill("ns")
    store = Store(tmp_path / "r.duckdb")
    store.start_run(RunRecord(run_id="r1", model_spec="lite0", config={"hole_fill": telea}))
    check_same_resources(
        store, RunRecord(run_id="r1", model_spec="lite0", config={"hole_fill": dict(telea)})
    )
    with pytest.raises(InputChangedError) as e:
        check_same_resources(
            store, RunRecord(run_id="r1", model_spec="lite0", config={"hole_fill": ns})
        )
    assert str(e.value) == (
        "run r1 already holds obj_size/obj_position/obj_direction images drawn by the "
        f"hole-fill backend opencv-telea (fingerprint {telea['fingerprint']}); "
        f"the configured one is opencv-ns ({ns['fingerprint']})"
    )
    assert "hole-fill backend" in e.value.hint
