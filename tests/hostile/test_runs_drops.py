"""Nothing is dropped silently: every input that is not evaluated is counted with its
reason (labels-CSV rows that name a file by a way out of the data folder), and every input
that is evaluated but degenerate (a 1x1 or 5x5 image, upscaled to the model's size) is
noted, stored in the run record and shown."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _runs_helpers as h  # noqa: E402


def _evaluate(capsys, data: Path, db: Path) -> tuple[int, str, str]:
    return h.cli(
        capsys, "evaluate", "lite0", "--data", data, "--db", db, "--workers", "0",
        "--no-progress",
    )  # fmt: skip


def test_labels_rows_leaving_the_folder_are_counted_skips(tmp_path, capsys):
    data = h.flat_folder(tmp_path / "data", 2)
    rows = h.photo_rows(5)
    (data / "a").mkdir()
    outside = tmp_path / rows[2]["file"]  # exists, next to the data folder
    shutil.copyfile(h.MINI / rows[2]["file"], outside)
    shutil.copyfile(h.MINI / rows[3]["file"], data / rows[3]["file"])
    bad = [
        {**rows[2], "file": f"../{rows[2]['file']}"},
        {**rows[4], "file": str(h.MINI / rows[4]["file"])},  # absolute, and it exists
        {**rows[3], "file": f"a/../{rows[3]['file']}"},  # names a file inside, oddly
    ]
    listed = rows[:2] + bad
    h.write_labels(data / "labels.csv", listed)
    db = tmp_path / "r.duckdb"
    code, out, err = _evaluate(capsys, data, db)
    assert code == 0, err
    run = h.run_id_of(out + err)
    from robustlab.store import Store

    record = Store(db).get_run(run)
    reasons = {sid: why for sid, why in record["skipped"]}
    for row in bad:
        assert row["file"] in reasons, (row["file"], reasons)
    assert "absolute path" in reasons[bad[1]["file"]]
    assert "'..'" in reasons[bad[0]["file"]] and "'..'" in reasons[bad[2]["file"]]
    # rows[3]'s file also sits in the folder unlisted: skipped as "not listed", not read.
    assert len(h.predictions(db, run)) == 2
    assert "skipped" in err and "image(s)" in err  # the summary line counts them


def test_tiny_images_are_evaluated_with_a_stored_and_shown_note(tmp_path, capsys, caplog):
    data = h.flat_folder(tmp_path / "data", 2)
    rows = h.photo_rows(4)
    tiny = []
    for row, side in zip(rows[2:], (1, 5)):
        name = f"tiny{side}_{row['file']}"
        Image.open(h.MINI / row["file"]).convert("RGB").resize((side, side)).save(data / name)
        tiny.append({**row, "file": name})
    h.write_labels(data / "labels.csv", rows[:2] + tiny)
    db = tmp_path / "r.duckdb"
    code, out, err = _evaluate(capsys, data, db)
    assert code == 0, err
    run = h.run_id_of(out + err)
    from robustlab.store import Store

    preds = h.predictions(db, run)
    assert len(preds) == 4  # evaluated and counted ...
    notes = Store(db).get_run(run)["config"]["notes"]
    assert sorted(notes) == sorted(t["file"] for t in tiny)  # ... stored with a note ...
    assert "tiny source 1x1 px" in notes[tiny[0]["file"]]
    assert "2 evaluated image(s) are degenerate" in caplog.text  # ... and shown

    # A resumed run (nothing left to decode) keeps the notes of the first session.
    code, out, err = _evaluate(capsys, data, db)
    assert code == 0, err
    assert Store(db).get_run(run)["config"]["notes"] == notes
