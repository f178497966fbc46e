"""Automatic masker on real pixels with known masks, the mask cache, and the CLI."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest
from PIL import Image

from robustlab.masks import AutoMasker, MaskerParams, grabcut_mask, iou, load_mask
from robustlab.masks.synthetic import composite, random_blob


def _photos(samples_dir, n, offset=0):
    files = sorted(p for p in samples_dir.glob("*.JPEG"))[offset : offset + n]
    return [np.asarray(Image.open(f).convert("RGB")) for f in files], files


@pytest.fixture(scope="module")
def composites(samples_dir):
    """Eight real-photo composites: a blob of one photo pasted on another, mask known."""
    photos, _ = _photos(samples_dir, 16, offset=100)
    rng = np.random.default_rng(2024)
    return [composite(photos[i], photos[i + 8], rng) for i in range(8)]


def _box(m):
    ys, xs = np.nonzero(m)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


def test_random_blob_is_reproducible_and_sized():
    a = random_blob(224, 224, 5)
    np.testing.assert_array_equal(a, random_blob(224, 224, 5))
    assert 0.1 < a.mean() < 0.45


def test_bbox_grabcut_recovers_known_masks(composites):
    scores = []
    for img, truth in composites:
        pred = grabcut_mask(img, bbox=_box(truth))
        assert pred.shape == truth.shape and pred.dtype == bool
        scores.append(iou(pred, truth))
    # measured about 0.96 mean IoU; a box alone (the seed) scores about 0.75
    assert np.mean(scores) > 0.85, scores
    assert np.mean([iou(_boxmask(t), t) for _, t in composites]) < np.mean(scores) - 0.1


def _boxmask(t):
    x0, y0, x1, y1 = _box(t)
    m = np.zeros_like(t)
    m[y0:y1, x0:x1] = True
    return m


def test_grabcut_is_deterministic_and_downscales(composites):
    img, truth = composites[0]
    big = np.asarray(Image.fromarray(img).resize((500, 500), Image.BILINEAR))
    bigm = np.asarray(Image.fromarray(truth).resize((500, 500), Image.NEAREST))
    a = grabcut_mask(big, bbox=_box(bigm), params=MaskerParams(max_side=200))
    b = grabcut_mask(big, bbox=_box(bigm), params=MaskerParams(max_side=200))
    np.testing.assert_array_equal(a, b)
    assert a.shape == (500, 500) and iou(a, bigm) > 0.8


def test_grabcut_needs_a_seed(composites):
    with pytest.raises(ValueError, match="needs a bbox or a CAM"):
        grabcut_mask(composites[0][0])
    with pytest.raises(ValueError, match="does not cover"):
        grabcut_mask(composites[0][0], bbox=(500, 500, 600, 600))
    with pytest.raises(ValueError, match="unknown masking method"):
        AutoMasker("watershed")


def test_whole_image_box_still_runs(composites):
    img, truth = composites[1]
    pred = grabcut_mask(img, bbox=(0, 0, 224, 224))
    assert pred.shape == truth.shape


def _lite0():
    try:
        from robustlab.models import load_model
    except ImportError:
        pytest.skip("robustlab.models.load_model has not landed yet")
    return load_model("lite0")


def test_cam_grabcut_on_known_masks(composites):
    model = _lite0()
    masker = AutoMasker("cam-grabcut", model=model)
    scores, prior = [], []
    for img, truth in composites:
        pred, info = masker(img)
        assert info["seed"] == "cam" and 0 <= info["cam_class"] < 1000
        scores.append(iou(pred, truth))
        prior.append(iou(np.ones_like(truth), truth))  # knowing nothing: the whole image
    # The pasted "object" is a blob of another photo, which the classifier need not see as
    # the object, so the CAM seed is often wrong on single composites: mean IoU with the
    # real lite0 is 0.34 on these 8 (0.72 on 16 composites with seed 7, 0.71 on 40 in
    # benchmarks/scenes.py). It must still beat the uninformed whole-image mask clearly.
    assert np.mean(scores) > np.mean(prior) + 0.05, (scores, prior)


def _dataset(samples_dir, tmp_path, n=3):
    _, files = _photos(samples_dir, n, offset=40)
    data = tmp_path / "data"
    data.mkdir()
    rows = []
    for f in files:
        shutil.copy(f, data / f.name)
        w, h = Image.open(f).size
        rows.append(f"{f.name},{w // 6},{h // 6},{w - w // 6},{h - h // 6}")
    labels = {r["file"]: r for r in csv.DictReader(open(samples_dir / "labels.csv"))}
    with open(data / "labels.csv", "w") as fh:
        fh.write("file,index\n" + "".join(f"{f.name},{labels[f.name]['index']}\n" for f in files))
    (tmp_path / "boxes.csv").write_text("file,x0,y0,x1,y1\n" + "\n".join(rows) + "\n")
    (data / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    with open(data / "labels.csv", "a") as fh:
        fh.write(f"broken.jpg,{labels[files[0].name]['index']}\n")
    return data, files


def test_cli_masks_writes_pngs_and_quality(samples_dir, tmp_path, capsys):
    from robustlab.cli import main

    data, files = _dataset(samples_dir, tmp_path)
    out = tmp_path / "masks"
    rc = main(
        [
            "masks",
            "--data",
            str(data),
            "--out",
            str(out),
            "--method",
            "grabcut",
            "--bboxes",
            str(tmp_path / "boxes.csv"),
        ]
    )
    assert rc == 0
    # progress lines on stderr; the unreadable image counts as done, so it ends at 100 %
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("masks: ")]
    assert progress[0] == "masks: 0/4 (0 %)" and progress[-1].startswith("masks: 4/4 (100 %)")
    for f in files:
        m = load_mask(out / (f.name + ".png"))  # the full file name: never shared
        assert m.shape == Image.open(f).size[::-1] and 0 < m.mean() < 1
    report = json.loads((out / "masks_quality.json").read_text())
    assert report["n"] == 3 and report["n_written"] == 3 and report["n_skipped"] == 1
    assert report["skipped"][0]["id"] == "broken.jpg"
    assert {r["seed"] for r in report["records"]} == {"bbox"}
    rows = list(csv.DictReader(open(out / "masks_quality.csv")))
    assert [r["id"] for r in rows] == sorted(f.name for f in files)
    assert all(0 < float(r["area_fraction"]) < 1 for r in rows)
    # a rerun reuses the cached PNGs
    before = (out / (files[0].name + ".png")).stat().st_mtime_ns
    assert (
        main(
            [
                "masks",
                "--data",
                str(data),
                "--out",
                str(out),
                "--bboxes",
                str(tmp_path / "boxes.csv"),
            ]
        )
        == 0
    )
    assert (out / (files[0].name + ".png")).stat().st_mtime_ns == before
    assert {r["seed"] for r in json.loads((out / "masks_quality.json").read_text())["records"]} == {
        "cached"
    }


def test_cli_masks_bad_arguments(tmp_path, capsys):
    from robustlab.cli import main

    assert main(["masks", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert "error" in capsys.readouterr().err


def test_unusable_masks_are_recorded_but_not_written(tmp_path):
    """A uniform image gives GrabCut nothing to separate: flagged, no PNG, so scenarios skip it."""
    from robustlab.data.sources import discover
    from robustlab.masks.build import build_masks

    data = tmp_path / "data" / "grey"
    data.mkdir(parents=True)
    Image.fromarray(np.full((100, 100, 3), 128, np.uint8)).save(data / "flat.png")
    (tmp_path / "boxes.csv").write_text("file,x0,y0,x1,y1\ngrey/flat.png,20,20,80,80\n")
    samples = discover(tmp_path / "data", bboxes=tmp_path / "boxes.csv")
    summary = build_masks(samples, tmp_path / "out", AutoMasker("grabcut"))
    assert summary["flag_counts"] == {"empty": 1} and summary["n_suspicious"] == 0
    assert not (tmp_path / "out/grey/flat.png").exists()
    rec = json.loads((tmp_path / "out/masks_quality.json").read_text())["records"][0]
    assert rec["mask"] == "" and rec["flags"] == ["empty"]


def test_a_box_outside_its_image_is_a_counted_skip_and_a_bug_fails(tmp_path, monkeypatch):
    """Skips are explicit: a box that misses its image is bad input (CellSkipped: counted,
    with its reason); a plain ValueError inside the masker is a bug and fails the run."""
    from robustlab.data.sources import discover
    from robustlab.masks.build import build_masks

    data = tmp_path / "data" / "grey"
    data.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png"):
        Image.fromarray(rng.integers(0, 255, (60, 60, 3), dtype=np.uint8)).save(data / name)
    (tmp_path / "boxes.csv").write_text(
        "file,x0,y0,x1,y1\ngrey/a.png,10,10,50,50\ngrey/b.png,500,500,600,600\n"
    )
    samples = discover(tmp_path / "data", bboxes=tmp_path / "boxes.csv")
    summary = build_masks(samples, tmp_path / "out", AutoMasker("grabcut"))
    assert summary["n_skipped"] == 1 and summary["n"] == 1
    assert "does not cover" in summary["skipped"][0]["reason"]

    import robustlab.masks.build as build

    def broken(*args, **kwargs):
        raise ValueError("a bug in the masker")

    monkeypatch.setattr(build, "_make_mask", broken)
    with pytest.raises(ValueError, match="a bug in the masker"):
        build_masks(samples, tmp_path / "out2", AutoMasker("grabcut"))
