"""Every adapter end to end with real architectures and random weights (no downloads), and
the one-line errors for what cannot be loaded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from robustlab.errors import EnvironmentProblem, InputError, MissingResourceError, RobustlabError
from robustlab.models import load_model


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Downloads off for every test here: nothing may reach for the network."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("ROBUSTLAB_OFFLINE", "1")


@pytest.fixture(scope="module")
def images():
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, size=(120 + 10 * i, 160, 3), dtype=np.uint8) for i in range(3)]


def _sha16(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()[:16]


# ------------------------------------------------------------------ timm
def test_timm_checkpoint_end_to_end(tmp_path, images):
    import timm

    torch.manual_seed(0)
    net = timm.create_model("resnet18", pretrained=False).eval()
    ckpt = tmp_path / "resnet18.pth"
    torch.save({"state_dict": net.state_dict()}, ckpt)
    model = load_model("timm:resnet18", weights=str(ckpt), device="cpu")
    assert model.weights_hash == _sha16(ckpt)
    p = model.preprocessing
    assert (p.input_size, p.interpolation, p.crop_pct) == (224, "bicubic", 0.95)  # timm's cfg
    batch = torch.stack([model.transform(im) for im in images])
    with torch.inference_mode():
        expected = net(batch)
    torch.testing.assert_close(model.predict(batch), expected)
    top = model.predict(batch).topk(5).indices
    top1, top5 = model.correct(top, top[:, 0])
    assert top1.all() and top5.all()
    inline = load_model(f"timm:resnet18@{ckpt}", device="cpu")
    assert inline.weights_hash == model.weights_hash and inline.spec == f"timm:resnet18@{ckpt}"


def test_timm_checkpoint_with_another_head_fits_its_label_space(tmp_path):
    import timm

    net = timm.create_model("test_resnet", pretrained=False, num_classes=9)
    ckpt = tmp_path / "in9.pth"
    torch.save(net.state_dict(), ckpt)
    model = load_model("timm:test_resnet", weights=ckpt, device="cpu", label_space="imagenet9")
    assert model.head == "direct" and model.num_outputs == 9
    with pytest.raises(ValueError, match="gives 9 outputs; label space 'imagenet1k' needs 1000"):
        load_model("timm:test_resnet", weights=ckpt, device="cpu")


def test_timm_wrong_checkpoint_is_one_line(tmp_path):
    import timm

    ckpt = tmp_path / "other.pth"
    torch.save(timm.create_model("test_vit", pretrained=False).state_dict(), ckpt)
    with pytest.raises(ValueError, match="weights do not fit timm:test_resnet") as err:
        load_model("timm:test_resnet", weights=ckpt, device="cpu")
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ torchvision
def test_torchvision_state_dict_end_to_end(tmp_path, images):
    from torchvision.models import get_model

    torch.manual_seed(0)
    net = get_model("mobilenet_v3_small", weights=None).eval()
    ckpt = tmp_path / "mnv3.pth"
    torch.save(net.state_dict(), ckpt)
    model = load_model("torchvision:mobilenet_v3_small", weights=ckpt, device="cpu")
    p = model.preprocessing
    assert (p.input_size, p.crop_pct, p.interpolation) == (224, 224 / 256, "bilinear")
    batch = torch.stack([model.transform(im) for im in images])
    with torch.inference_mode():
        expected = net(batch)
    torch.testing.assert_close(model.predict(batch), expected)
    assert model.weights_hash == _sha16(ckpt) and model.describe()["adapter"] == "torch"


# ------------------------------------------------------------------ ONNX
def _export(net, path, *, fixed_batch=None, meta=None):
    import onnx

    x = torch.zeros(fixed_batch or 2, 3, 64, 64)
    kwargs = {} if fixed_batch else {"dynamic_axes": {"x": {0: "b"}, "y": {0: "b"}}}
    torch.onnx.export(
        net,
        (x,),
        str(path),
        input_names=["x"],
        output_names=["y"],
        opset_version=17,
        dynamo=False,
        **kwargs,
    )
    if meta:
        m = onnx.load(str(path))
        for k, v in meta.items():
            m.metadata_props.add(key=k, value=json.dumps(v))
        onnx.save(m, str(path))


def test_onnx_end_to_end(tmp_path, images):
    import timm

    torch.manual_seed(0)
    net = timm.create_model("test_resnet", pretrained=False).eval()
    path = tmp_path / "m.onnx"
    _export(net, path)
    model = load_model(f"onnx:{path}", device="cpu")
    assert model.num_outputs == 1000 and model.weights_hash == _sha16(path)
    assert "defaults" in model.describe()["preprocessing_source"]
    batch = torch.stack([model.transform(im) for im in images])
    with torch.inference_mode():
        expected = net(batch)
    torch.testing.assert_close(model.predict(batch), expected, atol=1e-4, rtol=1e-4)


def test_onnx_fixed_batch_and_metadata(tmp_path, images):
    import timm

    torch.manual_seed(1)
    net = timm.create_model("test_resnet", pretrained=False).eval()
    path = tmp_path / "fixed.onnx"
    _export(
        net,
        path,
        fixed_batch=2,
        meta={
            "input_size": 64,
            "crop_pct": 1.0,
            "interpolation": "bicubic",
            "mean": [0.5, 0.5, 0.5],
            "std": [0.5, 0.5, 0.5],
        },
    )
    model = load_model(f"onnx:{path}", device="cpu", label_space="imagenet-a")
    p = model.preprocessing
    assert (p.input_size, p.crop_pct, p.interpolation, p.mean) == (
        64,
        1.0,
        "bicubic",
        (0.5, 0.5, 0.5),
    )
    batch = torch.stack([model.transform(im) for im in images])  # 3 images, graph takes 2
    with torch.inference_mode():
        expected = net(batch)[:, list(model.label_space.subset_ids)]
    out = model.predict(batch)
    assert out.shape == (3, 200)
    torch.testing.assert_close(out, expected, atol=1e-4, rtol=1e-4)


# ------------------------------------------------------------------ open_clip
TINY_CLIP = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16, "head_width": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    import open_clip

    folder = tmp_path_factory.mktemp("clip")
    (folder / "open_clip_config.json").write_text(
        json.dumps(
            {
                "model_cfg": TINY_CLIP,
                "preprocess_cfg": {"mean": [0.48, 0.46, 0.41], "std": [0.27, 0.26, 0.28]},
            }
        )
    )
    torch.manual_seed(0)
    net = open_clip.CLIP(**TINY_CLIP).eval()
    ckpt = folder / "ckpt.pt"
    torch.save(net.state_dict(), ckpt)
    return folder, ckpt, net


def test_open_clip_zero_shot_end_to_end(tiny_clip, images):
    import open_clip
    import torch.nn.functional as F

    from robustlab.models import open_clip_models

    folder, ckpt, net = tiny_clip
    model = open_clip_models.load(
        str(folder),
        spec=f"open_clip:{folder}",
        weights=ckpt,
        device="cpu",
        label_space="imagenet9",
        templates=("a photo of a {}.",),
    )
    assert model.head == "direct" and model.num_outputs == 9
    p = model.preprocessing
    assert (p.input_size, p.interpolation, p.crop_pct, p.mean) == (
        32,
        "bicubic",
        1.0,
        (0.48, 0.46, 0.41),
    )
    batch = torch.stack([model.transform(im) for im in images])
    # Reference: open_clip's own forward (normalised features and logit scale).
    tokens = open_clip.get_tokenizer(f"local-dir:{folder}")(
        [f"a photo of a {c}." for c in model.label_space.classes]
    )
    with torch.inference_mode():
        img, txt, scale = net(batch, tokens)
        expected = scale * F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).T
    torch.testing.assert_close(model.predict(batch), expected, atol=1e-4, rtol=1e-4)
    top1, _ = model.correct(model.predict(batch).topk(2).indices, torch.tensor([0, 1, 2]))
    assert top1.dtype == torch.bool and top1.shape == (3,)


def test_open_clip_via_load_model_with_default_templates(tiny_clip):
    folder, ckpt, _ = tiny_clip
    model = load_model(
        f"open_clip:{folder}", weights=str(ckpt), device="cpu", label_space="imagenet9"
    )
    assert model.num_outputs == 9 and model.weights_hash == _sha16(ckpt)
    assert len(model.describe()["zero_shot"]["templates"]) > 1
    with pytest.raises(MissingResourceError, match="needs weights"):
        load_model(f"open_clip:{folder}", device="cpu")


# ------------------------------------------------------------------ transformers
@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory):
    from transformers import ViTConfig, ViTForImageClassification, ViTImageProcessor

    folder = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    cfg = ViTConfig(
        image_size=32,
        patch_size=16,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=1000,
    )
    net = ViTForImageClassification(cfg).eval()
    net.save_pretrained(folder)
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder, net


def test_hf_folder_end_to_end(tiny_vit, images):
    from transformers import ViTImageProcessor

    folder, net = tiny_vit
    model = load_model(f"hf:{folder}", device="cpu")
    p = model.preprocessing
    assert (p.input_size, p.resize_mode, p.crop_pct, p.mean) == (32, "squash", 1.0, (0.5, 0.5, 0.5))
    batch = torch.stack([model.transform(im) for im in images])
    # Reference: the model's own image processor.
    ref = ViTImageProcessor.from_pretrained(folder)(images=list(images), return_tensors="pt")[
        "pixel_values"
    ]
    torch.testing.assert_close(batch, ref, atol=2e-2, rtol=0)
    with torch.inference_mode():
        expected = net(pixel_values=batch).logits
    torch.testing.assert_close(model.predict(batch), expected)
    assert model.weights_hash and model.describe()["adapter"] == "hf"


# ------------------------------------------------------------------ clear errors
@pytest.mark.parametrize(
    "spec, match",
    [
        ("foo:bar", "unknown model spec 'foo:bar'"),
        ("lite9", "unknown model spec 'lite9'"),
        ("timm:", "unknown model spec"),
        ("timm:no_such_net", "unknown timm model 'no_such_net'"),
        ("torchvision:no_such_net", "unknown torchvision model"),
        ("open_clip:no-such-arch", "unknown open_clip model"),
        ("onnx:/nonexistent/m.onnx", "ONNX file /nonexistent/m.onnx does not exist"),
        ("hf:/nonexistent/folder", "does not exist"),
    ],
)
def test_bad_specs(spec, match):
    with pytest.raises(RobustlabError, match=match) as err:
        load_model(spec, device="cpu")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "spec, suggestion",
    [
        ("lite00", "did you mean lite0 or "),
        ("tim:resnet50", "did you mean timm:resnet50?"),
        ("timm:resnet5", "did you mean timm:resnet50 or "),
        ("torchvision:resnet5", "did you mean torchvision:resnet50 or "),
        ("open_clip:ViT-B-33", "did you mean open_clip:ViT-B-32 or "),
    ],
)
def test_a_misspelt_spec_gets_the_closest_whole_specs(spec, suggestion):
    """Suggestions are specs to paste back, prefix included, from each adapter's own list."""
    with pytest.raises(InputError) as err:
        load_model(spec, device="cpu")
    assert suggestion in str(err.value)


def test_a_misspelt_hub_id_gets_the_closest_cached_ids(monkeypatch, tmp_path):
    """hf: has a local list, the hub cache's ``models--ORG--NAME`` folders: an id that is
    not cached gets the closest cached ids."""
    from huggingface_hub import constants

    for repo in ("models--google--vit-base-patch16-224", "models--facebook--convnext-tiny-224"):
        (tmp_path / repo).mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(MissingResourceError) as err:
        load_model("hf:google/vit-base-patch16-22", device="cpu")
    assert "; did you mean hf:google/vit-base-patch16-224?" in str(err.value)


def test_a_misspelt_spec_is_answered_without_importing_torch():
    """The spec is checked before torch and torchvision are imported (seconds; a minute on
    the first run after an install): a typo is answered at once."""
    code = (
        "import sys\n"
        "from robustlab.errors import InputError\n"
        "from robustlab.models import load_model\n"
        "try:\n    load_model('lite00')\nexcept InputError as e:\n    print(e)\n"
        "print(sorted(m for m in ('torch', 'torchvision', 'timm') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith("unknown model spec 'lite00'; did you mean lite0") and out[1] == "[]"


def test_missing_weights_file():
    with pytest.raises(
        MissingResourceError, match="weights file /nonexistent/w.pth does not exist"
    ):
        load_model("timm:resnet18", weights="/nonexistent/w.pth", device="cpu")
    with pytest.raises(MissingResourceError, match="does not exist"):
        load_model("torchvision:resnet18", weights="/nonexistent/w.pth", device="cpu")
    with pytest.raises(MissingResourceError, match="does not exist"):
        load_model("lite0", weights="/nonexistent/w.pth", device="cpu")


def test_timm_without_weights_offline_says_what_to_download(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(
        MissingResourceError, match=r"downloads are off.*huggingface\.co/timm/resnet18\.a1_in1k"
    ):
        load_model("timm:resnet18", device="cpu")


def test_torchvision_without_weights_offline_says_where(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    with pytest.raises(
        MissingResourceError,
        match=r"download https://download\.pytorch\.org/models/resnet18-.*\.pth to ",
    ):
        load_model("torchvision:resnet18", device="cpu")


def test_torchvision_uses_the_hub_cache(monkeypatch, tmp_path):
    """A file already in the torch hub cache is used without any network."""
    from torchvision.models import get_model, get_model_weights

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    w = get_model_weights("mobilenet_v3_small").DEFAULT
    dest = tmp_path / "hub" / "checkpoints" / w.url.rsplit("/", 1)[1]
    dest.parent.mkdir(parents=True)
    torch.save(get_model("mobilenet_v3_small", weights=None).state_dict(), dest)
    model = load_model("torchvision:mobilenet_v3_small", device="cpu")
    assert model.describe()["weights_source"] == "torch hub cache" and model.weights_hash == _sha16(
        dest
    )


def test_hub_model_offline(monkeypatch):
    with pytest.raises(MissingResourceError, match="HF_HUB_OFFLINE=1") as err:
        load_model("hf:google/vit-base-patch16-224", device="cpu")
    assert "not in the local Hugging Face cache" in str(err.value)


def test_cuda_request_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(EnvironmentProblem, match="no usable CUDA GPU"):
        load_model("lite0", device="cuda")


def test_unreachable_hub_fails_at_once_with_what_to_download(monkeypatch, tmp_path):
    """No network: one clear error instead of a minute of hub retries (".invalid" never resolves)."""
    from huggingface_hub import constants

    from robustlab.models import load_model

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))  # nothing cached
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    from robustlab.models.hub import unreachable

    assert unreachable("http://localhost:1/x") is None
    assert "nothing.invalid cannot be reached" in unreachable("https://nothing.invalid/model.bin")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ROBUSTLAB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    with pytest.raises(
        MissingResourceError,
        match=r"cannot download timm:resnet18 weights: hub.invalid cannot be reached.*--weights PATH",
    ):
        load_model("timm:resnet18")
    with pytest.raises(
        MissingResourceError,
        match=r"hf:someone/no-such-model is not in the local Hugging Face cache and hub.invalid cannot be reached",
    ):
        load_model("hf:someone/no-such-model")


def test_open_clip_imagenet_d_uses_the_papers_protocol(tiny_clip, images):
    """ImageNet-D's CLIP evaluation: 'A photo of a {c}' with its name normalisation and a
    softmax over 100 x cosine, checked against open_clip's own encoders."""
    import open_clip
    import torch.nn.functional as F

    folder, ckpt, net = tiny_clip
    model = load_model(
        f"open_clip:{folder}", weights=str(ckpt), device="cpu", label_space="imagenet-d"
    )
    zs = model.describe()["zero_shot"]
    assert model.num_outputs == 113 and zs["templates"] == ["A photo of a {}"]
    assert zs["logit_scale"] == 100.0
    texts = dict(zip(model.label_space.classes, zs["class_texts"]))
    assert texts["coffee/french press"] == "coffee or french press"
    assert texts["mixing/salad bowl"] == "mixing or salad bowl" and texts["t-shirt"] == "t shirt"
    tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
    tokens = tokenizer([f"A photo of a {c}" for c in zs["class_texts"]])
    batch = torch.stack([model.transform(im) for im in images])
    with torch.inference_mode():
        txt = F.normalize(net.encode_text(tokens), dim=-1)
        img = F.normalize(net.encode_image(batch), dim=-1)
    torch.testing.assert_close(model.predict(batch), 100.0 * img @ txt.T, atol=1e-4, rtol=1e-4)
