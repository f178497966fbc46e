"""Forward lanes: a CPU model's batches side by side, the same predictions, results in
order, failures and Ctrl-C handled as with one batch at a time."""

from __future__ import annotations

import shutil
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import StopAfter, assert_same_predictions
from robustlab.models import load_model
from robustlab.execution.lanes import default_lanes, forward_lanes, lane_threads
from robustlab.execution.runner import RunOptions, Runner, _ModelTransform
from robustlab.execution.tasks import CellImages
from robustlab.store import RunRecord, Store
from robustlab.suites import Protocol


@pytest.fixture(scope="module")
def lite0():
    return load_model("lite0", device="cpu")


def _real_images(samples_dir, model, n):
    from PIL import Image

    paths = sorted(samples_dir.glob("*.JPEG"))[:n]
    return torch.stack([model.transform(np.asarray(Image.open(p).convert("RGB"))) for p in paths])


def test_threads_are_shared_out_at_least_one_each():
    assert lane_threads(2, 2) == [1, 1]
    assert lane_threads(3, 2) == [2, 1]
    assert lane_threads(16, 2) == [8, 8]
    assert lane_threads(1, 2) == [1, 1]


class _Bare:
    """Something that is not a torch module on the CPU (as ONNX Runtime's adapter)."""

    module = None

    def input_device(self):
        return "cpu"


def test_default_lanes(lite0, two_torch_threads):
    assert default_lanes(lite0) == 2
    assert default_lanes(lite0, 1) == 1
    assert default_lanes(lite0, 3) == 3
    assert default_lanes(_Bare()) == 1
    torch.set_num_threads(1)
    assert default_lanes(lite0) == 1


def test_results_come_back_in_submission_order_with_their_tags():
    def slow_first(x):
        time.sleep(0.2 if x == 0 else 0.01)
        return x * 10

    got = []
    with forward_lanes(slow_first, 2) as pool:
        for x in range(5):
            pool.submit(x, tag=f"t{x}")
            got.extend(pool.ready())
            assert len(pool._pending) < 2  # never more than a lane's worth waits
        got.extend(pool.ready(drain=True))
    assert got == [(x * 10, f"t{x}") for x in range(5)]
    assert 0.2 <= pool.busy_s


def test_one_lane_runs_in_the_calling_thread():
    where = []
    with forward_lanes(lambda x: where.append(threading.current_thread()) or x, 1) as pool:
        pool.submit(1)
        assert list(pool.ready()) == [(1, None)]
    assert where == [threading.current_thread()]


def test_a_lane_failure_is_raised_and_the_later_calls_dropped():
    gate = threading.Event()

    def fails_on_two(x):
        if x == 1:
            gate.wait(5)
        if x == 2:
            raise ValueError("batch 2 failed")
        return x

    got = []
    with forward_lanes(fails_on_two, 2) as pool:
        pool.submit(1)
        assert list(pool.ready()) == []  # 1 still computing, a lane free: no wait
        gate.set()
        with pytest.raises(ValueError, match="batch 2 failed"):
            for x in (2, 3):
                pool.submit(x)
                got.extend(out for out, _ in pool.ready())
            list(pool.ready(drain=True))
        assert list(pool.finished()) == []  # 2 failed: nothing after it is stored
    assert got == [1]


def test_after_a_failure_elsewhere_the_started_calls_are_waited_for():
    def slow(x):
        time.sleep(0.2)
        return x

    with forward_lanes(slow, 2) as pool:
        pool.submit(1)
        pool.submit(2)
        assert [out for out, _ in pool.finished()] == [1, 2]


def test_closing_gives_new_threads_the_callers_thread_count(two_torch_threads):
    seen = []
    with forward_lanes(lambda x: seen.append(torch.get_num_threads()) or x, 2) as pool:
        pool.submit(1)
        pool.submit(2)
        list(pool.ready(drain=True))
    assert seen == [1, 1]
    later = []
    t = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert later == [2] and torch.get_num_threads() == 2


@pytest.mark.parametrize(("batch", "n"), [(16, 32), (4, 8)])
def test_lanes_give_the_same_predictions(samples_dir, lite0, two_torch_threads, batch, n):
    """The same batches on one thread each (two lanes) and on two threads: the same top-5
    classes and probabilities within PROB_ATOL. Not bit for bit: the thread count changes
    how oneDNN splits a convolution, and so the last bits of the logits, on some CPUs at
    every batch size (on this project's machine only below 16 images a batch). Two batches,
    one per lane, at 16 images and at 4."""
    batches = list(torch.split(_real_images(samples_dir, lite0, n), batch))
    one_at_a_time = torch.cat([lite0.predict(b) for b in batches])
    with forward_lanes(lite0.predict, 2) as pool:
        for b in batches:
            pool.submit(b)
        side_by_side = torch.cat([out for out, _ in pool.ready(drain=True)])
    assert_same_predictions(one_at_a_time, side_by_side)


def _folder(samples_dir, dst, n):
    for p in sorted(samples_dir.glob("*.JPEG"))[:n]:
        wnid = p.name.split("_")[0]
        (dst / wnid).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst / wnid / p.name)
    return dst


def test_evaluate_stores_the_same_rows_with_one_and_two_lanes(
    samples_dir, tmp_path, lite0, two_torch_threads
):
    import robustlab

    data = _folder(samples_dir, tmp_path / "data", 8)
    tables = {}
    for lanes in (1, 2):
        db = tmp_path / f"l{lanes}.duckdb"
        robustlab.evaluate(
            lite0,
            data,
            suite="imagenet-c",
            shifts=["brightness"],
            levels=[2],
            db=db,
            batch_size=4,
            lanes=lanes,
            progress=False,
        )
        rows = Store(db).predictions()
        tables[lanes] = rows.sort_values(["sample_id", "shift", "level"]).reset_index(drop=True)
    one, two = tables[1], tables[2]
    assert len(one) == 16  # 8 photos x 2 cells: 4 batches of 4, two at a time
    exact = [c for c in one.columns if c != "top5_probs"]
    pd.testing.assert_frame_equal(one[exact], two[exact])
    assert np.allclose(
        np.stack(one["top5_probs"]), np.stack(two["top5_probs"]), rtol=1e-5, atol=1e-7
    )


def test_ctrl_c_stores_the_batches_the_lanes_had_started(
    samples_dir, tmp_path, lite0, two_torch_threads
):
    from robustlab.data.sources import discover

    photos = discover(_folder(samples_dir, tmp_path / "data", 6))
    store = Store(tmp_path / "i.duckdb")
    record = RunRecord(run_id="i", model_spec=lite0.spec)

    def runner(transform=None):
        return Runner(
            lite0,
            photos,
            [0] * len(photos),
            [("clean", 0)],
            CellImages(Protocol(), 0),
            store,
            record,
            RunOptions(batch_size=2, workers=0, progress=False, lanes=2),
            transform=transform,
        )

    with pytest.raises(KeyboardInterrupt):
        runner(StopAfter(_ModelTransform(lite0), 5)).run()
    # Images 1-4 made two batches, both started before the interrupt: both are stored.
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM predictions").fetchone()[0] == 4
    summary = runner().run()
    assert summary.n_written == 2 and summary.n_already_done == 4
    assert 0 < summary.throughput["predict_s"] <= summary.throughput["wall_s"]


def test_the_ray_stages_line_names_the_lanes():
    from robustlab.execution.ray.pipeline import StageTimes

    times = StageTimes()
    times.add("prepare", 4, 1.0)
    times.add("model", 8, 2.0, threads=2, lanes=2)
    line = times.line()
    assert "model 8 in 2.0 worker-s (4.0/s per worker) [2 torch threads in 2 lanes]" in line
    assert times.summary()["model"]["lanes"] == 2
    one = StageTimes()
    one.add("model", 8, 2.0, threads=2, lanes=1)
    assert "[2 torch threads]" in one.line()
    assert "torch threads" not in line.split(";")[0]  # none for the prepare stage
