"""``evaluate --backend ray --shift-device cpu`` against the local ``--shift-device cpu`` run.

The claim under test: the model actors apply the batched shifts to the photos the CPU tasks
decoded, and the driver stores the local shift-device run's rows under its run id, so either
backend finishes the other's run, and neither resumes the exact path's run. The local run
shifts its photos in one group, each Ray batch shifts one photo (``batch_size=4`` over four
or five cells a photo): equal rows mean the batch composition does not change the pixels.
The Ray instance is the session's ``ray_cluster`` fixture (2 CPUs, one declared GPU that
torch cannot use, so a ``cuda`` shift device meets an actor without CUDA).
"""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import torch
from test_ray_backend import _cli, _photos

import robustlab
from robustlab.cli import main as cli
from robustlab.errors import EnvironmentProblem, InputError, MissingResourceError
from robustlab.execution.ray.placement import plan_placement
from robustlab.store import Store

SHIFTS = ["gaussian_noise", "contrast"]  # torch draws per image, and deterministic
LEVELS = [1, 3]
N_PHOTOS = 3
N_ROWS = N_PHOTOS * (1 + len(SHIFTS) * len(LEVELS))
KW = dict(suite="imagenet-c", shifts=SHIFTS, levels=LEVELS, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory):
    return _photos(samples_dir, tmp_path_factory.mktemp("ray-shift") / "photos", N_PHOTOS)


@pytest.fixture(scope="module")
def local_run(photos, tmp_path_factory):
    """The local ``--shift-device cpu`` run: (run id, database, its stored rows, record)."""
    db = tmp_path_factory.mktemp("db") / "local.duckdb"
    res = robustlab.evaluate("lite0", photos, db=db, workers=0, shift_device="cpu", **KW)
    store = Store(db)
    return res.run_id, db, store.predictions(), store.get_run(res.run_id)


def _rows(db, run_id) -> pd.DataFrame:
    return Store(db).predictions([run_id]).reset_index(drop=True)


def test_ray_finishes_a_partial_local_shift_device_run_with_its_rows(
    ray_cluster, photos, local_run, tmp_path, capsys
):
    """What a killed local run left: one photo's rows and another's clean row, beside an
    exact run of the same cells. The Ray run resumes the shift-device run (not the exact
    one), computes only the missing rows, with the local pixels, and writes no duplicate."""
    run_id, db_local, local_rows, local_record = local_run
    db = tmp_path / "partial.duckdb"
    shutil.copy(db_local, db)
    first, second, _ = sorted(set(local_rows["sample_id"]))
    with Store(db).connect() as con:
        con.execute(
            "DELETE FROM predictions WHERE sample_id <> ? AND NOT (sample_id = ? AND "
            "shift = 'clean')",
            [first, second],
        )
    kept = len(Store(db).predictions())
    exact = robustlab.evaluate("lite0", photos, db=db, workers=0, **KW)
    assert exact.run_id != run_id and not exact.resumed
    args = ["evaluate", "lite0", "--data", str(photos), "--labels", str(photos / "labels.csv")]
    args += ["--suite", "imagenet-c", "--db", str(db), "--batch-size", "4", "--no-progress"]
    args += [f"--shift={s}" for s in SHIFTS] + [f"--level={lv}" for lv in LEVELS]
    assert cli([*args, "--backend", "ray", "--shift-device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert f"run {run_id} stored" in err
    assert f"shift {N_ROWS - kept} in" in err  # the actors made the missing cells only
    pd.testing.assert_frame_equal(_rows(db, run_id), local_rows.reset_index(drop=True))
    record = Store(db).get_run(run_id)
    assert record["config"]["shift_path"] == local_record["config"]["shift_path"]
    assert record["config"]["shift_path"]["device"] == "cpu"
    assert record["status"] == "finished" and record["n_samples"] == N_PHOTOS
    # The exact run kept its own rows: nothing resumed into it or from it.
    assert len(_rows(db, exact.run_id)) == N_ROWS
    assert "shift_path" not in Store(db).get_run(exact.run_id)["config"]


@pytest.mark.slow
def test_ray_shifts_mask_scenes_as_the_local_run(ray_cluster, photos, tmp_path):
    """Masks and boxes travel with the photos to the actors; the donor scene (random_bg)
    comes made by the CPU tasks, the colour scene draws per image: the local rows and skips."""
    from PIL import Image

    from robustlab.masks.io import mask_name, save_mask
    from robustlab.masks.synthetic import random_blob

    masks = tmp_path / "masks"
    masks.mkdir()
    for k, path in enumerate(sorted(photos.glob("*.JPEG"))):
        w, h = Image.open(path).size
        save_mask(masks / mask_name(path.name), random_blob(h, w, k))
    kw = dict(KW, suite="ximagenet12", shifts=["color_g", "bright_obj", "random_bg"], levels=None)
    kw.update(masks=masks, shift_device="cpu")
    local = robustlab.evaluate("lite0", photos, db=tmp_path / "l.duckdb", workers=0, **kw)
    on_ray = robustlab.evaluate("lite0", photos, db=tmp_path / "r.duckdb", backend="ray", **kw)
    assert on_ray.run_id == local.run_id
    assert sorted(map(tuple, on_ray.skipped)) == sorted(map(tuple, local.skipped))
    pd.testing.assert_frame_equal(
        Store(tmp_path / "r.duckdb").predictions(), Store(tmp_path / "l.duckdb").predictions()
    )
    shifts = Store(tmp_path / "r.duckdb").predictions()["shift"]
    assert set(shifts) == {"clean", "color_g", "bright_obj", "random_bg"}


def test_a_gpu_actor_without_cuda_is_one_error(ray_cluster, photos, tmp_path):
    """The test cluster declares a GPU that torch cannot use: the actor says so."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the actors would shift on it")
    with pytest.raises(EnvironmentProblem, match="a Ray model actor on .* finds no CUDA device"):
        robustlab.evaluate(
            "lite0",
            photos,
            db=tmp_path / "c.duckdb",
            backend="ray",
            shift_device="cuda",
            **{**KW, "shifts": ["contrast"], "levels": [1]},
        )
    assert Store(tmp_path / "c.duckdb").predictions().empty


def test_placement_refuses_shift_devices_the_actors_lack():
    with pytest.raises(MissingResourceError, match="GPUs, but the Ray cluster has none"):
        plan_placement({"CPU": 4.0}, shift_device="cuda")
    with pytest.raises(InputError, match="--device cpu gives them none"):
        plan_placement({"CPU": 4.0, "GPU": 1.0}, "cpu", shift_device="cuda")
    with pytest.raises(InputError, match="the one GPU it is given"):
        plan_placement({"CPU": 4.0, "GPU": 2.0}, shift_device="cuda:1")
    assert plan_placement({"CPU": 4.0, "GPU": 1.0}, shift_device="cuda:0").model_gpus == 1
    assert plan_placement({"CPU": 4.0}, shift_device="cpu").model_gpus == 0


@pytest.mark.slow
def test_shift_device_cuda_on_a_cluster_without_gpus_fails_before_any_work(photos, tmp_path):
    """End to end on a Ray instance the CLI starts here (no GPU): one line, no database."""
    db = tmp_path / "r.duckdb"
    proc = _cli(
        "evaluate",
        "lite0",
        "--data",
        str(photos),
        "--db",
        str(db),
        "--backend",
        "ray",
        "--shift-device",
        "cuda",
        "--workers",
        "1",
        "--no-progress",
    )
    assert proc.returncode == 2, proc.stderr
    assert "shifts on the model actors' GPUs, but the Ray cluster has none" in proc.stderr
    assert "Traceback" not in proc.stderr and not db.exists()
