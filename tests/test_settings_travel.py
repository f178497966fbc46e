"""Settings travel with the work: a worker computes pixels with the settings the run record
describes, whatever its own environment says.

The attribute edits' hole-fill backend is the setting under test (``telea`` and ``ns`` are
both OpenCV, no weights): the driver plans with ``ns`` (the request's ``edit_fill``, in no
environment), and each worker's environment says ``telea``. Settings used to reach workers
through ``os.environ``, so a worker whose environment disagreed (a Ray worker started
before the driver configured anything, a worker on another node) filled holes with its own
backend while the manifest said ``ns``. Now the resolved settings are part of the work
(generate's job, ``CellImages.settings``) and every tool is handed them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from robustlab.workflows.generate import worker as generate_worker
from robustlab.workflows.demo import materialise
from robustlab.workflows.generate import MANIFEST, generate
from robustlab.records.manifest import LOCK
from robustlab.settings import ToolSettings
from robustlab.shifts.attributes import fill

PHOTOS = ["rocket/rocket.jpg", "cat/chelsea.png"]
SHIFTS = ["obj_position"]  # every cell is edited, so every cell has a filled hole


def _init_worker_whose_environment_says_telea(*args):
    """The pool's initialiser, in a worker whose own environment names another backend."""
    from robustlab.workflows.generate.worker import init_worker

    os.environ[fill.ENV_FILL] = "telea"
    init_worker(*args)


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        # hidden: the folder's owner mark and its run's hash journal, named by the run
        if p.is_file()
        and p.name not in (MANIFEST, LOCK)
        and not any(part.startswith(".") for part in p.relative_to(out).parts)
    }


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    return materialise(tmp_path_factory.mktemp("demo"), PHOTOS)


def _generate(demo_data, out: Path, **kw):
    data, masks = demo_data
    return generate("imagenet-e", data, out, shifts=SHIFTS, masks=masks, progress=False, **kw)


@pytest.fixture(scope="module")
def references(demo_data, tmp_path_factory) -> dict[str, dict[str, bytes]]:
    """Each backend's files, made in this process (no worker)."""
    found = {}
    for backend in ("telea", "ns"):
        with pytest.MonkeyPatch.context() as mp:
            mp.delenv(fill.ENV_FILL, raising=False)
            out = tmp_path_factory.mktemp(backend) / "out"
            res = _generate(demo_data, out, workers=0, edit_fill=backend)
            assert res.written == len(PHOTOS) and not res.failures
            found[backend] = _files(out)
    assert found["telea"].keys() == found["ns"].keys()
    images = [k for k in found["ns"] if k.endswith((".png", ".JPEG", ".jpg"))]
    assert images and all(found["telea"][k] != found["ns"][k] for k in images)  # can fail
    return found


@pytest.fixture
def no_backend_in_the_environment(monkeypatch):
    """The driver's request names ``ns``; nothing in any environment."""
    monkeypatch.delenv(fill.ENV_FILL, raising=False)


@pytest.mark.long
def test_pool_workers_fill_with_the_tasks_backend_not_their_environment(
    demo_data, references, no_backend_in_the_environment, tmp_path, monkeypatch
):
    monkeypatch.setattr(generate_worker, "init_worker", _init_worker_whose_environment_says_telea)
    out = tmp_path / "pool"
    res = _generate(demo_data, out, workers=2, edit_fill="ns")
    assert res.written == len(PHOTOS) and not res.failures
    assert json.loads((out / MANIFEST).read_text())["hole_fill"]["backend"] == "opencv-ns"
    assert _files(out) == references["ns"]


def _hwc(img):
    import torch

    return torch.from_numpy(img.copy())


def _cells(demo_data, workers: int, settings: ToolSettings) -> list:
    """The evaluation's work unit (TaskDataset over CellImages) for every photo, computed
    here (workers=0) or in a real process pool whose workers inherit an environment that
    names no backend (so ``patch``, the default, if they read their own)."""
    from robustlab.data.sources import discover
    from robustlab.execution.executors import iterate_local
    from robustlab.execution.tasks import CellImages, Task, TaskDataset
    from robustlab.shifts.registry import get_shift
    from robustlab.suites import get_suite

    data, masks = demo_data
    samples = discover(data, masks=masks)
    protocol = get_suite("imagenet-e").protocol
    images = CellImages(protocol, 0, with_mask=True, settings=settings)  # as a plan makes it
    cells = tuple((s, get_shift(s).levels[0]) for s in SHIFTS)
    tasks = [Task(i, cells) for i in range(len(samples))]
    items = list(iterate_local(TaskDataset(samples, tasks, images, _hwc), workers=workers))
    assert all(not errors for _, _, errors, _ in items)
    return [(i, t.numpy().tobytes()) for i, t, _, _ in items]


def test_evaluation_workers_compute_cells_with_the_planned_backend(
    demo_data, no_backend_in_the_environment
):
    ns = ToolSettings(edit_fill="ns")
    here = _cells(demo_data, workers=0, settings=ns)
    assert _cells(demo_data, workers=2, settings=ns) == here
    assert _cells(demo_data, workers=0, settings=ToolSettings()) != here  # can fail


@pytest.mark.slow
def test_ray_workers_started_before_the_driver_configured(
    ray_cluster, demo_data, references, no_backend_in_the_environment, tmp_path
):
    """The session's Ray workers were started before this test asked for ``ns``, with an
    environment that has no backend (so ``patch``, the default, if they read their own)."""
    out = tmp_path / "ray"
    res = _generate(demo_data, out, backend="ray", edit_fill="ns")
    assert res.written == len(PHOTOS) and not res.failures
    assert json.loads((out / MANIFEST).read_text())["hole_fill"]["backend"] == "opencv-ns"
    assert _files(out) == references["ns"]
