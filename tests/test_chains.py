"""The README's documented chains run as a user runs them, commands in their order, on
real files: ImageNet-D's synth (tiny random-weight checkpoint) -> mine -> review (through
the review server's HTTP API) -> review --export -> evaluate --labels, with a relabel in
the middle, down to the label stored for each image."""

from __future__ import annotations

import csv
import json
import urllib.request

import pytest
from conftest import save_tiny_text2image

from robustlab.cli import main
from robustlab.data.labels import get_label_space
from robustlab.store import Store
from robustlab.workflows.imagenet_d.review import load_review_set
from robustlab.workflows.imagenet_d.review.server import ReviewServer
from robustlab.store.reviews import ReviewStore

pytestmark = pytest.mark.xdist_group("chains")

RELABELLED = "texture/backpack/blotchy_000.png"  # the image, relabelled as banana
REJECTED = "material/alarm_clock/wood_000.png"


def _decide(server: ReviewServer, annotator: str, index: int, decision: str, target=None):
    """One decision as the review page sends it: POST /api/decide with the token."""
    body = {"annotator": annotator, "index": index, "decision": decision}
    if target is not None:
        body["target"] = target
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/api/decide",
        data=json.dumps(body).encode(),
        headers={"X-Review-Token": server.token, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


def _stored_labels(db, run_id: str) -> dict[str, int]:
    p = Store(db).predictions([run_id], columns=["sample_id", "label"])
    return dict(zip(p["sample_id"], p["label"].astype(int)))


def _run_id(err: str) -> str:
    """The id of ``run ID stored in DB``, evaluate's last line."""
    return err.rsplit("\nrun ", 1)[1].split()[0]


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """README: tiny checkpoint -> synth (2 classes x 1 nuisance per subset: 6 images) ->
    mine with the three lite surrogates into hard/ (random weights: every image is hard)."""
    root = tmp_path_factory.mktemp("chain-d")
    ckpt = save_tiny_text2image(root / "tiny" / "text2image")
    synth = ["synth", "--checkpoint", str(ckpt), "--out", str(root / "imagenet-d")]
    assert (
        main(
            [*synth, "--classes", "0,1", "--max-nuisances", "1", "--size", "64"]
            + ["--steps", "2", "--no-progress"]
        )
        == 0
    )
    db = root / "robustlab.duckdb"
    mine = ["mine", "--data", str(root / "imagenet-d"), "--label-space", "imagenet-d"]
    assert main([*mine, "--out", str(root / "hard"), "--db", str(db), "--workers", "0"]) == 0
    return root, db


@pytest.mark.slow  # about 30 s of CPU: a diffusion pipeline, three surrogates, four runs
def test_imagenet_d_chain_scores_the_agreed_labels_of_the_agreed_images(mined, capsys):
    root, db = mined
    hard, final = root / "hard", root / "final.csv"
    mining = json.loads((hard / "mining.json").read_text())
    rs = load_review_set(hard, predictions=hard / "hard.csv")
    ids = [it.id for it in rs.items]
    assert len(ids) == 6 and RELABELLED in ids and REJECTED in ids
    server = ReviewServer(rs, ReviewStore(db), annotator="alice").start()
    try:
        for who in ("alice", "bob"):
            for i, sid in enumerate(ids):
                if sid == RELABELLED:
                    _decide(server, who, i, "relabel", "banana")
                elif sid == REJECTED:
                    _decide(server, who, i, "reject")
                else:
                    _decide(server, who, i, "accept")
    finally:
        server.shutdown()
    capsys.readouterr()
    assert main(["review", "--data", str(hard), "--db", str(db), "--export", str(final)]) == 0
    rows = {r["file"]: r for r in csv.DictReader(open(final, newline=""))}
    assert set(rows) == set(ids) - {REJECTED}
    assert rows[RELABELLED]["class"] == "banana" and rows[RELABELLED]["relabelled"] == "True"

    argv = ["evaluate", "lite0", "--data", str(hard), "--labels", str(final)]
    argv += ["--label-space", "imagenet-d", "--db", str(db), "--workers", "0", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr()
    rid = _run_id(out.err)
    # A new run of its own, never the mining's run on imagenet-d/ resumed with old labels.
    assert rid not in mining["run_ids"] and "already stored" not in out.err
    space = get_label_space("imagenet-d")
    stored = _stored_labels(db, rid)
    assert stored == {sid: space.index_of(rows[sid]["class"]) for sid in rows}
    assert stored[RELABELLED] == space.index_of("banana") != space.index_of("backpack")
    record = Store(db).get_run(rid)
    assert record["config"]["labels_csv"] == str(final.resolve())
    assert [REJECTED, f"not listed in {final.name}"] in record["skipped"]

    # The agreed set with every image kept, one relabelled: the same pixels as the mining's
    # lite0 run, other labels, so still another run (the silent resume).
    everyone = root / "everyone.csv"
    with open(everyone, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "class"])
        w.writerows([sid, "banana" if sid == RELABELLED else sid.split("/")[1]] for sid in ids)
    argv[5] = str(everyone)
    assert main(argv) == 0
    again = _run_id(capsys.readouterr().err)
    assert again not in mining["run_ids"] and again != rid
    assert _stored_labels(db, again)[RELABELLED] == space.index_of("banana")

    # The mined folder as it is (its own labels.csv, the folders' classes): the very pixels
    # and labels of the mining's lite0 run, so that run, resumed; its record then names
    # this folder and this CSV together, never imagenet-d/'s root beside hard/'s labels.
    argv = ["evaluate", "lite0", "--data", str(hard), "--db", str(db), "--workers", "0"]
    assert main([*argv, "--no-progress"]) == 0
    assert _run_id(capsys.readouterr().err) == mining["run_ids"][0]
    record = Store(db).get_run(mining["run_ids"][0])
    assert record["data_root"] == str(hard.resolve())
    assert record["config"]["labels_csv"] == str((hard / "labels.csv").resolve())

    # The synthesised folder itself, without a flag: ImageNet-D's tree and label space are
    # recognised, and it is the mining's lite0 run (same pixels, labels and space).
    argv = ["evaluate", "lite0", "--data", str(root / "imagenet-d"), "--db", str(db)]
    assert main([*argv, "--workers", "0", "--no-progress"]) == 0
    assert _run_id(capsys.readouterr().err) == mining["run_ids"][0]
