"""ImageNet-E edits end to end: attributes.csv from generate, the store's attributes table
from evaluate (on the fly and from a generated folder), and the hole-fill record."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from robustlab.errors import InputChangedError

from robustlab.workflows.demo import materialise
from robustlab.workflows.evaluate import evaluate
from robustlab.workflows.generate import ATTRIBUTES_CSV, MANIFEST, generate
from robustlab.store import Store

PHOTOS = ["rocket/rocket.jpg", "tripod/camera.png", "cat/chelsea.png"]
SHIFTS = ["obj_size", "obj_position"]


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    return materialise(tmp_path_factory.mktemp("demo"), PHOTOS)


@pytest.fixture(scope="module")
def generated(demo_data, tmp_path_factory):
    data, masks = demo_data
    out = tmp_path_factory.mktemp("gen") / "imagenet-e"
    res = generate("imagenet-e", data, out, shifts=SHIFTS, masks=masks, progress=False, workers=0)
    return out, res


def _csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_generate_writes_attributes_csv_and_fill_record(generated):
    out, res = generated
    rows = _csv(out / ATTRIBUTES_CSV)
    assert list(rows[0])[:7] == [
        "file",
        "sample_id",
        "shift",
        "level",
        "object_rate",
        "rate_before",
        "box_x",
    ]
    assert {"angle", "hf_before", "hf_after", "fill", "edited"} <= set(rows[0])
    # One row per written edit file, and each names a file that exists; every cell is
    # written (an unreachable size is the official copy of the original, edited=0).
    assert len(rows) == res.written == len(PHOTOS) * 4 and not res.failures
    from PIL import Image

    for r in rows:
        path = out / r["file"]
        assert path.is_file() and Image.open(path).size == (256, 256)  # the official frame
        assert r["fill"] == ("patchmatch" if r["edited"] == "1" else "none")
        if r["shift"] == "obj_size" and r["edited"] == "1":
            assert abs(float(r["object_rate"]) - float(r["level"])) <= 0.015
        if r["shift"] == "obj_position":
            assert r["edited"] == "1" and r["shrunk"] == "1"
    m = json.loads((out / MANIFEST).read_text())
    assert m["hole_fill"]["backend"] == "patchmatch" and len(m["hole_fill"]["fingerprint"]) == 16
    assert m["runs"][-1]["hole_fill"] == m["hole_fill"]


def test_resume_keeps_rows_and_other_backend_is_refused(generated, demo_data, monkeypatch):
    out, _ = generated
    before = _csv(out / ATTRIBUTES_CSV)
    data, masks = demo_data
    res = generate("imagenet-e", data, out, shifts=SHIFTS, masks=masks, progress=False, workers=0)
    assert res.written == 0 and _csv(out / ATTRIBUTES_CSV) == before
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "ns")
    with pytest.raises(InputChangedError, match="hole-fill backend of obj_size/0.10 patchmatch"):
        generate("imagenet-e", data, out, shifts=SHIFTS, masks=masks, progress=False, workers=0)


def test_evaluate_stores_measured_attributes(generated, demo_data, tmp_path):
    out, _ = generated
    data, masks = demo_data
    from robustlab.models import load_model

    db = tmp_path / "r.duckdb"
    model = load_model("lite0", label_space="demo")
    on_the_fly = dict(
        suite="imagenet-e",
        shifts=SHIFTS,
        masks=masks,
        db=db,
        label_space="demo",
        workers=0,
        progress=False,
    )
    fly = evaluate(model, data, **on_the_fly)
    from_disk = evaluate(
        model, out, shifts=SHIFTS, db=db, label_space="demo", workers=0, progress=False
    )
    store = Store(db)
    a_fly = store.attributes([fly.run_id])
    a_disk = store.attributes([from_disk.run_id])
    csv_rows = _csv(out / ATTRIBUTES_CSV)
    assert len(a_fly) == len(a_disk) == len(csv_rows) > 0
    key = ["sample_id", "shift", "level"]
    a_fly = a_fly.sort_values(key).reset_index(drop=True)
    a_disk = a_disk.sort_values(key).reset_index(drop=True)
    # On the fly and from the generated folder: the same pixels, so the same measurements.
    for col in ("object_rate", "box_x", "box_y", "hf_after"):
        np.testing.assert_allclose(a_fly[col].astype(float), a_disk[col].astype(float), rtol=1e-6)
    joined = store.predictions_with_attributes([fly.run_id])
    assert len(joined) == len(a_fly) and joined["correct"].dtype == bool
    run = store.get_run(fly.run_id)
    assert run["config"]["hole_fill"]["backend"] == "patchmatch"
    # Resuming the run with another fill backend would mix two backends' backgrounds.
    with pytest.raises(InputChangedError, match="drawn by the hole-fill backend patchmatch"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ROBUSTLAB_EDIT_FILL", "ns")
            evaluate(model, data, **on_the_fly)
    # Rerunning stores nothing twice.
    evaluate(model, data, **on_the_fly)
    assert len(store.attributes([fly.run_id])) == len(a_fly)
    assert "attributes.parquet" in {p.name for p in store.export_parquet(tmp_path / "pq")}

    # The report's ImageNet-E section: per-level accuracy and drop (from the stored cells),
    # and accuracy against the measured attributes; the edits are not "scenarios".
    from robustlab.workflows.report import build_report
    from robustlab.workflows.report.gather import gather

    d = gather(db, run_ids=[fly.run_id], n_resamples=50)
    cells = store.cell_table([fly.run_id]).set_index(["shift", "level"])
    clean = float(cells.loc[("clean", "0"), "top1"])
    assert set(zip(d.edits["shift"], d.edits["level"])) == {
        ("obj_size", "0.10"),
        ("obj_size", "0.08"),
        ("obj_size", "0.05"),
        ("obj_position", "random"),
    }
    for e in d.edits.itertuples():
        assert e.top1 == pytest.approx(float(cells.loc[(e.shift, e.level), "top1"]))
        assert e.drop == pytest.approx(clean - e.top1)
    assert set(d.edit_curves["attribute"]) == {"object_rate", "hf_after"}
    assert d.edit_curves.groupby("attribute")["n"].sum().eq(len(joined)).all()
    assert fly.run_id not in d.scenarios
    # The logistic fits on the measured attributes are those of the metric on the same rows.
    from robustlab.metrics.attributes import attribute_effects

    want = attribute_effects(joined)
    assert len(d.edit_effects) == len(want) > 0
    assert list(d.edit_effects["coef"].fillna(0)) == pytest.approx(list(want["coef"].fillna(0)))
    res = build_report(
        db, tmp_path / "report.html", run_ids=[fly.run_id], grid=False, n_resamples=50
    )
    assert {"edit-accuracy", "edit-drop"} <= set(res.tables)
    assert ("edit-effects" in res.tables) == bool((want["note"] == "").any())
    assert "fig-edit-attributes" in res.figures
