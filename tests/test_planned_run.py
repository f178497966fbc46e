"""Planners return data (:class:`PlannedRun`), and one function, ``build_plan``, turns it
and the loaded model into the run: no planner loads a model or hands back a callback."""

from __future__ import annotations

import csv
import dataclasses
import shutil
from pathlib import Path

import pytest

from robustlab.workflows.evaluate import EvaluateRequest, make_plan
from robustlab.workflows.evaluate.plan import SourceIdentity, planned_run
from robustlab.workflows.evaluate.record import PlannedRun, build_plan


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory) -> Path:
    """Four real photos with their labels.csv rows."""
    dst = tmp_path_factory.mktemp("planned") / "photos"
    dst.mkdir()
    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:4]
    for r in rows:
        shutil.copy(samples_dir / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


def _request(photos: Path, model: str = "lite0") -> EvaluateRequest:
    return EvaluateRequest.build(
        model, photos, suite="imagenet-c", shifts=["gaussian_noise"], levels=[1], device="cpu"
    )


def test_a_source_planner_returns_frozen_data_without_a_model(photos):
    planned = planned_run(_request(photos))
    assert isinstance(planned, PlannedRun) and isinstance(planned.identity, SourceIdentity)
    assert [s.id for s in planned.samples] == sorted(p.name for p in photos.glob("*.JPEG"))
    assert len(planned.labels) == 4 and planned.space.name == "imagenet1k"
    assert [(s, str(lv)) for s, lv in planned.cells] == [("clean", "0"), ("gaussian_noise", "1")]
    assert planned.suite is not None and planned.suite.name == "imagenet-c"
    assert planned.protocol is planned.images.protocol
    assert not any(callable(getattr(planned, f.name)) for f in dataclasses.fields(planned))
    with pytest.raises(dataclasses.FrozenInstanceError):
        planned.cells = []  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        planned.identity.shift_path = "torch:cpu"  # type: ignore[misc]


def test_build_plan_gives_make_plans_run(photos):
    """The data alone decides the run: two models planned from one PlannedRun get the
    records make_plan gives them (same inputs, each its own model's id)."""
    request = _request(photos)
    planned = planned_run(request)
    plan = build_plan(planned, request.model, device="cpu")
    assert plan.record.run_id == make_plan(request).record.run_id
    assert plan.cells == planned.cells and plan.samples is planned.samples
    other = _request(photos, "lite1")
    lite1 = build_plan(planned, other.model, device="cpu").record
    assert lite1.run_id == make_plan(other).record.run_id != plan.record.run_id
    assert lite1.data_fingerprint == plan.record.data_fingerprint
