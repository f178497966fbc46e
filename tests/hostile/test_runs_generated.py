"""Evaluating a folder written by ``robustlab generate``: its files are inputs like photos.

Hostile cases: a cell file overwritten after an evaluation (the rerun must be a new run,
never the old predictions under the old id), ``--keep-size`` folders whose photos differ in
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


def test_overwritten_generated_file_is_a_new_run_with_fresh_numbers(tmp_path, capsys, caplog):
    data = h.flat_folder(tmp_path / "data", 3)
    gen = tmp_path / "gen"
    _generate(capsys, data, gen, "--shift", SHIFT, "--level", "5")
    db = tmp_path / "a.duckdb"
    cells = ("--shift", SHIFT, "--level", "5")
    code, out, err = _evaluate(capsys, gen, db, *cells)
    assert code == 0, err
    first = h.run_id_of(out + err)

    # Replace one cell's file with another photo's cell (same name, other content).
    files = sorted((gen / SHIFT / "5").rglob("*.JPEG"))
    shutil.copyfile(files[1], files[0])
    code, out, err = _evaluate(capsys, gen, db, *cells)
    assert code == 0, err
    second = h.run_id_of(out + err)
    assert second != first, "a changed generated file resumed the old run"
    assert "generated file content" in caplog.text  # the warning names what differs

    # The new run's numbers are those of a fresh database, not the old file's.
    fresh_db = tmp_path / "fresh.duckdb"
    code, out, err = _evaluate(capsys, gen, fresh_db, *cells)
    assert code == 0, err
    assert h.run_id_of(out + err) == second
    a, b = h.predictions(db, second), h.predictions(fresh_db, second)
    assert len(a) == len(b) == 6
    assert (np.stack(a["top5_ids"]) == np.stack(b["top5_ids"])).all()
    old = h.predictions(db, first)
    changed = old["sample_id"] == h.photo_rows(3)[0]["file"]
    moved = (old["shift"] == SHIFT) & changed
    assert moved.sum() == 1
    # The replaced cell now shows the other photo's prediction.
    assert list(a.loc[moved, "top5_ids"].iloc[0]) == list(
        old.loc[(old["shift"] == SHIFT) & (old["sample_id"] == h.photo_rows(3)[1]["file"]),
                "top5_ids"].iloc[0]
    )  # fmt: skip


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
    from robustlab.run.ray.predictor import Predictor

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
