"""Model adapters: the bundled EfficientNet-Lite models, preprocessing, scoring, records."""

from __future__ import annotations

import csv
import hashlib
import json

import numpy as np
import pytest
import torch

from robustlab.data.images import load_image
from robustlab.models import Model, Preprocessing, list_models, load_model
from robustlab.models.lite import package_weights

from conftest import MINI


def _accuracy(name: str, samples_dir) -> float:
    model = load_model(name, device="cpu")
    rows = list(
        csv.DictReader((samples_dir / "labels.csv").read_text(encoding="utf-8").splitlines())
    )
    labels = torch.tensor([int(r["index"]) for r in rows])
    preds = []
    for i in range(0, len(rows), model.batch_size):
        batch = torch.stack(
            [
                model.transform(load_image(samples_dir / r["file"])[0])
                for r in rows[i : i + model.batch_size]
            ]
        )
        preds.append(model.predict(batch).argmax(dim=1))
    top1, _ = model.correct(torch.cat(preds)[:, None], labels)
    acc = float(top1.float().mean())
    print(f"\n{name}: top-1 {acc:.3f} on {len(rows)} shared ImageNet photos")
    return acc


@pytest.mark.long
def test_lite0_accuracy_on_the_compact_photos():
    """The default run checks the claim on the repository's 120 scaled-down photos (one per
    class of the shared set's first 120), so it costs seconds with or without ../shared; the
    500-photo check below is the slow variant of the same claim."""
    assert _accuracy("lite0", MINI / "imagenet-samples") >= 0.85


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lite0", "lite1", "lite2"])
def test_lite_accuracy_on_shared_photos(name, full_samples_dir):
    assert _accuracy(name, full_samples_dir) >= 0.85


@pytest.fixture(scope="module")
def lite0():
    return load_model("lite0", device="cpu")


def test_lite0_record(lite0):
    path = package_weights("lite0")
    assert lite0.weights_hash == hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    p = lite0.preprocessing
    assert (p.input_size, p.crop_pct, p.interpolation, p.mean, p.std) == (
        224,
        0.875,
        "bicubic",
        (0.5, 0.5, 0.5),
        (0.5, 0.5, 0.5),
    )
    d = json.loads(json.dumps(lite0.describe()))
    assert d["spec"] == "lite0" and d["weights_hash"] == lite0.weights_hash
    assert d["preprocessing"]["input_size"] == 224 and d["label_space"]["name"] == "imagenet1k"
    assert d["architecture"] == "timm:tf_efficientnet_lite0" and d["batch_size"] == lite0.batch_size
    assert lite0.num_outputs == 1000 and lite0.module.training is False


def test_list_models_has_every_adapter():
    specs = [m.spec for m in list_models()]
    assert specs[:3] == ["lite0", "lite1", "lite2"]
    assert {s.split(":")[0] for s in specs[3:]} == {
        "timm",
        "torchvision",
        "hf",
        "open_clip",
        "onnx",
    }


def test_registered_adapter_is_used_by_load_model_and_listed(lite0):
    """A user adapter is one decorator away: load_model and list models see it."""
    from robustlab.errors import InputError
    from robustlab.models import register_adapter
    from robustlab.models.registry import _ADAPTERS

    calls = []
    try:

        @register_adapter("mylab", pattern="mylab:NAME", description="in-house nets")
        def load(name, *, spec, weights=None, **kwargs):
            calls.append((name, spec, weights, kwargs["device"]))
            return lite0

        assert load_model("mylab:v7@/w.pt", device="cpu") is lite0
        assert calls == [("v7", "mylab:v7@/w.pt", "/w.pt", "cpu")]
        assert "mylab:NAME" in [m.spec for m in list_models()]
        with pytest.raises(InputError, match="already registered"):
            register_adapter("mylab")(load)
    finally:
        _ADAPTERS.pop("mylab", None)
    with pytest.raises(InputError, match="unknown model spec 'mylab:v7'.*timm:NAME"):
        load_model("mylab:v7")


def test_list_models_cli(capsys):
    from robustlab.cli import main

    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    assert "lite0" in out and "open_clip:ARCH" in out


# ------------------------------------------------------------------ preprocessing
def _photo(samples_dir, name="n01440764_tench.JPEG"):
    return load_image(samples_dir / name)[0]


@pytest.mark.parametrize("interp", ["bicubic", "bilinear"])
def test_resize_crop_matches_torchvision(samples_dir, interp):
    """Our eval geometry is torchvision's Resize(short) + CenterCrop on PIL images."""
    from PIL import Image
    from torchvision import transforms as T

    pre = Preprocessing(224, 0.875, interp, (0.5,) * 3, (0.5,) * 3)
    mode = {"bicubic": T.InterpolationMode.BICUBIC, "bilinear": T.InterpolationMode.BILINEAR}[
        interp
    ]
    ref = T.Compose([T.Resize(256, interpolation=mode), T.CenterCrop(224)])
    for name in ("n01440764_tench.JPEG", "n01484850_great_white_shark.JPEG"):
        rgb = _photo(samples_dir, name)
        expected = np.asarray(ref(Image.fromarray(rgb)))
        np.testing.assert_array_equal(pre.resize_crop(rgb), expected)


def test_transform_matches_timm_eval_transform(samples_dir):
    """lite0's full tensor pipeline against timm's own eval transform for the same config."""
    from PIL import Image
    from timm.data import create_transform

    ref = create_transform(
        input_size=(3, 224, 224),
        interpolation="bicubic",
        crop_pct=0.875,
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )
    pre = Preprocessing(224, 0.875, "bicubic", (0.5,) * 3, (0.5,) * 3)
    rgb = _photo(samples_dir)
    torch.testing.assert_close(pre.to_tensor(rgb), ref(Image.fromarray(rgb)), atol=1e-6, rtol=0)


def test_transform_without_crop_keeps_pixels_of_a_model_sized_image(lite0, samples_dir):
    rgb = lite0.preprocessing.resize_crop(_photo(samples_dir))  # 224 x 224
    x = lite0.transform(rgb, crop=False)
    back = (x * 0.5 + 0.5) * 255
    np.testing.assert_allclose(back.permute(1, 2, 0).numpy(), rgb, atol=1e-3)
    wide = np.zeros((100, 300, 3), np.uint8)
    assert lite0.transform(wide, crop=False).shape == (3, 224, 672)  # whole image, shorter side 224
    assert lite0.transform(wide).shape == (3, 224, 224)
    assert lite0.transform(np.zeros((50, 60), np.uint8)).shape == (3, 224, 224)  # grayscale


def test_squash_mode_resizes_both_sides():
    pre = Preprocessing(32, 1.0, "bilinear", (0.0,) * 3, (1.0,) * 3, resize_mode="squash")
    assert pre.resize_crop(np.zeros((40, 100, 3), np.uint8)).shape == (32, 32, 3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"crop_pct": 0.0}, "crop_pct"),
        ({"interpolation": "cubic"}, "interpolation"),
        ({"input_size": 0}, "input_size"),
        ({"std": (1.0, 0.0, 1.0)}, "std"),
    ],
)
def test_preprocessing_validation(kwargs, match):
    args = {
        "input_size": 224,
        "crop_pct": 0.875,
        "interpolation": "bicubic",
        "mean": (0.5,) * 3,
        "std": (0.5,) * 3,
        **kwargs,
    }
    with pytest.raises(ValueError, match=match):
        Preprocessing(**args)


# ------------------------------------------------------------------ label-space heads
def test_predict_on_a_subset_keeps_its_columns(lite0, samples_dir):
    sub = load_model("lite0", device="cpu", label_space="imagenet-r")
    x = lite0.transform(_photo(samples_dir))[None]
    full = lite0.predict(x)
    part = sub.predict(x)
    assert sub.num_outputs == 200 and sub.head == "subset"
    torch.testing.assert_close(part, full[:, list(sub.label_space.subset_ids)])


def test_correct_with_a_mapping(lite0):
    m = load_model("lite0", device="cpu", label_space="imagenet9")
    assert m.head == "mapping" and m.num_outputs == 1000
    in1k = m.label_space  # imagenet9
    dog, fish = in1k.index_of("dog"), in1k.index_of("fish")
    chihuahua, tench, car_wheel = 151, 0, 479
    topk = torch.tensor(
        [[chihuahua, tench], [tench, chihuahua], [car_wheel, 999], [car_wheel, tench]]
    )
    labels = torch.tensor([dog, dog, dog, fish])
    top1, topk_ok = m.correct(topk, labels)
    assert top1.tolist() == [True, False, False, False]
    assert topk_ok.tolist() == [True, True, False, True]


def test_correct_direct_and_bad_input(lite0):
    top1, top5 = lite0.correct(torch.tensor([[3, 4], [7, 3]]), torch.tensor([3, 3]))
    assert top1.tolist() == [True, False] and top5.tolist() == [True, True]
    top1, _ = lite0.correct(np.array([5, 6]), np.array([5, 5]))  # k = 1 as a vector
    assert top1.tolist() == [True, False]
    with pytest.raises(ValueError, match="labels must be in 0..999"):
        lite0.correct(torch.tensor([[1]]), torch.tensor([1000]))
    with pytest.raises(ValueError, match="do not match"):
        lite0.correct(torch.tensor([[1], [2]]), torch.tensor([1]))


def test_predict_rejects_bad_batches(lite0):
    with pytest.raises(ValueError, match="Bx3xHxW"):
        lite0.predict(torch.zeros(3, 224, 224))


def test_model_is_a_model(lite0):
    assert isinstance(lite0, Model) and "lite0" in repr(lite0)


def test_state_dict_mismatch_names_a_few_keys_of_each_kind():
    """One description of a checkpoint that does not fit, for the model adapters and the
    background diffusion model alike."""
    import torch

    from robustlab.models.weights import state_dict_mismatch

    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    assert state_dict_mismatch(net, net.state_dict()) is None
    sd = {f"extra{i}": torch.zeros(1) for i in range(5)}
    sd["0.weight"] = torch.zeros(3, 5)
    assert state_dict_mismatch(net, sd) == (
        "3 missing (0.bias, 1.weight, 1.bias); "
        "5 unexpected (extra0, extra1, extra2 (+2 more)); "
        "1 of another shape (e.g. 0.weight: (3, 5), expected (3, 4))"
    )
