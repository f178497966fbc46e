"""The evaluation hot path: uint8 pixels normalised where the model runs, top-k on the
model's device, whole-sample tasks, and the background database writer."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from PIL import Image

from conftest import StopAfter
from robustlab.data.sources import discover
from robustlab.models import load_model
from robustlab.execution.bookkeeping import plan_tasks
from robustlab.execution.runner import RunOptions, Runner, _ModelTransform
from robustlab.execution.writer import PredictionWriter
from robustlab.execution.tasks import CellImages
from robustlab.store import RunRecord, Store
from robustlab.suites import Protocol


@pytest.fixture(scope="module")
def lite0():
    return load_model("lite0", device="cpu")


@pytest.fixture()
def photos(tmp_path):
    """Six smooth random RGB images of odd sizes in two class folders."""
    rng = np.random.default_rng(0)
    for i in range(6):
        h, w = 180 + 7 * i, 260 - 5 * i
        base = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((w, h), Image.Resampling.BICUBIC)
        folder = tmp_path / "data" / ("n01440764" if i % 2 else "n01443537")
        folder.mkdir(parents=True, exist_ok=True)
        img.save(folder / f"img{i}.png")
    return discover(tmp_path / "data")


def _rows(n: int, run_sample: str = "s") -> dict:
    return {
        "sample_id": [f"{run_sample}{i}" for i in range(n)],
        "shift": ["clean"] * n,
        "level": ["0"] * n,
        "label": [1] * n,
        "class_name": ["c"] * n,
        "top5_ids": np.zeros((n, 5), np.int32),
        "top5_probs": np.zeros((n, 5), np.float32),
        "correct": [False] * n,
        "correct5": [False] * n,
    }


def test_uint8_batch_gives_bit_identical_logits(lite0):
    rng = np.random.default_rng(1)
    imgs = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(3)]
    as_float = torch.stack([lite0.transform(x, crop=False) for x in imgs])
    as_uint8 = torch.stack([_ModelTransform(lite0)(x) for x in imgs])
    assert as_uint8.dtype == torch.uint8 and as_float.dtype == torch.float32
    assert torch.equal(lite0.preprocessing.normalize(as_uint8), as_float)
    assert torch.equal(lite0.predict(as_uint8), lite0.predict(as_float))


def test_predict_topk_agrees_with_predict(lite0):
    rng = np.random.default_rng(2)
    batch = torch.stack(
        [
            _ModelTransform(lite0)(rng.integers(0, 256, (224, 224, 3), dtype=np.uint8))
            for _ in range(4)
        ]
    )
    probs, ids = lite0.predict_topk(batch, 5)
    ref = torch.topk(torch.softmax(lite0.predict(batch), dim=1), 5, dim=1)
    assert torch.equal(ids, ref.indices)
    assert torch.allclose(probs, ref.values, rtol=0, atol=1e-7)


def test_whole_sample_tasks_by_default(tmp_path, photos):
    cells = [("clean", 0), ("gaussian_noise", 1), ("fog", 2), ("contrast", 5)]
    store = Store(tmp_path / "r.duckdb")
    tasks, _, already = plan_tasks(photos, cells, store, "r", RunOptions().cells_per_task)
    assert already == 0
    assert [t.sample_index for t in tasks] == list(range(len(photos)))
    assert all(t.cells == tuple(cells) for t in tasks)
    tasks, _, _ = plan_tasks(photos, cells, store, "r", 3)  # an explicit bound still splits
    assert [len(t.cells) for t in tasks[:2]] == [3, 1]


def test_writer_merges_queued_batches_and_stores_all(tmp_path):
    store = Store(tmp_path / "w.duckdb")
    store.start_run(RunRecord(run_id="w", model_spec="x"))
    seen = []
    writer = PredictionWriter(
        store, "w", depth=3, on_written=lambda rows: seen.append(len(rows["shift"]))
    )
    for k in range(7):
        writer.put(_rows(5, run_sample=f"b{k}_"))
    writer.close()
    assert sum(seen) == 35
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM predictions WHERE run_id='w'").fetchone()[0] == 35


def test_writer_starts_a_transaction_at_most_once_per_interval(tmp_path):
    """Each transaction costs a DuckDB connection whatever its size: batches that arrive
    within the interval share one, the first batch is stored at once, and close() stores
    the rest without waiting for the interval to end."""
    store = Store(tmp_path / "t.duckdb")
    store.start_run(RunRecord(run_id="t", model_spec="x"))
    seen = []
    writer = PredictionWriter(
        store,
        "t",
        depth=3,
        interval=3600.0,
        on_written=lambda rows: seen.append(len(rows["shift"])),
    )
    writer.put(_rows(5, run_sample="b0_"))
    deadline = time.monotonic() + 60
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [5]  # the first batch was stored at once
    for k in range(1, 7):
        writer.put(_rows(5, run_sample=f"b{k}_"))
    writer.close()  # an hour before the next transaction is due: close stores them now
    assert seen == [5, 30]
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM predictions WHERE run_id='t'").fetchone()[0] == 35


def test_writer_error_reaches_the_caller(tmp_path):
    store = Store(tmp_path / "e.duckdb")
    store.start_run(RunRecord(run_id="e", model_spec="x"))
    writer = PredictionWriter(store, "e", depth=2)
    bad = _rows(4)
    bad["shift"] = bad["shift"][:2]  # columns of different lengths: the insert fails
    writer.put(bad)
    with pytest.raises(Exception) as info:
        writer.close()
    assert "length" in str(info.value).lower() or "size" in str(info.value).lower()


def test_interrupt_keeps_every_predicted_row(tmp_path, photos, lite0):
    store = Store(tmp_path / "i.duckdb")
    record = RunRecord(run_id="i", model_spec=lite0.spec)
    labels = [0] * len(photos)
    runner = Runner(
        lite0,
        photos,
        labels,
        [("clean", 0)],
        CellImages(Protocol(), 0),
        store,
        record,
        RunOptions(batch_size=2, workers=0, progress=False),
        transform=StopAfter(_ModelTransform(lite0), 5),
    )
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    # Images 1-4 made two full batches before the interrupt: both are stored.
    with store.connect(read_only=True) as con:
        n = con.execute("SELECT count(*) FROM predictions WHERE run_id='i'").fetchone()[0]
        status = con.execute("SELECT status FROM runs WHERE run_id='i'").fetchone()[0]
    assert n == 4 and status == "interrupted"
    # A rerun finishes the run without duplicates.
    runner = Runner(
        lite0,
        photos,
        labels,
        [("clean", 0)],
        CellImages(Protocol(), 0),
        store,
        record,
        RunOptions(batch_size=2, workers=0, progress=False),
    )
    summary = runner.run()
    assert summary.n_written == 2 and summary.n_already_done == 4
    with store.connect(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM predictions WHERE run_id='i'").fetchone()[0] == 6
