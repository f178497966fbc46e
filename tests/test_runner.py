"""Runner pieces: resume planning against a real store, worker tasks on real photos,
executor order independence, progress grouping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustlab import pipeline
from robustlab.data.sources import discover
from robustlab.execution.executors import get_executor, iterate_local
from robustlab.execution.progress import CellProgress
from robustlab.execution.bookkeeping import plan_tasks
from robustlab.execution.local_workers import local_prefetch
from robustlab.execution.tasks import CellImages, Task, TaskDataset
from robustlab.store import RunRecord, Store
from robustlab.suites import Protocol

CELLS = [("clean", 0), ("gaussian_noise", 1), ("gaussian_noise", 3)]


def _hwc_tensor(img: np.ndarray) -> torch.Tensor:
    """Plain uint8 HWC -> CHW tensor: keeps the exact pixels for comparison."""
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)


@pytest.fixture(scope="module")
def samples(samples_dir):
    return discover(samples_dir)[:4]


def test_plan_tasks_skips_stored_keys(tmp_path, samples):
    store = Store(tmp_path / "r.duckdb")
    store.start_run(RunRecord(run_id="r", model_spec="lite0"))
    # samples[3] has rows only for cells not requested now (an earlier, other selection).
    one = {
        "sample_id": [samples[0].id, samples[1].id] + [samples[3].id] * 3,
        "shift": ["clean", "gaussian_noise", "fog", "fog", "fog"],
        "level": ["0", "3", "1", "2", "3"],
        "label": [0] * 5,
        "class_name": ["a"] * 5,
        "top5_ids": np.zeros((5, 5), np.int32),
        "top5_probs": np.zeros((5, 5), np.float32),
        "correct": [True] * 5,
        "correct5": [True] * 5,
    }
    store.write_predictions("r", one)
    # samples[2] is complete
    full = {k: [] for k in one}
    for shift, level in CELLS:
        full["sample_id"].append(samples[2].id)
        full["shift"].append(shift)
        full["level"].append(str(level))
    full.update(
        label=[0] * 3,
        class_name=["c"] * 3,
        top5_ids=np.zeros((3, 5), np.int32),
        top5_probs=np.zeros((3, 5), np.float32),
        correct=[True] * 3,
        correct5=[True] * 3,
    )
    store.write_predictions("r", full)
    tasks, done, already = plan_tasks(samples, CELLS, store, "r", cells_per_task=2)
    got = {(t.sample_index, c) for t in tasks for c in t.cells}
    want = (
        {(i, c) for i in range(4) for c in CELLS}
        - {(0, CELLS[0]), (1, CELLS[2])}
        - {(2, c) for c in CELLS}
    )
    assert got == want
    assert all(len(t.cells) <= 2 for t in tasks)
    assert already == 5 and done == {
        ("clean", "0"): 2,
        ("gaussian_noise", "1"): 1,
        ("gaussian_noise", "3"): 2,
    }


def test_tasks_produce_the_pipeline_pixels(samples):
    proto = Protocol()
    images = CellImages(proto, seed=7)
    ds = TaskDataset(samples, [Task(0, tuple(CELLS))], images, _hwc_tensor)
    i, tensor, errors, measured = ds[0]
    assert i == 0 and errors == [] and measured == [] and tensor.shape == (3, 3, 224, 224)
    prep = pipeline.load_prepared(samples[0], proto)
    np.testing.assert_array_equal(tensor[0].permute(1, 2, 0).numpy(), prep.rgb)
    want = pipeline.as_stored(
        pipeline.apply_shift(prep.rgb, samples[0].id, "gaussian_noise", 3, 7), proto
    )
    np.testing.assert_array_equal(tensor[2].permute(1, 2, 0).numpy(), want)


def test_unreadable_source_and_bad_cell_are_reported_not_raised(tmp_path, samples):
    bad = tmp_path / "x" / "bad.JPEG"
    bad.parent.mkdir()
    bad.write_bytes(b"not an image at all")
    broken = discover(tmp_path)
    ds = TaskDataset(broken, [Task(0, tuple(CELLS))], CellImages(Protocol(), 0), _hwc_tensor)
    _, tensor, errors, _ = ds[0]
    assert tensor is None and errors[0][0] == -1 and "image" in errors[0][1]
    ds = TaskDataset(
        samples,
        [Task(0, (("clean", 0), ("gaussian_noise", 9)))],
        CellImages(Protocol(), 0),
        _hwc_tensor,
    )
    _, tensor, errors, _ = ds[0]
    assert tensor.shape[0] == 1 and errors[0][0] == 1 and "level 9" in errors[0][1]


def test_worker_count_does_not_change_items(samples):
    tasks = [Task(i, tuple(CELLS[j : j + 2])) for i in range(len(samples)) for j in (0, 2)]
    ds = TaskDataset(samples, tasks, CellImages(Protocol(), 3), _hwc_tensor)
    a = list(iterate_local(ds, workers=0))
    b = list(iterate_local(ds, workers=2, prefetch=1))
    assert [x[0] for x in a] == [x[0] for x in b] == list(range(len(tasks)))
    for (_, ta, _, _), (_, tb, _, _) in zip(a, b):
        assert torch.equal(ta, tb)
    with pytest.raises(ValueError, match="unknown backend"):
        get_executor("ray-typo")


def test_local_prefetch_keeps_a_batch_ahead_of_the_model():
    """Workers hold at least one batch of images beyond the one being filled, however
    few cells a task has; the asked prefetch is a floor, and nothing changes without
    worker processes."""
    five = [Task(i, tuple(CELLS[:1] * 5)) for i in range(100)]
    for workers in (1, 2, 3):
        n = local_prefetch(2, 32, workers, five)
        assert (n - 1) * workers * 5 >= 32 > (n - 2) * workers * 5
    whole_suite = [Task(i, tuple(CELLS[:1] * 76)) for i in range(10)]
    assert local_prefetch(2, 32, 1, whole_suite) == 2
    assert local_prefetch(5, 32, 1, whole_suite) == 5
    assert local_prefetch(2, 32, 0, five) == 2
    assert local_prefetch(2, 32, 1, []) == 2


def test_progress_groups_levels_when_there_are_many_cells():
    totals = {("clean", "0"): 4, **{("fog", str(lv)): 4 for lv in range(1, 6)}}
    p = CellProgress(totals, enabled=True, max_bars=3, terminal=True)
    assert sorted(p.bars) == ["clean", "fog"] and p.bars["fog"].total == 20
    p.update([("fog", "1"), ("fog", "5"), ("clean", "0")])
    assert p.bars["fog"].n == 2 and p.bars["clean"].n == 1
    p.close()
    assert CellProgress(totals, enabled=False).bars == {}


def _hwc_views(shape, n, seed=0):
    rng = np.random.default_rng(seed)
    return [_hwc_tensor(rng.integers(0, 256, shape, dtype=np.uint8)) for _ in range(n)]


@pytest.mark.parametrize("shape", [(224, 224, 3), (37, 61, 3), (40, 33, 4), (32, 45, 2)])
def test_pack_is_torch_stack_of_the_cells(shape):
    from robustlab.execution.tasks import pack

    cells = _hwc_views(shape, 5)
    out = pack(cells)
    assert out.dtype == torch.uint8 and out.is_contiguous()
    assert torch.equal(out, torch.stack(cells))


def test_pack_in_a_worker_allocates_shared_memory(monkeypatch):
    """In a DataLoader worker the stack goes straight into shared memory (no copy when it
    is sent to the main process); elsewhere it is ordinary memory."""
    from robustlab.execution.tasks import pack

    cells = _hwc_views((50, 70, 3), 4, seed=1)
    assert not pack(cells).is_shared()
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    out = pack(cells)
    assert out.is_shared() and torch.equal(out, torch.stack(cells))


def test_pack_leaves_other_tensors_to_torch_stack():
    from robustlab.execution.tasks import pack

    rng = np.random.default_rng(2)
    hwc = [torch.from_numpy(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)) for _ in range(3)]
    chw = [t.permute(2, 0, 1).contiguous() for t in hwc]  # contiguous CxHxW, not a view
    floats = [t.float() for t in chw]
    for cells in (hwc, chw, floats, [hwc[0].permute(2, 0, 1), chw[1]]):
        assert torch.equal(pack(cells), torch.stack(cells))
    # Cells of different sizes (a --keep-size folder) come back one tensor per cell.
    odd = pack([chw[0], chw[1][:, :10]])
    assert isinstance(odd, list) and [tuple(t.shape) for t in odd] == [
        (1, 3, 40, 50),
        (1, 3, 10, 50),
    ]
    assert torch.equal(odd[1][0], chw[1][:, :10])


def test_a_broken_hand_over_from_a_worker_counts_as_its_death():
    """A worker killed while it hands a batch over leaves the main process a broken
    multiprocessing connection, not the DataLoader's "worker (pid ...) exited" message:
    that too is a worker death (retried), while the same error from the work itself is not."""
    import socket
    from multiprocessing.connection import Client

    from robustlab.execution.local_workers import worker_died

    with socket.socket() as s:  # a port nobody listens on: a real refused connection
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionRefusedError) as refused:
        Client(("127.0.0.1", port))
    assert worker_died(refused.value)
    try:
        raise ConnectionResetError(104, "Connection reset by peer")
    except ConnectionResetError as exc:  # raised here, not inside multiprocessing
        assert not worker_died(exc)
    assert worker_died(RuntimeError("DataLoader worker (pid 123) is killed by signal: Killed."))
    assert not worker_died(RuntimeError("Sizes of tensors must match"))
