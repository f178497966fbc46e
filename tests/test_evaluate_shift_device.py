"""``robustlab evaluate --shift-device cpu`` end to end with lite0 on a few real photos.

The torch path must store one row per (photo, cell) like the exact path, under a run of its
own that says how its pixels were made, and never resume into (or from) an exact run.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pandas as pd
import pytest
import torch
from conftest import SHIFT_DEVICE

import robustlab
from robustlab.cli import main as cli
from robustlab.errors import EnvironmentProblem, InputError
from robustlab.store import Store

N_PHOTOS = 3
SHIFTS = ["gaussian_noise", "contrast"]


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory):
    from test_evaluate import _make_folder

    return _make_folder(samples_dir, tmp_path_factory.mktemp("data") / "photos", N_PHOTOS)


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


@pytest.fixture(scope="module")
def runs(photos, lite0, tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "r.duckdb"
    kw = dict(suite="imagenet-c", shifts=SHIFTS, levels=[1], db=db, batch_size=4, progress=False)
    exact = robustlab.evaluate(lite0, photos, workers=0, **kw)
    # libjpeg for the protocol's round trip on every device, so that the pixels are the
    # exact path's: CUDA's default codec, nvJPEG, is its own (benchmarks/README.md)
    torch_path = robustlab.evaluate(
        lite0, photos, workers=1, shift_device=SHIFT_DEVICE, shift_jpeg="cpu", **kw
    )
    return exact, torch_path, db


def test_rows_are_stored_under_a_run_of_their_own(runs):
    exact, ours, db = runs
    assert exact.run_id != ours.run_id
    assert list(ours.table["n"]) == [N_PHOTOS] * (1 + len(SHIFTS))
    store = Store(db)
    record = store.get_run(ours.run_id)
    shift_path = record["config"]["shift_path"]
    assert shift_path["path"] == "torch" and shift_path["device"] == SHIFT_DEVICE
    assert shift_path["jpeg"] == "libjpeg"
    assert "shift_path" not in store.get_run(exact.run_id)["config"]
    preds = store.predictions([exact.run_id, ours.run_id])
    assert len(preds) == 2 * N_PHOTOS * (1 + len(SHIFTS))
    # The clean cell is the same pixels on both paths, and so is contrast (deterministic,
    # the same arithmetic up to rare rounding flips).
    for shift in ("clean", "contrast"):
        cell = preds[preds["shift"] == shift].sort_values("sample_id")
        a, b = (cell[cell["run_id"] == r] for r in (exact.run_id, ours.run_id))
        assert [list(x) for x in a["top5_ids"]] == [list(x) for x in b["top5_ids"]], shift


def test_rerun_resumes_the_torch_run_only(runs, photos, lite0):
    _, ours, db = runs
    again = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=SHIFTS,
        levels=[1],
        db=db,
        workers=0,
        shift_device=SHIFT_DEVICE,
        shift_jpeg="cpu",
        progress=False,
    )
    assert again.run_id == ours.run_id
    assert again.resumed and again.n_written == 0


def test_summary_labels_the_torch_path(runs):
    exact, ours, db = runs
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli(["results", "--db", str(db), "--summary", "--format", "csv"]) == 0
    table = pd.read_csv(io.StringIO(out.getvalue()), dtype={"run_id": str})
    paths = dict(zip(table["run_id"], table["path"]))
    assert paths[exact.run_id[:8]] == "on-the-fly"
    assert paths[ours.run_id[:8]] == f"on-the-fly, torch:{SHIFT_DEVICE}"


def test_cli_flag_runs_the_torch_path(photos, tmp_path, capsys):
    db = tmp_path / "cli.duckdb"
    assert (
        cli(
            [
                "evaluate",
                "lite0",
                "--data",
                str(photos),
                "--labels",
                str(photos / "labels.csv"),
                "--suite",
                "imagenet-c",
                "--shift",
                "contrast",
                "--level",
                "5",
                "--db",
                str(db),
                "--workers",
                "0",
                "--shift-device",
                "cpu",
                "--no-progress",
            ]
        )
        == 0
    )
    run = Store(db).runs()
    assert len(run) == 1
    assert run.iloc[0]["config"]["shift_path"]["device"] == "cpu"


def test_bad_shift_device_requests_are_clear_errors(photos, lite0, tmp_path):
    kw = dict(db=tmp_path / "x.duckdb", workers=0, progress=False)
    with pytest.raises(InputError, match="shift device"):
        robustlab.evaluate(
            lite0, photos, suite="imagenet-c", shifts=["contrast"], shift_device="tpu", **kw
        )
    with pytest.raises(InputError, match="scenes only; obj_size"):
        robustlab.evaluate(
            lite0,
            photos,
            suite="imagenet-e",
            shifts=["obj_size"],
            masks=photos,
            shift_device="cpu",
            **kw,
        )
    if not torch.cuda.is_available():
        with pytest.raises(EnvironmentProblem, match="no CUDA device"):
            robustlab.evaluate(
                lite0, photos, suite="imagenet-c", shifts=["contrast"], shift_device="cuda", **kw
            )
    assert not (tmp_path / "x.duckdb").exists()


# ------------------------------------------------------------------ scene suites


@pytest.fixture(scope="module")
def masks(photos, tmp_path_factory):
    """An irregular blob mask for each photo (the shared photos come without masks)."""
    from PIL import Image

    from robustlab.masks.io import mask_name, save_mask
    from robustlab.masks.synthetic import random_blob

    out = tmp_path_factory.mktemp("masks")
    for k, path in enumerate(sorted(photos.glob("*.JPEG"))):
        w, h = Image.open(path).size
        save_mask(out / mask_name(path.name), random_blob(h, w, k))
    return out


@pytest.mark.parametrize(
    "suite, shifts",
    [
        ("ximagenet12", ["blur_bg", "color_g", "bright_obj", "random_bg"]),
        ("imagenet9", ["only_bg_t", "no_fg", "mixed_rand"]),
    ],
)
def test_scene_suites_run_batched_with_their_masks(photos, masks, lite0, tmp_path, suite, shifts):
    """Batched scenes get the exact path's pixels (deterministic ones) or draws (colour),
    the donor scenes are made exactly by the workers, skips are the same, and the run
    is labelled as the torch path's."""
    db = tmp_path / "s.duckdb"
    kw = dict(suite=suite, shifts=shifts, masks=masks, db=db, batch_size=8, progress=False)
    exact = robustlab.evaluate(lite0, photos, workers=0, **kw)
    ours = robustlab.evaluate(lite0, photos, workers=1, shift_device=SHIFT_DEVICE, **kw)
    assert exact.run_id != ours.run_id
    assert list(ours.table["shift"]) == list(exact.table["shift"])
    assert list(ours.table["n"]) == list(exact.table["n"])
    assert (
        exact.table.set_index("shift")["n"].drop(["mixed_rand"], errors="ignore") == N_PHOTOS
    ).all()
    assert sorted(map(tuple, ours.skipped)) == sorted(map(tuple, exact.skipped))
    store = Store(db)
    assert store.get_run(ours.run_id)["config"]["shift_path"]["device"] == SHIFT_DEVICE
    preds = store.predictions([exact.run_id, ours.run_id])
    same = [s for s in shifts if s not in ("color_g",)] + ["clean"]
    for shift in same:  # the same pixels, so the same predictions
        cell = preds[preds["shift"] == shift].sort_values(["level", "sample_id"])
        a, b = (cell[cell["run_id"] == r] for r in (exact.run_id, ours.run_id))
        assert [list(x) for x in a["top5_ids"]] == [list(x) for x in b["top5_ids"]], shift
