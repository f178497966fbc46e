"""Per-benchmark evaluation protocols (robustlab.suites.Protocol) and the models' own
eval transforms: what each library's transform gives, pixel for pixel."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robustlab.errors import InputError
from robustlab.execution.tasks import model_input
from robustlab.suites import (
    ARCHIVE_PROTOCOL,
    IMAGENET_C_PROTOCOL,
    MODEL_PROTOCOL,
    PROTOCOLS,
    Protocol,
    get_suite,
    parse_protocol,
)


def _photos():
    """Demo photos (real photos, various sizes) plus a non-square crop of one."""
    from robustlab.workflows.demo import demo_photos

    out = [np.asarray(Image.open(p.source).convert("RGB")) for p in demo_photos()[:3]]
    out.append(out[0][:, : max(40, out[0].shape[1] * 2 // 3)].copy())
    return out


def _seen(preprocessing, rgb, protocol=MODEL_PROTOCOL):
    """The float input robustlab's evaluation gives the model: frame, view, normalise."""
    from robustlab.pipeline import prepare

    return preprocessing.normalize(
        model_input(preprocessing, prepare(rgb, protocol), protocol)[None]
    )[0]


def _same(mine, ref):
    assert mine.shape == ref.shape
    assert mine.dtype == ref.dtype
    assert np.array_equal(mine.numpy(), ref.numpy())


@pytest.mark.parametrize(
    "enum",
    [
        "ResNet50_Weights.IMAGENET1K_V2",  # resize 232, bilinear
        "ViT_B_16_Weights.IMAGENET1K_V1",  # the model ImageNet-D evaluates
        "VGG19_BN_Weights.IMAGENET1K_V1",  # the other one
        "EfficientNet_B3_Weights.IMAGENET1K_V1",  # 320/300 bicubic
    ],
)
def test_model_protocol_is_torchvision_weights_transforms(enum):
    import torchvision.models as tvm

    from robustlab.models.torchvision_models import preprocessing_of

    cls, member = enum.split(".")
    weights = getattr(getattr(tvm, cls), member)
    pre = preprocessing_of(weights)
    ref = weights.transforms()
    for rgb in _photos():
        _same(_seen(pre, rgb), ref(Image.fromarray(rgb)))


def test_a_torchvision_model_loaded_by_robustlab_sees_its_weights_transforms(tmp_path):
    """The adapter itself (weights=None model, saved, loaded as a weights file) declares
    the transform of its DEFAULT weights enum."""
    import torch
    import torchvision.models as tvm

    from robustlab.models import load_model

    path = tmp_path / "resnet18.pt"
    torch.save(tvm.resnet18(weights=None).state_dict(), path)
    model = load_model("torchvision:resnet18", weights=str(path), device="cpu")
    ref = tvm.ResNet18_Weights.DEFAULT.transforms()
    for rgb in _photos():
        _same(_seen(model.preprocessing, rgb), ref(Image.fromarray(rgb)))


@pytest.mark.parametrize(
    "arch", ["resnet18", "efficientnet_b0", "convnext_atto", "deit_tiny_patch16_224"]
)
def test_model_protocol_is_timm_data_config_transform(arch):
    import timm
    from timm.data import create_transform, resolve_data_config

    from robustlab.models.timm_models import preprocessing_of

    net = timm.create_model(arch, pretrained=False)
    ref = create_transform(**resolve_data_config({}, model=net))
    pre = preprocessing_of(net)
    for rgb in _photos():
        _same(_seen(pre, rgb), ref(Image.fromarray(rgb)))


def test_model_protocol_is_open_clip_preprocess():
    open_clip = pytest.importorskip("open_clip")
    from robustlab.models.open_clip_models import _preprocessing

    net, _, preprocess = open_clip.create_model_and_transforms("RN50", pretrained=None)
    pre = _preprocessing(net)
    assert (pre.input_size, pre.interpolation) == (224, "bicubic")
    for rgb in _photos():
        _same(_seen(pre, rgb), preprocess(Image.fromarray(rgb)))


def test_the_imagenet_c_protocol_differs_from_a_models_own_transform():
    """Why ImageNet-D needs its own protocol: 256/224 bilinear is not ResNet-50 V2's
    232/224 (the pixels differ), so feeding every model ImageNet-C's is not official."""
    import torchvision.models as tvm

    from robustlab.models.torchvision_models import preprocessing_of

    weights = tvm.ResNet50_Weights.IMAGENET1K_V2
    pre = preprocessing_of(weights)
    rgb = _photos()[0]
    ref = weights.transforms()(Image.fromarray(rgb))
    assert not np.array_equal(_seen(pre, rgb, IMAGENET_C_PROTOCOL).numpy(), ref.numpy())


def test_every_builtin_suite_uses_a_named_protocol_and_imagenet_c_records_as_before():
    from robustlab.suites import list_suites

    for suite in list_suites():
        assert suite.protocol.name in PROTOCOLS, suite.name
    assert get_suite("imagenet-c").protocol.name == "imagenet-c"
    assert get_suite("imagenet-e").protocol.name == "imagenet-e"
    # The record (and so the run ids) of ImageNet-C runs is what it was before views.
    assert IMAGENET_C_PROTOCOL.describe() == {
        "resize": 256,
        "crop": 224,
        "interpolation": "bilinear",
        "format": "jpeg",
        "jpeg_quality": 85,
    }


def test_parse_protocol_names_pairs_and_errors():
    base = get_suite("imagenet-c").protocol
    model = parse_protocol("model", base)
    assert (model.resize, model.crop, model.view, model.format) == (None, None, "model", "jpeg")
    assert parse_protocol("view=model", base) == Protocol(view="model")
    p = parse_protocol("imagenet-c,interpolation=bicubic,view_resize=none", base)
    assert (p.interpolation, p.view_resize, p.name) == ("bicubic", None, "custom")
    for bad in ("nonsense", "view=squash", "resize=big", "colour=red", "", "view_resize=0"):
        with pytest.raises(InputError):
            parse_protocol(bad, base)


def test_imagenet_e_sees_archive_files_and_its_own_edits_through_one_rule():
    """The archive's files and robustlab's stored edits go through the same view: the
    stored image's 256 resize and 224 centre crop (torchvision's Resize/CenterCrop, as
    easyrobust evaluates), then the model's resize."""
    import torch
    from torchvision import transforms as T

    from robustlab.models.lite import preprocessing

    pre = preprocessing("lite0")
    easyrobust = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
    for rgb in _photos()[:2]:
        for side in (224, 256):
            stored = np.asarray(Image.fromarray(rgb).resize((side, side)))
            a = model_input(pre, stored, ARCHIVE_PROTOCOL)
            b = model_input(pre, stored, get_suite("imagenet-e").protocol)
            assert torch.equal(a, b)
            ref = easyrobust(Image.fromarray(stored)).permute(1, 2, 0).numpy()
            assert torch.equal(a, pre.to_uint8(ref, crop=False))


def _imagenet_d_tree(root):
    rng = np.random.default_rng(0)
    for rel in ("background/alarm_clock/a.png", "texture/backpack/b.png"):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (300, 400, 3), dtype=np.uint8)).save(path)
    return root


def test_imagenet_d_runs_use_the_models_own_transform_and_an_override_is_its_own_run(tmp_path):
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.execution.runner import _ModelTransform
    from robustlab.execution.tasks import Task, TaskDataset

    root = _imagenet_d_tree(tmp_path / "ImageNet-D")
    plan = make_plan(EvaluateRequest.build("lite0", root, label_space="imagenet-d", device="cpu"))
    record, images, model = plan.record, plan.images, plan.model
    assert record.config["protocol"]["name"] == "model"
    assert record.config["protocol"]["override"] is None
    assert record.preprocessing["protocol"]["view"] == "model"
    # What the runner's workers hand to the model: the lite model's own eval transform
    # (its resize with its crop fraction, then its centre crop) of the file.
    ds = TaskDataset(
        plan.samples, [Task(0, (("clean", 0),))], images, _ModelTransform(model, images.protocol)
    )
    _, pixels, errors, _ = ds[0]
    assert not errors
    rgb = np.asarray(Image.open(plan.samples[0].path).convert("RGB"))
    assert np.array_equal(pixels[0].numpy(), model.preprocessing.to_uint8(rgb).numpy())

    other = make_plan(
        EvaluateRequest.build(
            "lite0", root, label_space="imagenet-d", device="cpu", protocol="imagenet-c"
        )
    )
    assert other.record.run_id != record.run_id
    assert other.record.config["protocol"]["override"] == "imagenet-c"
    assert other.record.preprocessing["protocol"]["resize"] == 256
    same = make_plan(EvaluateRequest.build("lite0", root, label_space="imagenet-d", device="cpu"))
    assert same.record.run_id == record.run_id


def test_a_bad_protocol_is_a_one_line_user_error(tmp_path, capsys):
    from robustlab.cli import main

    root = _imagenet_d_tree(tmp_path / "ImageNet-D")
    code = main(
        [
            "evaluate",
            "lite0",
            "--data",
            str(root),
            "--label-space",
            "imagenet-d",
            "--db",
            str(tmp_path / "r.duckdb"),
            "--protocol",
            "squash",
            "--device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "unknown protocol 'squash'" in err and "Traceback" not in err


def test_imagenet_e_drop_is_paired_with_clean_on_the_same_images(tmp_path):
    """A level folder missing a file is compared with the clean accuracy of the images it
    holds, and the run records ImageNet-E's view."""
    from robustlab.workflows.demo import demo_photos
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.report.gather import gather
    from robustlab.store import Store

    root = tmp_path / "ImageNet-E"
    for d in ("ori", "rp"):
        (root / d).mkdir(parents=True)
    photos = {p.id: p for p in demo_photos()}
    chosen = [("a", "cat/chelsea.png", 285), ("b", "espresso/coffee.png", 967)]
    chosen.append(("c", "motorcycle/motorcycle_left.png", 670))
    for i, (stem, pid, _) in enumerate(chosen):
        img = Image.open(photos[pid].source).convert("RGB").resize((256, 256))
        img.save(root / "ori" / f"{stem}.png")
        if i:
            img.rotate(90).save(root / "rp" / f"{stem}.png")
    (root / "labels.txt").write_text("".join(f"{s}\t{lab}\n" for s, _, lab in chosen))
    db = tmp_path / "r.duckdb"
    df = evaluate("lite0", root, device="cpu", db=db, workers=0, progress=False)
    rid = df.run_id
    assert df.protocol.startswith("imagenet-e-archive")
    run = Store(db).get_run(rid)
    assert run["preprocessing"]["protocol"]["view_crop"] == 224
    preds = Store(db).predictions([rid])
    clean = preds[preds["shift"] == "clean"].set_index("sample_id")["correct"].astype(float)
    level = preds[preds["shift"] == "rp"]
    e = gather(db, run_ids=[rid], n_resamples=20).edits.set_index("shift").loc["rp"]
    assert (e["n"], e["n_clean"]) == (2, 3)
    assert e["clean"] == pytest.approx(clean.mean())
    assert e["clean_paired"] == pytest.approx(clean.loc[["b.png", "c.png"]].mean())
    assert e["drop"] == pytest.approx(e["clean_paired"] - level["correct"].astype(float).mean())
    from robustlab.workflows.report import build_report

    res = build_report(db, tmp_path / "report.html", run_ids=[rid], grid=False, n_resamples=20)
    html = res.path.read_text()
    assert "imagenet-e-archive: source as is, then 256/224 bilinear, model&#x27;s resize" in html
    assert "rp default: 2 of 3" in html  # the level with fewer images than clean is named


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("ViTImageProcessorPil", {}),  # squash to 224
        ("CLIPImageProcessorPil", {}),  # shortest edge 224, crop 224
        ("CLIPImageProcessorPil", {"size": {"shortest_edge": 256}}),  # odd margins: floor
        ("ConvNextImageProcessorPil", {}),  # 384: warp, no crop
        ("ConvNextImageProcessorPil", {"size": {"shortest_edge": 224}, "crop_pct": 0.9}),
    ],
)
def test_model_protocol_is_the_hf_image_processor_of_its_config(name, kwargs):
    """``hf:`` models: robustlab's reading of ``preprocessor_config.json`` gives the pixels
    of transformers' (PIL) image processor built from that config."""
    import transformers

    from robustlab.models.hf_models import preprocessing_from

    cls = getattr(transformers, name, None)
    if cls is None:
        pytest.skip(f"transformers {transformers.__version__} has no {name}")
    proc = cls(**kwargs)
    pre, _ = preprocessing_from(proc.to_dict(), 224)
    for rgb in _photos():
        ref = proc(images=Image.fromarray(rgb), return_tensors="pt")["pixel_values"][0]
        mine = _seen(pre, rgb)
        assert mine.shape == ref.shape
        # transformers rescales by multiplying with 1/255 in float32, robustlab divides:
        # the same pixels, normalised values a float32 rounding apart.
        np.testing.assert_allclose(mine.numpy(), ref.numpy(), rtol=0, atol=1e-5)
        raw = proc(
            images=Image.fromarray(rgb), do_rescale=False, do_normalize=False, return_tensors="np"
        )["pixel_values"][0]
        assert np.array_equal(model_input(pre, rgb, MODEL_PROTOCOL).numpy(), raw.astype(np.uint8))


@pytest.mark.slow  # generates a folder first
def test_a_generated_folder_keeps_its_frame_and_takes_a_view_override(tmp_path):
    import shutil

    from robustlab.workflows.demo import demo_photos
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.workflows.generate import generate

    src = tmp_path / "photos"
    for p in demo_photos()[:2]:
        (src / p.class_name).mkdir(parents=True, exist_ok=True)
        shutil.copy(p.source, src / p.class_name / p.source.name)
    out = tmp_path / "gen"
    generate("imagenet-c", src, out, shifts=["brightness"], levels=[1], workers=1, progress=False)
    base = make_plan(
        EvaluateRequest.build(
            "lite0", out, device="cpu", label_space="demo", shifts=["brightness"], levels=[1]
        )
    )
    assert base.protocol.name == "imagenet-c"
    viewed = make_plan(
        EvaluateRequest.build(
            "lite0",
            out,
            device="cpu",
            label_space="demo",
            shifts=["brightness"],
            levels=[1],
            protocol="view=model",
        )
    )
    assert viewed.protocol.view == "model" and viewed.protocol.resize == 256
    assert viewed.record.run_id != base.record.run_id
    with pytest.raises(InputError, match="can change only how the model sees them"):
        make_plan(
            EvaluateRequest.build(
                "lite0",
                out,
                device="cpu",
                label_space="demo",
                shifts=["brightness"],
                levels=[1],
                protocol="model",
            )
        )
