"""Every file a stored run read is an input no output may replace, ``--force`` included
(issue 36, item 2): ``robustlab evaluate ... --labels labels.csv`` then ``robustlab
results --format csv --output labels.csv`` replaced the labels the run was scored with;
``report --force`` could replace its weights. One real lite0 run on real photos."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

pytestmark = pytest.mark.xdist_group("stored_inputs")


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """A database with one run of lite0 (its weights as a file of their own) on a flat
    folder of 3 photos, scored with a labels CSV kept beside the folder."""
    from robustlab.cli import main
    from robustlab.models.lite import package_weights

    world = tmp_path_factory.mktemp("stored")
    flat = world / "flat"
    flat.mkdir()
    rows = h.photo_rows(3)
    for r in rows:
        shutil.copyfile(h.MINI / r["file"], flat / r["file"])
    h.write_labels(world / "labels.csv", rows)
    weights = world / "lite0.pth"
    shutil.copyfile(package_weights("lite0"), weights)
    db = world / "r.duckdb"
    argv = ["evaluate", "lite0", "--data", flat, "--labels", world / "labels.csv"]
    argv += ["--weights", weights, "--db", db, "--workers", "0", "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    return {
        "world": world,
        "flat": flat,
        "db": db,
        "labels": world / "labels.csv",
        "weights": weights,
    }


def _refused(capsys, stored, argv, role: str) -> None:
    """``argv`` exits 2 with one line naming the stored run's ``role``, and the stored
    run's labels and weights are unchanged."""
    before = {k: stored[k].read_bytes() for k in ("labels", "weights")}
    code, _, err = h.cli(capsys, *argv)
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"'s {role})" in lines[0] and "never overwrites" in lines[0], lines[0]
    assert {k: stored[k].read_bytes() for k in ("labels", "weights")} == before


def test_results_output_never_replaces_a_runs_labels_csv(stored, capsys):
    argv = ["results", "--db", stored["db"], "--format", "csv", "--output", stored["labels"]]
    _refused(capsys, stored, argv, "labels CSV")


def test_report_force_never_replaces_a_runs_labels_or_weights(stored, capsys):
    for target, role in ((stored["labels"], "labels CSV"), (stored["weights"], "weights")):
        argv = ["report", "--db", stored["db"], "--out", target, "--force"]
        _refused(capsys, stored, argv, role)


def test_review_export_never_replaces_a_runs_labels_csv(stored, capsys):
    """``review`` writes the database, so it did not look at what the stored runs read."""
    argv = ["review", "--data", stored["flat"], "--db", stored["db"], "--export"]
    _refused(capsys, stored, [*argv, stored["labels"], "-k", "1"], "labels CSV")


def test_an_output_beside_the_inputs_is_still_written(stored, capsys):
    """The guard names files, not their neighbours: a table next to the labels CSV is
    written as before."""
    out = stored["world"] / "table.csv"
    code, _, err = h.cli(
        capsys, "results", "--db", stored["db"], "--format", "csv", "--output", out
    )
    assert code == 0 and out.read_text().startswith("model,suite,run_id"), err


def test_the_records_name_what_each_run_read(stored):
    from robustlab.store import Store
    from robustlab.store.inputs import recorded_inputs

    found = dict((path, what) for what, path in recorded_inputs(Store(stored["db"])))
    assert found[str(stored["flat"])].endswith("'s data folder")
    assert found[str(stored["labels"])].endswith("'s labels CSV")
    assert found[str(stored["weights"])].endswith("'s weights")
