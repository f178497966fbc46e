"""robustlab saliency: the foreground metrics against Quantus, lite0's Grad-CAM against the
grad-cam library called directly, the stored run (resume, CLI) and the analysis."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import make_masked_folder

from robustlab.saliency.metrics import (
    foreground_metrics,
    mask_area,
    normalised_share,
    pointing_game,
    relevance_mass,
)

# find_spec, not importorskip: importing the grad-cam library costs seconds of CPU (torch's
# compiler stack), which every xdist worker would pay while collecting; the worker that
# runs these tests imports it when they need it.
if importlib.util.find_spec("pytorch_grad_cam") is None:
    pytest.skip("pip install 'robustlab[saliency]'", allow_module_level=True)


@pytest.fixture(scope="module")
def masked_photos(samples_dir, tmp_path_factory):
    """3 real photos in class folders, each with an elliptic mask PNG."""
    return make_masked_folder(samples_dir, tmp_path_factory.mktemp("saliency"), 3, 0.1)


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


# ----------------------------------------------------------------------------- metrics
def test_metrics_by_hand():
    s = np.array([[4.0, 1.0], [-2.0, 3.0]])
    m = np.array([[True, False], [False, False]])
    # positive mass 8, 4 of it inside; the maximum (4) is inside; the mask is 1/4 of the image
    assert relevance_mass(s, m)[0] == pytest.approx(0.5)
    assert pointing_game(s, m)[0] == 1.0
    assert mask_area(m)[0] == 0.25
    assert normalised_share(s, m)[0] == pytest.approx(2.0)
    assert pointing_game(s, ~m)[0] == 0.0
    # a flat map scores 1 whatever the object's size
    flat = np.ones((3, 8, 8))
    masks = np.zeros((3, 8, 8), bool)
    masks[0, :2], masks[1, :6], masks[2, 3, 3] = True, True, True
    assert np.allclose(normalised_share(flat, masks), 1.0)
    # no positive value, or no object: nothing to measure
    out = foreground_metrics(np.stack([-np.ones((4, 4)), np.ones((4, 4))]), np.zeros((2, 4, 4)))
    assert np.isnan(out["fg_share"]).all() and np.isnan(out["pointing"]).all()
    out = foreground_metrics(-np.ones((4, 4)), np.ones((4, 4)))
    assert np.isnan(out["fg_share"][0]) and np.isnan(out["pointing"][0])
    with pytest.raises(ValueError, match="must both be"):
        relevance_mass(np.ones((2, 4, 4)), np.ones((2, 4, 5)))


QUANTUS = Path(__file__).resolve().parent / "fixtures" / "saliency_quantus"


def test_metrics_equal_quantus_on_lite0_gradcam_maps():
    """Relevance Mass Accuracy and Pointing Game as Quantus 0.6 computed them on the same
    maps and masks (recorded by ``fixtures/saliency_quantus/make.py``, since Quantus needs
    a second OpenCV): lite0's Grad-CAM of real photos (non-negative, where the positive-part
    share is Quantus's definition) and random maps clipped at zero, with real elliptic
    masks."""
    ref = np.load(QUANTUS / "reference.npz")
    maps, masks = ref["maps"].astype(np.float64), ref["masks"]
    assert str(ref["quantus_version"]) == "0.6.0" and (maps >= 0).all()
    assert masks.any(axis=(1, 2)).all()
    np.testing.assert_allclose(relevance_mass(maps, masks), ref["relevance_mass"], rtol=1e-6)
    np.testing.assert_array_equal(pointing_game(maps, masks), ref["pointing_game"])
    # the masks are not trivially all-in or all-out: the metrics discriminate
    share = relevance_mass(maps, masks)
    assert (share > 0.05).all() and (share < 0.99).all()
    assert set(ref["pointing_game"]) == {0.0, 1.0}


def test_the_recorded_reference_is_what_quantus_computes():
    """Where Quantus is installed (it is no test dependency: see make.py), the recorded
    numbers are its numbers on the recorded maps."""
    pytest.importorskip(
        "quantus", reason="optional: pip install --no-deps quantus==0.6.0 cachetools"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("saliency_quantus_make", QUANTUS / "make.py")
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    ref = np.load(QUANTUS / "reference.npz")
    now = make.quantus_numbers(ref["maps"].astype(np.float64), ref["masks"])
    np.testing.assert_allclose(now["relevance_mass"], ref["relevance_mass"], rtol=1e-12)
    np.testing.assert_array_equal(now["pointing_game"], ref["pointing_game"])


def test_a_missing_library_is_one_line_naming_the_package(monkeypatch, tmp_path, capsys):
    import sys

    from robustlab.cli import main

    monkeypatch.setitem(sys.modules, "pytorch_grad_cam", None)  # as if not installed
    argv = ["saliency", "lite0", "--data", str(tmp_path), "--masks", str(tmp_path)]
    assert main([*argv, "--db", str(tmp_path / "x.duckdb")]) == 2
    err = capsys.readouterr().err
    assert "needs the grad-cam package" in err and "pip install grad-cam==1.5.7" in err
    assert "Traceback" not in err and not (tmp_path / "x.duckdb").exists()


# ----------------------------------------------------------------------------- layers
def test_target_layer_found_for_cnns_and_vits(lite0):
    import timm
    import torch
    import torchvision

    from robustlab.errors import InputError
    from robustlab.saliency.attribution import Attributor, find_target_layer

    assert find_target_layer(lite0.module, (224, 224)).name == "bn2"
    assert find_target_layer(torchvision.models.resnet18(), (224, 224)).name == "layer4"
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    layer = find_target_layer(vit, (224, 224))
    assert (layer.name, layer.kind, layer.grid, layer.prefix) == (
        "blocks.11.norm1",
        "tokens",
        (14, 14),
        1,
    )
    att = Attributor(vit, "gradcam", layer)
    maps = att(torch.randn(2, 3, 224, 224), [1, 2])
    att.close()
    assert maps.shape == (2, 224, 224) and np.isfinite(maps).all()
    user = find_target_layer(lite0.module, (224, 224), "blocks.5")
    assert (user.name, user.how) == ("blocks.5", "user")
    with pytest.raises(InputError, match="no layer"):
        find_target_layer(lite0.module, (224, 224), "blocks.99")


@pytest.mark.slow  # 40 CPU s: five CAM methods over real photos with and without the cut
def test_cam_methods_record_the_graph_above_their_layer_only(samples_dir, lite0):
    """A CAM method's backward pass stops at its layer: no parameter gets a gradient
    (the whole network's graph was 3 GB for 32 images, and grad-cam kept it until the
    next batch had built its own: 6 GB peaks), the parameters require gradients again
    afterwards, and the maps of every CAM method are grad-cam's own, bit for bit."""
    import pytorch_grad_cam
    import torch
    from PIL import Image
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    from robustlab.saliency.attribution import Attributor, find_target_layer
    from robustlab.saliency.methods import METHODS

    files = sorted(samples_dir.glob("*.JPEG"))[:2]
    prep = lite0.preprocessing
    x = torch.stack([prep.to_tensor(np.asarray(Image.open(f).convert("RGB"))) for f in files])
    net, layer, targets = lite0.module, find_target_layer(lite0.module, prep.hw), [0, 417]
    try:
        for method in [m for m, (lib, _, _) in METHODS.items() if lib == "grad-cam"]:
            net.zero_grad(set_to_none=True)
            att = Attributor(net, method, layer)
            try:
                ours = att(x, targets)
            finally:
                att.close()
            assert all(p.grad is None and p.requires_grad for p in net.parameters()), method
            cam = getattr(pytorch_grad_cam, METHODS[method][1])(
                model=net, target_layers=[net.get_submodule(layer.name)]
            )
            try:
                theirs = cam(input_tensor=x, targets=[ClassifierOutputTarget(t) for t in targets])
            finally:
                cam.activations_and_grads.release()
            # the library's own call goes through the whole network (the check can fail)
            assert any(p.grad is not None for p in net.parameters())
            np.testing.assert_array_equal(ours, theirs, err_msg=method)
    finally:
        net.zero_grad(set_to_none=True)


# ----------------------------------------------------------------------------- the run
def test_stored_gradcam_equals_the_library_called_directly(masked_photos, lite0, tmp_path):
    """The run's maps are pytorch_grad_cam.GradCAM's on lite0's bn2 for the predicted class,
    on the cell pixels evaluate sees; the stored numbers are the metrics of those maps."""
    import torch
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    from robustlab.data.sources import discover
    from robustlab.execution.tasks import CellImages
    from robustlab.workflows.saliency import saliency
    from robustlab.saliency.maps import input_mask, read_thumbnail, thumbnail
    from robustlab.store import Store
    from robustlab.suites import get_suite

    data, masks = masked_photos
    db = tmp_path / "s.duckdb"
    res = saliency(
        lite0, data, masks=masks, shifts=["blur_bg"], db=db, workers=0, batch_size=6, seed=1
    )
    assert res.record["saliency"]["layer"]["name"] == "bn2" and not res.record["resumed"]
    rows = Store(db).saliency(maps=True)
    assert len(rows) == 6 and res.record["n_written"] == 6
    run = Store(db).get_run(res.record["run_id"])
    assert run["config"]["task"] == "saliency" and run["status"] == "finished"

    samples = discover(data, masks=masks)
    images = CellImages(get_suite("ximagenet12").protocol, 1, with_mask=True)
    prep = lite0.preprocessing
    keys, x, ms = [], [], []
    for s in samples:
        base = images.base(s)
        for shift, level in (("clean", "0"), ("blur_bg", "default")):
            keys.append((s.id, shift, level))
            x.append(prep.to_uint8(images.cell(s, base, shift, level)))
            ms.append(input_mask(base.mask, prep))
    x = torch.stack(x)
    _, ids = lite0.predict_topk(x, k=1)
    net = lite0.module
    cam = GradCAM(model=net, target_layers=[net.bn2])
    try:
        direct = cam(
            input_tensor=prep.normalize(x),
            targets=[ClassifierOutputTarget(int(i)) for i in ids[:, 0]],
        )
    finally:
        cam.activations_and_grads.release()
    stored = rows.set_index(["sample_id", "shift", "level"]).loc[keys]
    assert list(stored["pred"]) == [int(i) for i in ids[:, 0]]
    np.testing.assert_allclose(stored["fg_share"], relevance_mass(direct, np.stack(ms)), atol=1e-5)
    for k, m in enumerate(direct):
        got = read_thumbnail(stored["map"].iloc[k]).astype(int)
        want = np.frombuffer(thumbnail(m), np.uint8).astype(int)
        assert np.abs(got.ravel() - want).max() <= 1  # float rounding of the resize

    # rerun: the same run, nothing recomputed
    again = saliency(lite0, data, masks=masks, shifts=["blur_bg"], db=db, workers=0, seed=1)
    assert again.record["run_id"] == res.record["run_id"]
    assert again.record["resumed"] and again.record["n_written"] == 0
    assert len(again.rows) == 6


@pytest.mark.slow
def test_cli_saliency_resumes_and_refuses(masked_photos, tmp_path, capsys):
    from robustlab.cli import main
    from robustlab.store import Store

    data, masks = masked_photos
    db = tmp_path / "c.duckdb"
    argv = ["saliency", "lite0", "--data", str(data), "--masks", str(masks), "--db", str(db)]
    argv += ["--suite", "imagenet9", "--shift", "only_bg_t,mixed_rand", "--workers", "1"]
    assert main([*argv, "--method", "input_x_gradient", "--no-progress"]) == 0
    out = capsys.readouterr()
    assert "mixed_rand" in out.out and "clean" in out.out and "only_bg_t" not in out.out
    assert "left out only_bg_t" in out.err and "captum" in out.err
    rows = Store(db).saliency()
    assert set(rows["shift"]) == {"clean", "mixed_rand"} and len(rows) == 6
    assert rows["fg_share"].between(0, 1).all()
    # a bad layer, a missing folder, a model without gradients: one line, exit 2
    assert main([*argv, "--target-layer", "nope"]) == 2
    assert "no layer 'nope'" in capsys.readouterr().err
    assert main([*argv[:3], str(tmp_path / "none"), *argv[4:]]) == 2
    assert main([*argv, "--method", "input_x_gradient", "--target-layer", "bn2"]) == 2
    assert "takes no --target-layer" in capsys.readouterr().err
    # the output check: --db over an input is refused before any work
    assert main([*argv[:7], str(masks), *argv[8:]]) == 2


# ----------------------------------------------------------------------------- analysis
def test_analysis_intervals_scores_and_small_n_labels():
    from robustlab.saliency.analysis import cell_summary, correlations, model_table

    rng = np.random.default_rng(0)
    rows = []
    for r, (fg, acc) in enumerate([(0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.8, 0.95)]):
        for i in range(20):
            for shift, level in (
                ("clean", "0"),
                ("mixed_same", "default"),
                ("mixed_rand", "default"),
            ):
                drop = 0.0 if shift == "clean" else (1 - fg) * 0.5 * (shift == "mixed_rand")
                rows.append(
                    {
                        "run_id": f"r{r}",
                        "sample_id": f"s{i}",
                        "shift": shift,
                        "level": level,
                        "fg_share": float(np.clip(fg + rng.normal(0, 0.05), 0, 1)),
                        "fg_share_norm": 1.0,
                        "pointing": 1.0,
                        "correct": bool(rng.random() < acc - drop),
                    }
                )
    df = pd.DataFrame(rows)
    summ = cell_summary(df, np.random.default_rng(1), n_resamples=200)
    assert list(summ["shift"][:3]) == ["clean", "mixed_rand", "mixed_same"]
    assert (summ["fg_share_lo"] <= summ["fg_share"]).all()
    assert (summ["fg_share"] <= summ["fg_share_hi"]).all()
    again = cell_summary(df, np.random.default_rng(1), n_resamples=200)
    pd.testing.assert_frame_equal(summ, again)  # explicit generator: reproducible
    models = model_table(df)
    assert list(models["run_id"]) == ["r0", "r1", "r2", "r3"]
    assert models["fg_clean"].is_monotonic_increasing
    assert models["bg_gap"].notna().all() and models["s_robust"].between(0, 1).all()
    corr = correlations(models).set_index("y")
    assert (corr["n"] == 4).all()
    assert corr.loc["s_robust", "note"].startswith("only 4 models: descriptive")
    two = correlations(models.iloc[:2]).set_index("y")
    assert (
        np.isnan(two.loc["s_robust", "pearson"])
        and "needs at least 3" in two.loc["s_robust", "note"]
    )


@pytest.mark.slow
def test_report_has_the_saliency_section(masked_photos, lite0, tmp_path):
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.report.build import build_report
    from robustlab.workflows.saliency import saliency

    data, masks = masked_photos
    db = tmp_path / "r.duckdb"
    evaluate(lite0, data, db=db, workers=0, progress=False)
    for method in ("gradcam", "input_x_gradient"):
        saliency(lite0, data, masks=masks, shifts=["color_grey"], method=method, db=db, workers=0)
    res = build_report(db, tmp_path / "report.html", n_resamples=100)
    assert {"saliency-cells", "saliency-models", "saliency-correlation"} <= set(res.tables)
    assert "saliency-overlays" in res.figures and "saliency-scatter-s_robust" in res.figures
    html = (tmp_path / "report.html").read_text()
    assert "2 model(s): no correlation (needs at least 3)" in html
    assert "input_x_gradient" in html and "gradcam" in html


@pytest.mark.slow
def test_a_model_trained_on_backgrounds_looks_less_at_the_object(samples_dir, tmp_path):
    """ImageNet-9's only_bg training: lite0's classifier retrained on the only_bg_t cells
    (object region removed) of 16 photos explains their classes with less of its saliency
    on the object than the original lite0, on the same clean images (paired; the masks
    are the fixture's ellipses). Linear probe (the features stay lite0's), so the shift
    comes from what the classifier now weighs: background channels."""
    from robustlab.data.sources import discover
    from robustlab.records.identity import data_fingerprint
    from robustlab.workflows.saliency import saliency
    from robustlab.workflows.train.finetune import TrainConfig
    from robustlab.workflows.train.protocols import train_on_cells
    from robustlab.workflows.train.splits import Split

    data, masks = make_masked_folder(samples_dir, tmp_path / "bg", 16, 0.0)
    ids = sorted(s.id for s in discover(data, masks=masks))
    split = Split(tuple(ids), (), 0.0, 0, data_fingerprint([("train", i) for i in ids]))
    trained = train_on_cells(
        "lite0",
        data,
        [("only_bg_t", "default")],
        split,
        config=TrainConfig(mode="linear", steps=100, batch_size=16, lr=0.01),
        out=tmp_path / "ckpt",
        suite="imagenet9",
        masks=masks,
        device="cpu",
        label_space="imagenet1k",
    )
    shares = {}
    for name, weights in (("original", None), ("only_bg", trained.checkpoint)):
        res = saliency(
            "lite0",
            data,
            masks=masks,
            shifts=["clean"],
            weights=weights,
            target="label",
            db=tmp_path / "s.duckdb",
            workers=0,
            device="cpu",
        )
        shares[name] = res.rows.set_index("sample_id")["fg_share"]
    diff = shares["only_bg"] - shares["original"]
    assert len(diff) == 16
    assert diff.mean() < 0
    assert (diff < 0).sum() >= 11  # a sign test at p < 0.11 over 16 paired images
