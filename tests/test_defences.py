"""Test-time defences: CLAHE, NL-means, ten-crop TTA, their run identity and their CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from robustlab.defences import (
    Clahe,
    DefendedModel,
    NLMeans,
    TenCrop,
    defence_label,
    defend,
    get_preprocess,
    get_tta,
    noise_sigma,
)
from robustlab.errors import InputError


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


def _rmse(a, b) -> float:
    return float(np.sqrt(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)))


# ------------------------------------------------------------------ CLAHE
@pytest.mark.parametrize(
    "clahe, grid_wh", [(Clahe(), (8, 8)), (Clahe(clip_limit=3.5, tile_grid=(2, 6)), (6, 2))]
)
def test_clahe_is_cv2_clahe_on_the_lab_lightness(photo, clahe, grid_wh):
    import cv2

    lab = cv2.cvtColor(photo, cv2.COLOR_RGB2LAB)
    by_hand = cv2.createCLAHE(clipLimit=clahe.clip_limit, tileGridSize=grid_wh)
    lab[..., 0] = by_hand.apply(np.ascontiguousarray(lab[..., 0]))
    expected = cv2.cvtColor(lab, cv2.COLOR_LAB2RGB)
    out = clahe(photo)
    assert out.dtype == np.uint8 and out.shape == photo.shape
    np.testing.assert_array_equal(out, expected)
    assert not np.array_equal(out, photo)


def test_clahe_restores_local_contrast_of_a_washed_out_photo(photo):
    import cv2

    flat = (128 + (photo.astype(np.float64) - 128) * 0.3).round().astype(np.uint8)
    lightness = cv2.cvtColor(flat, cv2.COLOR_RGB2LAB)[..., 0]
    out = cv2.cvtColor(Clahe()(flat), cv2.COLOR_RGB2LAB)
    assert out[..., 0].std() > 1.5 * lightness.std()
    # the colour channels are only touched by the Lab round trip
    ab_in = cv2.cvtColor(flat, cv2.COLOR_RGB2LAB)[..., 1:].astype(int)
    assert np.abs(out[..., 1:].astype(int) - ab_in).mean() < 2


# ------------------------------------------------------------------ noise estimate, NL-means
@pytest.mark.parametrize("sigma", [5.0, 15.0, 30.0])
def test_wavelet_noise_estimate_recovers_added_gaussian_noise(photo, sigma):
    rng = np.random.default_rng(int(sigma))
    noisy = np.clip(photo + rng.normal(0, sigma, photo.shape), 0, 255).astype(np.uint8)
    assert noise_sigma(noisy) == pytest.approx(sigma, rel=0.15)
    assert noise_sigma(photo) < 3  # a clean JPEG photo: a pixel value or so


def test_nlmeans_barely_changes_a_clean_photo_and_removes_most_added_noise(photo):
    nlm = NLMeans()
    clean_out = nlm(photo)
    assert clean_out.dtype == np.uint8 and clean_out.shape == photo.shape
    change = np.abs(clean_out.astype(int) - photo.astype(int))
    assert change.mean() < 1.0 and np.mean(change > 8) < 0.01
    rng = np.random.default_rng(0)
    noisy = np.clip(photo + rng.normal(0, 20, photo.shape), 0, 255).astype(np.uint8)
    before, after = _rmse(noisy, photo), _rmse(nlm(noisy), photo)
    assert after < 0.45 * before  # most of the noise energy is gone
    # a stronger filter (parameters are data) smooths more
    assert _rmse(NLMeans(h_factor=1.5)(noisy), noisy) > _rmse(nlm(noisy), noisy)


def test_nlmeans_leaves_an_image_without_measurable_noise_alone():
    ramp = np.tile(np.arange(64, dtype=np.uint8)[None, :, None] * 3, (64, 1, 3))
    assert noise_sigma(ramp) < 0.5
    np.testing.assert_array_equal(NLMeans()(ramp), ramp)


# ------------------------------------------------------------------ ten-crop
def test_ten_crop_is_the_mean_softmax_of_ten_views_cut_by_hand(lite0, photo):
    import torch
    from PIL import Image

    model = defend(lite0, tta="ten-crop")
    x = model.preprocessing.to_uint8(photo, crop=False)
    assert tuple(x.shape) == (3, 256, 256)
    big = np.asarray(Image.fromarray(photo).resize((256, 256), Image.BICUBIC))
    np.testing.assert_array_equal(x.permute(1, 2, 0).numpy(), big)
    views = [
        big[y : y + 224, x0 : x0 + 224] for y, x0 in ((0, 0), (0, 32), (32, 0), (32, 32), (16, 16))
    ]
    views += [v[:, ::-1] for v in views]
    assert len({v.tobytes() for v in views}) == 10  # ten different views
    batch = torch.from_numpy(np.stack(views).copy()).permute(0, 3, 1, 2).contiguous()
    by_hand = torch.softmax(lite0.predict(batch), dim=1).mean(0)
    probs, ids = model.predict_topk(x[None], k=5)
    top = torch.topk(by_hand, 5)
    assert ids[0].tolist() == top.indices.tolist()
    torch.testing.assert_close(probs[0], top.values, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(
        torch.softmax(model.predict(x[None]), 1)[0], by_hand, rtol=1e-4, atol=1e-6
    )
    # the plain model on the same photo sees one view: another distribution
    plain = torch.softmax(lite0.predict(lite0.preprocessing.to_uint8(photo, crop=False)[None]), 1)
    assert not torch.allclose(plain[0], by_hand, atol=1e-3)


def test_ten_crop_refuses_a_batch_of_the_plain_input_size(lite0, photo):
    model = defend(lite0, tta="ten-crop")
    small = lite0.preprocessing.to_uint8(photo, crop=False)[None]
    with pytest.raises(ValueError, match="larger than the model input 224x224"):
        model.predict_topk(small)


def test_ten_crop_source_of_a_raw_photo_is_the_standard_256_resize(lite0, samples_dir):
    from PIL import Image

    rgb = np.asarray(Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB"))
    model = defend(lite0, tta=TenCrop())
    assert tuple(model.transform(rgb).shape) == (3, 256, 256)
    # the centre view is the plain model's centre crop, up to the resize rounding
    centre = model.preprocessing.resize_crop(rgb)[16:240, 16:240]
    assert _rmse(centre, lite0.preprocessing.resize_crop(rgb)) < 1.0


def test_defended_model_keeps_the_adapter_interface_and_pickles(lite0, photo):
    import pickle

    import torch

    model = defend(lite0, preprocess="clahe")
    assert isinstance(model, DefendedModel) and model.spec == "lite0"
    assert model.weights_hash == lite0.weights_hash and model.module is lite0.module
    assert model.describe()["defence"] == {"preprocess": Clahe().describe(), "tta": None}
    x = model.preprocessing.to_uint8(photo, crop=False)
    np.testing.assert_array_equal(x.permute(1, 2, 0).numpy(), Clahe()(photo))
    torch.testing.assert_close(model.predict(x[None]), lite0.predict(x[None]))
    prep = pickle.loads(pickle.dumps(model.preprocessing))  # what the workers receive
    assert torch.equal(prep.to_uint8(photo, crop=False), x)
    assert defend(lite0) is lite0
    with pytest.raises(TypeError, match="already defended"):
        DefendedModel(model)


# ------------------------------------------------------------------ specs
def test_specs_parse_parameters_as_data_and_refuse_unknown_names():
    assert get_preprocess("clahe:clip_limit=3,tile_grid=4x6") == Clahe(3.0, (4, 6))
    assert get_preprocess("clahe:tile_grid=4") == Clahe(tile_grid=(4, 4))
    assert get_preprocess("nlmeans:patch_size=7") == NLMeans(patch_size=7)
    assert get_tta("ten-crop:scale=0.8") == TenCrop(0.8)
    assert get_preprocess(None) is None and get_preprocess("none") is None
    with pytest.raises(
        InputError, match=r"unknown --preprocess 'sharpen'; choose from clahe, nlmeans"
    ):
        get_preprocess("sharpen")
    with pytest.raises(InputError, match="unknown --tta 'five-crop'; choose from ten-crop"):
        get_tta("five-crop")
    with pytest.raises(
        InputError, match="clahe has no parameter 'clip'; its parameters are clip_limit, tile_grid"
    ):
        get_preprocess("clahe:clip=2")
    with pytest.raises(InputError, match="not a valid value"):
        get_preprocess("clahe:clip_limit=high")
    with pytest.raises(InputError, match="scale must be in"):
        get_tta("ten-crop:scale=1")
    assert (
        defence_label({"preprocess": Clahe().describe(), "tta": TenCrop().describe()})
        == "clahe+ten-crop"
    )
    assert (
        defence_label({"preprocess": Clahe(3.0).describe(), "tta": None}) == "clahe(clip_limit=3.0)"
    )
    assert defence_label(None) is None


# ------------------------------------------------------------------ runs
@pytest.fixture(scope="module")
def tiny(samples_dir, tmp_path_factory):
    """Three real photos in class folders."""
    import shutil

    root = tmp_path_factory.mktemp("defences") / "data"
    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:3]
    for r in rows:
        (root / r["wnid"]).mkdir(parents=True)
        shutil.copy(samples_dir / r["file"], root / r["wnid"] / r["file"])
    return root


def test_defences_are_part_of_the_run_identity_and_never_resume_each_other(lite0, tiny, tmp_path):
    from robustlab.workflows.evaluate import evaluate
    from robustlab.store import Store
    from robustlab.store.queries import find_baseline_run
    from robustlab.workflows.results import results_table

    db = tmp_path / "r.duckdb"
    kw = {"db": db, "workers": 0, "progress": False}  # the clean photos
    ids = {}
    for name, pre, tta in [
        ("plain", None, None),
        ("clahe", "clahe", None),
        ("clahe3", "clahe:clip_limit=3", None),
        ("tta", None, "ten-crop"),
        ("both", "clahe", "ten-crop"),
    ]:
        res = evaluate(lite0, tiny, preprocess=pre, tta=tta, **kw)
        assert res.n_written == 3 and not res.resumed
        ids[name] = res.run_id
    assert len(set(ids.values())) == 5
    again = evaluate(lite0, tiny, preprocess="clahe", **kw)
    assert again.run_id == ids["clahe"] and again.resumed
    assert again.n_written == 0
    assert evaluate(lite0, tiny, **kw).run_id == ids["plain"]
    store = Store(db)
    runs = store.runs().set_index("run_id")
    assert "defence" not in runs.loc[ids["plain"], "config"]
    assert runs.loc[ids["both"], "config"]["defence"] == {
        "preprocess": {"name": "clahe", "clip_limit": 2.0, "tile_grid": [8, 8]},
        "tta": {"name": "ten-crop", "scale": 0.875},
    }
    assert runs.loc[ids["clahe"], "config"]["model"]["defence"]["preprocess"]["name"] == "clahe"
    # only the plain run can be the CE baseline of its model
    for rid in ids.values():
        assert (
            find_baseline_run(store, runs.loc[rid].to_dict() | {"run_id": rid}, "lite0")
            == ids["plain"]
        )
    table, _ = results_table(store, baseline="lite0")
    models = dict(zip(table["run_id"], table["model"]))
    assert (
        models[ids["plain"][:8]] == "lite0" and models[ids["both"][:8]] == "lite0 +clahe+ten-crop"
    )
    assert models[ids["clahe3"][:8]] == "lite0 +clahe(clip_limit=3.0)"
    # CLAHE changes the pixels, so the probabilities change
    preds = store.predictions([ids["plain"], ids["clahe"]])
    p = {
        rid: g.sort_values(["sample_id", "shift"])["top5_probs"].tolist()
        for rid, g in preds.groupby("run_id")
    }
    assert not np.allclose(np.stack(p[ids["plain"]]), np.stack(p[ids["clahe"]]))


def test_earlier_run_note_names_the_defence_and_nothing_else():
    from robustlab.records.identity import input_changes

    prep = {"input_size": 224, "mean": (0.5, 0.5, 0.5)}
    old = {"preprocessing": {"input_size": 224, "mean": [0.5, 0.5, 0.5]}, "defence": None}
    new = {"preprocessing": prep, "defence": {"preprocess": Clahe().describe(), "tta": None}}
    assert input_changes(old, new) == ["defence none -> clahe"]


@pytest.mark.long
def test_cli_evaluate_with_defences_then_summary_and_report(
    tiny, tmp_path, capsys, caplog, monkeypatch
):
    from robustlab.cli import main

    monkeypatch.chdir(tmp_path)
    base = [
        "evaluate",
        "lite0",
        "--data",
        str(tiny),
        "--suite",
        "imagenet-c",
        "--shift",
        "gaussian_noise",
        "--level",
        "5",
        "--db",
        "r.duckdb",
        "--no-progress",
    ]
    assert main([*base, "--workers", "0"]) == 0
    capsys.readouterr()
    # NL-means runs where the images are made: in a worker process here
    assert main([*base, "--preprocess", "nlmeans", "--workers", "1"]) == 0
    assert "lite0 +nlmeans" in capsys.readouterr().out
    assert any("defence none -> nlmeans" in r.getMessage() for r in caplog.records)
    assert (
        main(
            ["results", "--db", "r.duckdb", "--summary", "--baseline", "lite0", "--format", "json"]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert sorted(str(r["defence"]) for r in rows) == ["None", "nlmeans"]
    assert all(r["baseline"].startswith("lite0 (") for r in rows)
    assert main(["report", "--db", "r.duckdb", "--out", "report.html"]) == 0
    html = (tmp_path / "report.html").read_text()
    assert "lite0 +nlmeans" in html and ">Defence<" in html


def test_cli_unknown_defence_is_one_line_listing_the_choices(tiny, tmp_path, capsys, monkeypatch):
    from robustlab.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["evaluate", "lite0", "--data", str(tiny), "--tta", "five-crop"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "robustlab evaluate: error: unknown --tta 'five-crop'; choose from ten-crop"
    ]
    assert main(["train", "lite0", "--data", str(tiny), "--preprocess", "sharpen"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "robustlab train: error: unknown --preprocess 'sharpen'; choose from clahe, nlmeans"
    ]
    assert not list(tmp_path.iterdir())  # nothing written


# ------------------------------------------------------------------ CLAHE fine-tuning
@pytest.fixture(scope="module")
def crops(samples_dir, tmp_path_factory):
    """Three classes, four crops of each class's photo (real pixels, other framings)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("clahe-train") / "data"
    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = [
            r for r in csv.DictReader(fh) if min(Image.open(samples_dir / r["file"]).size) >= 200
        ][:3]
    for r in rows:
        img = Image.open(samples_dir / r["file"]).convert("RGB")
        w, h = img.size
        (root / r["wnid"]).mkdir(parents=True)
        for k in range(4):
            cw, ch = int(w * 0.75), int(h * 0.75)
            x0, y0 = (w - cw) * (k % 2), (h - ch) * (k // 2)
            img.crop((x0, y0, x0 + cw, y0 + ch)).save(root / r["wnid"] / f"{k}.JPEG", quality=95)
    return root


def test_clahe_fine_tuning_trains_on_clahe_pixels(crops, tmp_path):
    import torch

    from robustlab.models import load_model
    from robustlab.workflows.train import TrainConfig, make_split, train_on_cells

    split = make_split(
        load_model("lite0", device="cpu"), crops, suite="imagenet-c", test_fraction=0.25
    )
    cfg = TrainConfig(mode="linear", steps=3, batch_size=4)
    kw = {"config": cfg, "out": tmp_path, "suite": "imagenet-c", "device": "cpu"}
    plain = train_on_cells("lite0", crops, [("clean", 0)], split, **kw)
    clahe = train_on_cells("lite0", crops, [("clean", 0)], split, preprocess="clahe", **kw)
    assert plain.record["preprocess"] is None and "preprocess" not in plain.record["identity"]
    assert clahe.record["preprocess"] == Clahe().describe()
    assert clahe.checkpoint != plain.checkpoint
    # same seed, same batches: the head differs only because the pixels did
    a, b = (
        torch.load(t.checkpoint, weights_only=True)["classifier.weight"] for t in (plain, clahe)
    )
    assert not torch.equal(a, b)
    assert train_on_cells("lite0", crops, [("clean", 0)], split, preprocess="clahe", **kw).reused


@pytest.mark.long
def test_cli_train_clahe_evaluates_behind_clahe_and_evaluate_warns_without_it(
    crops, tmp_path, caplog
):
    from robustlab.cli import main
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.store import Store

    db = tmp_path / "r.duckdb"
    assert (
        main(
            [
                "train",
                "lite0",
                "--data",
                str(crops),
                "--suite",
                "imagenet-c",
                "--protocol",
                "ex1",
                "--shift",
                "contrast",
                "--level",
                "3",
                "--steps",
                "3",
                "--train-batch-size",
                "4",
                "--test-fraction",
                "0.25",
                "--out",
                str(tmp_path / "ckpt"),
                "--db",
                str(db),
                "--device",
                "cpu",
                "--preprocess",
                "clahe",
            ]
        )
        == 0
    )
    (config,) = Store(db).runs()["config"]
    assert config["defence"] == {"preprocess": Clahe().describe(), "tta": None}
    assert config["fine_tuned"]["preprocess"] == Clahe().describe()
    ckpt = Path(config["fine_tuned"]["checkpoint"])
    record = json.loads(ckpt.with_suffix(".json").read_text())
    assert record["preprocess"]["name"] == "clahe" and record["identity"]["preprocess"]
    # evaluating the CLAHE-trained checkpoint without CLAHE says so, in one warning line
    caplog.clear()
    make_plan(EvaluateRequest.build("lite0", crops, weights=str(ckpt), device="cpu"))
    lines = [r.getMessage() for r in caplog.records if "fine-tuned on" in r.getMessage()]
    assert len(lines) == 1 and "fine-tuned on clahe images" in lines[0]
    assert "pass --preprocess clahe" in lines[0]
    caplog.clear()
    make_plan(
        EvaluateRequest.build("lite0", crops, weights=str(ckpt), device="cpu", preprocess="clahe")
    )
    assert not [r for r in caplog.records if "fine-tuned on" in r.getMessage()]
