"""Evaluating a folder written by ``robustlab generate``: its files are inputs like photos.

Hostile cases: a cell file overwritten after generate wrote it (never scored as its cell;
a generate rerun draws it again), a file no journal records, a folder from before hashes
were recorded, ``--keep-size`` folders whose photos differ in
size (batches must hold them), and the hint after a missing cell (it must run as printed).
"""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _runs_helpers as h  # noqa: E402

SHIFT = "brightness"  # a cheap ImageNet-C shift: no compiled kernel, no mask


def _generate(capsys, data: Path, out: Path, *extra: str) -> None:
    code, _, err = h.cli(
        capsys, "generate", "imagenet-c", "--data", data, "--out", out, "--workers", "0",
        "--no-progress", *extra,
    )  # fmt: skip
    assert code == 0, err


def _evaluate(capsys, data: Path, db: Path, *extra: str) -> tuple[int, str, str]:
    return h.cli(
        capsys, "evaluate", "lite0", "--data", data, "--db", db, "--workers", "0",
        "--no-progress", *extra,
    )  # fmt: skip


def _replace_keeping_mtime(path: Path, other: Path) -> bytes:
    """``path`` gets ``other``'s bytes under its own name and modification time (the
    issue's case); returns the bytes it had."""
    import os

    before, st = path.read_bytes(), path.stat()
    path.write_bytes(other.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return before


def test_an_overwritten_generated_file_is_never_scored_as_its_cell(tmp_path, capsys):
    """A cell file replaced after generate wrote it (same name, same mtime): evaluate
    skips it with the reason, in the same run (what generate wrote is what the run is);
    a generate rerun draws it again, and the folder is whole."""
    data = h.flat_folder(tmp_path / "data", 3)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "5")
    db = tmp_path / "a.duckdb"
    cells = ("--shift", SHIFT, "--level", "5")
    code, out, err = _evaluate(capsys, gen, db, *cells)
    assert code == 0, err
    first = h.run_id_of(out + err)
    intact = h.predictions(db, first)
    assert len(intact) == 6

    files = sorted((gen / SHIFT / "5").rglob("*.JPEG"))
    original = _replace_keeping_mtime(files[0], files[1])
    sid = files[0].name  # a flat folder's sample id (the cell path adds its class folder)
    fresh = tmp_path / "fresh.duckdb"
    code, out, err = _evaluate(capsys, gen, fresh, *cells)
    assert code == 0, err
    assert h.run_id_of(out + err) == first  # the run is what generate wrote
    scored = h.predictions(fresh, first)
    assert (
        len(scored) == 5 and not ((scored["sample_id"] == sid) & (scored["shift"] == SHIFT)).any()
    )
    from robustlab.store import Store

    (skip,) = [s for s in Store(fresh).get_run(first)["skipped"] if s[0] == sid]
    assert "the generated file's content is not what generate wrote" in skip[1]
    # The report's grid does not show the replaced file as the cell either.
    from robustlab.workflows.report.grid import render_cells

    shown, errors = render_cells(Store(fresh).get_run(first), sid, [(SHIFT, "5")])
    assert not shown and "not what generate wrote" in errors[(SHIFT, "5")]
    # The database that scored the file before it was replaced keeps those numbers.
    code, out, err = _evaluate(capsys, gen, db, *cells)
    assert code == 0, err
    assert (
        h.predictions(db, first)["top5_ids"].map(list).tolist()
        == intact["top5_ids"].map(list).tolist()
    )

    code, out, err = h.cli(
        capsys, "generate", "imagenet-c", "--data", data, "--out", gen, "--workers", "0",
        "--no-progress", *cells,
    )  # fmt: skip
    assert code == 0, err
    assert "1 written (1 redrawn: not what generate wrote), 2 already there" in out
    assert files[0].read_bytes() == original
    again = tmp_path / "again.duckdb"
    code, out, err = _evaluate(capsys, gen, again, *cells)
    assert code == 0 and h.run_id_of(out + err) == first
    redone = h.predictions(again, first)
    assert redone["top5_ids"].map(list).tolist() == intact["top5_ids"].map(list).tolist()


def test_a_file_no_journal_records_is_not_scored_and_is_drawn_again(tmp_path, capsys):
    """A cell file that no run recorded (a generate killed between writing the file and
    recording its hash, or a file put there by hand): a counted skip, then redrawn."""
    import json

    data = h.flat_folder(tmp_path / "data", 2)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "5")
    (journal,) = (gen / ".hashes").iterdir()
    lines = journal.read_text().splitlines()
    lost = json.loads(lines[0])
    journal.write_text("".join(line + "\n" for line in lines[1:]))
    db = tmp_path / "a.duckdb"
    code, out, err = _evaluate(capsys, gen, db)
    assert code == 0, err
    from robustlab.store import Store

    run = Store(db).get_run(h.run_id_of(out + err))
    assert [s[0] for s in run["skipped"]] == [lost[0]]
    assert "recorded no content hash" in run["skipped"][0][1]
    code, out, err = h.cli(
        capsys, "generate", "imagenet-c", "--data", data, "--out", gen, "--workers", "0",
        "--no-progress", "--shift", SHIFT, "--level", "5",
    )  # fmt: skip
    assert code == 0 and "(1 redrawn" in out, out + err
    code, out, err = _evaluate(capsys, gen, tmp_path / "b.duckdb")
    assert code == 0 and "skipped" not in err, err


def test_a_folder_from_before_hashes_were_recorded_keeps_its_run_and_gets_them(
    tmp_path, capsys, caplog
):
    """A manifest without ``output_hashes`` (an earlier robustlab): evaluate hashes its
    files when it plans, as before, under the same run id; a generate rerun records their
    hashes as they are, and from then on the folder is checked like any other."""
    import json

    data = h.flat_folder(tmp_path / "data", 2)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "5")
    code, out, err = _evaluate(capsys, gen, tmp_path / "new.duckdb")
    assert code == 0, err
    rid = h.run_id_of(out + err)
    manifest = json.loads((gen / "manifest.json").read_text())
    del manifest["output_hashes"]
    (gen / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(gen / ".hashes")
    code, out, err = _evaluate(capsys, gen, tmp_path / "old.duckdb")
    assert code == 0 and h.run_id_of(out + err) == rid, err

    caplog.clear()
    caplog.set_level("INFO", logger="robustlab")
    code, out, err = h.cli(
        capsys, "generate", "imagenet-c", "--data", data, "--out", gen, "--workers", "0",
        "--no-progress", "--shift", SHIFT, "--level", "5",
    )  # fmt: skip
    assert code == 0 and "0 written, 2 already there" in out, out + err
    assert "recorded no content hashes" in caplog.text
    assert json.loads((gen / "manifest.json").read_text())["output_hashes"]
    files = sorted((gen / SHIFT / "5").rglob("*.JPEG"))
    _replace_keeping_mtime(files[0], files[1])
    code, out, err = _evaluate(capsys, gen, tmp_path / "later.duckdb")
    assert code == 0 and h.run_id_of(out + err) == rid
    assert "not what generate wrote" in err


def test_planning_an_evaluation_reads_no_generated_file(tmp_path, capsys):
    """The run's identity takes the hashes generate recorded: planning reads no cell file
    (the content-hash cache holds none of them), the run reads each once, as it scores it."""
    import os
    import sqlite3

    from robustlab.records.content_hash import CACHE_FILE, cache_dir

    data = h.flat_folder(tmp_path / "data", 2)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "5")
    code, out, err = _evaluate(capsys, gen, tmp_path / "a.duckdb")
    assert code == 0, err
    with sqlite3.connect(cache_dir() / CACHE_FILE) as con:
        cached = [os.fsdecode(p) for (p,) in con.execute("SELECT path FROM hashes")]
    under = str(gen.resolve()) + os.sep
    assert any(p.startswith(str(data.resolve())) for p in cached)  # the photos are hashed
    assert not [p for p in cached if p.startswith(under)]


def test_keep_size_folder_evaluates_in_batches_as_one_by_one(tmp_path, capsys):
    # The mini photos are 500x375, 500x333 and 333x500: three sizes in one folder.
    data = h.flat_folder(tmp_path / "data", 3)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "1", "--keep-size")
    batched, single = tmp_path / "batched.duckdb", tmp_path / "single.duckdb"
    cells = ("--shift", SHIFT, "--level", "1")
    code, out, err = _evaluate(capsys, gen, batched, "--batch-size", "32", *cells)
    assert code == 0, err
    run = h.run_id_of(out + err)
    code, out, err = _evaluate(capsys, gen, single, "--batch-size", "1", *cells)
    assert code == 0, err
    a, b = h.predictions(batched, run), h.predictions(single, run)
    assert len(a) == len(b) == 6
    assert (np.stack(a["top5_ids"]) == np.stack(b["top5_ids"])).all()
    np.testing.assert_allclose(np.stack(a["top5_probs"]), np.stack(b["top5_probs"]), atol=1e-4)


def test_missing_cell_hint_runs_as_printed(tmp_path, capsys):
    data = h.flat_folder(tmp_path / "data", 2)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", f"{SHIFT},contrast", "--level", "2")
    db = tmp_path / "a.duckdb"
    code, _, err = _evaluate(capsys, gen, db, "--shift", "common")  # more than was generated
    line = h.assert_user_error(code, err, contains="has no generated images")
    hint = h.error_lines(err)[1].split("hint:", 1)[1]
    flags = shlex.split(hint.split(":", 1)[1].split("(", 1)[0])
    assert "--level" in flags, hint
    code, _, err = _evaluate(capsys, gen, db, *flags)
    assert code == 0, f"the hint of {line!r} failed: {err}"


def test_ray_model_stage_predicts_each_size_on_its_own():
    """The Ray backend's model stage gets a batch of tasks whose cells differ in size (a
    --keep-size folder): each image's prediction equals its prediction alone."""
    import types

    import torch

    from robustlab.models import load_model
    from robustlab.execution.ray.predictor import Predictor

    model = load_model("lite0", device="cpu")
    rgb = np.asarray(Image.open(h.MINI / h.photo_rows(1)[0]["file"]).convert("RGB"))
    wide = model.preprocessing.to_uint8(rgb, crop=False)[None]  # 224 x 298
    square = model.preprocessing.to_uint8(rgb[:, :375], crop=False)[None]  # 224 x 224
    assert wide.shape != square.shape
    arrays = [wide.numpy(), torch.cat([square, square.flip(-1)]).numpy(), wide.flip(-1).numpy()]
    stage = types.SimpleNamespace(model=model, batch_size=2, topk=5)
    probs, ids = Predictor._predict_sizes(stage, arrays)
    images = [torch.from_numpy(a[i : i + 1].copy()) for a in arrays for i in range(len(a))]
    assert len(ids) == len(images) == 4
    for row, image in enumerate(images):
        p, k = model.predict_topk(image, 5)
        assert list(ids[row]) == list(k.numpy()[0])
        np.testing.assert_allclose(probs[row], p.numpy()[0], atol=1e-5)
