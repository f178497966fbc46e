"""ImageNet-E background complexity: the ADM network and loader, the guided sampler on tiny
randomly initialised models (ADM and diffusers UNet2DModel), and the registered shifts."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from robustlab.errors import InputError, MissingResourceError
from robustlab.models.adm import (
    OPENAI_256_UNCOND,
    ADMConfig,
    ADMUNet,
    Denoiser,
    load_adm,
    load_denoiser,
)
from robustlab.shifts.generative.guided_bg import (
    ENV_PATH,
    ClassifierGuide,
    GuidedBackground,
    Respaced,
    hf_complexity,
    space_timesteps,
)

TINY = ADMConfig(
    image_size=32,
    model_channels=32,
    channel_mult=(1, 2),
    num_res_blocks=1,
    attention_resolutions=(16,),
    num_head_channels=16,
)


def _randomise(net: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter drawn at random (the official init zeroes some output convs, which
    would make eps identically 0 and the test blind to the network)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return net.eval().requires_grad_(False)


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Tiny models run fastest on one thread (and the test machine is shared)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tiny_adm() -> Denoiser:
    return Denoiser(_randomise(ADMUNet(TINY)), "adm", TINY.image_size, True)


@pytest.fixture(scope="module")
def sampler(tiny_adm) -> GuidedBackground:
    return GuidedBackground(tiny_adm, device="cpu")


def _scene(h=32, w=32):
    """Two flat halves (a plain background) and a square object in the middle."""
    img = np.full((h, w, 3), 130, np.uint8)
    img[:, : w // 2] = (60, 90, 40)
    img[h // 3 : 2 * h // 3, w // 3 : 2 * w // 3] = (200, 30, 30)
    keep = np.zeros((h, w), bool)
    keep[h // 3 : 2 * h // 3, w // 3 : 2 * w // 3] = True
    return img, keep


# --------------------------------------------------------------------------- ADM network
def test_full_size_adm_has_the_official_checkpoint_layout():
    """The 256x256 unconditional architecture: the official parameter count and key names
    (checked against guided_diffusion/unet.py: input_blocks.0.0, time_embed.{0,2},
    middle_block.1.qkv, out.2, ResBlock in_layers/emb_layers/out_layers/skip_connection)."""
    with torch.device("meta"):
        sd = ADMUNet(OPENAI_256_UNCOND).state_dict()
    assert len(sd) == 566
    assert sum(v.numel() for v in sd.values()) == 552_814_086
    shapes = {k: tuple(v.shape) for k, v in sd.items()}
    assert shapes["input_blocks.0.0.weight"] == (256, 3, 3, 3)
    assert shapes["time_embed.0.weight"] == (1024, 256)
    assert shapes["time_embed.2.weight"] == (1024, 1024)
    assert shapes["middle_block.1.qkv.weight"] == (3072, 1024, 1)
    assert shapes["middle_block.1.proj_out.weight"] == (1024, 1024, 1)
    assert shapes["out.2.weight"] == (6, 256, 3, 3)
    assert shapes["input_blocks.1.0.emb_layers.1.weight"] == (512, 1024)  # scale-shift: 2x
    assert shapes["input_blocks.3.0.in_layers.2.weight"] == (256, 256, 3, 3)  # resblock down
    assert shapes["output_blocks.0.0.skip_connection.weight"] == (1024, 2048, 1, 1)
    assert "output_blocks.2.2.out_layers.3.weight" in shapes  # resblock up


def test_adm_loader_round_trips_a_state_dict(tmp_path, tiny_adm):
    path = tmp_path / "tiny.pt"
    torch.save(tiny_adm.net.state_dict(), path)
    loaded = load_adm(path, TINY)
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([3.0, 700.0])
    with torch.no_grad():
        assert torch.equal(loaded(x, t), tiny_adm(x, t))
    assert loaded.kind == "adm" and loaded.learn_sigma and len(loaded.fingerprint) == 16
    assert loaded.describe()["config"]["model_channels"] == 32


@pytest.mark.parametrize(
    "change, words",
    [
        (
            lambda sd: sd.pop("middle_block.1.qkv.weight"),
            ["1 missing", "middle_block.1.qkv.weight"],
        ),
        (
            lambda sd: sd.__setitem__("extra.weight", torch.zeros(1)),
            ["1 unexpected", "extra.weight"],
        ),
        (
            lambda sd: sd.__setitem__("out.2.weight", torch.zeros(3, 32, 3, 3)),
            ["another shape", "out.2.weight"],
        ),
    ],
)
def test_adm_loader_names_wrong_keys_in_one_line(tmp_path, tiny_adm, change, words):
    sd = dict(tiny_adm.net.state_dict())
    change(sd)
    torch.save(sd, tmp_path / "bad.pt")
    with pytest.raises(InputError) as info:
        load_adm(tmp_path / "bad.pt", TINY)
    msg = str(info.value)
    assert "\n" not in msg and all(w in msg for w in words)


def test_adm_loader_refuses_the_wrong_architecture_and_bad_files(tmp_path, tiny_adm):
    torch.save(tiny_adm.net.state_dict(), tmp_path / "tiny.pt")
    with pytest.raises(InputError, match="missing .*unexpected|unexpected"):
        load_adm(tmp_path / "tiny.pt")  # the full-size config
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(InputError, match="cannot read"):
        load_denoiser(tmp_path / "junk.pt")
    with pytest.raises(MissingResourceError):
        load_denoiser(tmp_path / "absent.pt")


# --------------------------------------------------------------------------- schedule
def test_respacing_picks_guided_diffusions_steps():
    """Values from guided-diffusion's space_timesteps(1000, "100") (read from respace.py)."""
    steps = space_timesteps(1000, 100)
    assert steps[:8] == [0, 10, 20, 30, 40, 50, 61, 71] and steps[-2:] == [989, 999]
    s = Respaced.linear()
    assert len(s) == 100 and s.betas[0] == pytest.approx(1e-4)
    # Respacing keeps the cumulative products of the kept steps.
    base = np.cumprod(1 - np.linspace(1e-4, 0.02, 1000))
    np.testing.assert_allclose(s.alphas_cumprod, base[steps], rtol=1e-12)


# --------------------------------------------------------------------------- sampler
def test_sampler_is_seeded_and_keeps_object_pixels(sampler):
    img, keep = _scene(40, 48)  # not the model size: resized to 32 and back
    a = sampler(img, keep, seed=1, lam=20.0, steps=3)
    b = sampler(img, keep, seed=1, lam=20.0, steps=3)
    c = sampler(img, keep, seed=2, lam=20.0, steps=3)
    assert a.shape == img.shape and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a[~keep], c[~keep])
    assert np.array_equal(a[keep], img[keep]) and np.array_equal(c[keep], img[keep])
    assert not np.array_equal(a[~keep], img[~keep])  # the background was redrawn


def test_half_precision_autocast_runs_on_the_cpu(tiny_adm):
    """The reduced-precision path (autocast; float16 is the GPU default) keeps the contract
    and stays close to float32 from the same seed."""
    img, keep = _scene()
    half = GuidedBackground(tiny_adm, device="cpu", dtype="bfloat16")(
        img, keep, seed=3, lam=20.0, steps=2
    )
    full = GuidedBackground(tiny_adm, device="cpu")(img, keep, seed=3, lam=20.0, steps=2)
    assert np.array_equal(half[keep], img[keep])
    assert np.abs(half.astype(int) - full.astype(int))[~keep].mean() < 8
    with pytest.raises(InputError, match="dtype"):
        GuidedBackground(tiny_adm, device="cpu", dtype="int8")


def test_complexity_guidance_moves_background_high_frequencies(sampler):
    """From the same seed, lambda > 0 gives a busier background than lambda = 0 and
    lambda < 0 a plainer one, for every seed tried (the tiny 32 px model needs a larger
    lambda than the paper's 20 at 256 px: the HF gradient per pixel scales as 1/side)."""
    img, keep = _scene()
    for seed in range(3):
        hf = {
            lam: hf_complexity(sampler(img, keep, seed=seed, lam=lam, steps=4), keep)
            for lam in (-300.0, 0.0, 300.0)
        }
        assert hf[-300.0] < hf[0.0] < hf[300.0], (seed, hf)


def test_unguided_sampler_on_a_diffusers_unet(tmp_path):
    """The tiny diffusers UNet2DModel that `robustlab data tiny-checkpoints` writes (saved
    with save_pretrained) runs through the loader and the sampler (learned sigma read from
    its 6 output channels), seeded."""
    from robustlab.shifts.generative.tiny import save_bg_unet

    save_bg_unet(tmp_path / "unet")
    den = load_denoiser(tmp_path / "unet")
    assert den.kind == "diffusers" and den.image_size == 16 and den.learn_sigma
    g = GuidedBackground(den, device="cpu")
    img, keep = _scene(24, 24)
    a = g(img, keep, seed=5, lam=50.0, steps=3)
    assert np.array_equal(a, g(img, keep, seed=5, lam=50.0, steps=3))
    assert not np.array_equal(a, g(img, keep, seed=6, lam=50.0, steps=3))
    assert np.array_equal(a[keep], img[keep])


def test_a_folder_that_is_not_a_unet_is_one_line_error(tmp_path):
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=4, latent_channels=2)
    vae.save_pretrained(tmp_path / "vae")
    with pytest.raises(InputError, match="AutoencoderKL config, not a UNet2DModel") as info:
        load_denoiser(tmp_path / "vae")
    assert "\n" not in str(info.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="not a diffusers UNet2DModel folder"):
        load_denoiser(tmp_path / "empty")


def test_adversarial_guidance_lowers_the_true_class_probability(sampler):
    """With a real classifier (lite0), guidance away from its own top class lowers that
    class's probability on the result, compared with the same seed without it; and the
    differentiable preprocessing agrees with the model's own (PIL) one on the top class."""
    from robustlab.models import load_model

    model = load_model("lite0", device="cpu")
    guide = ClassifierGuide(model)
    img, keep = _scene()

    def logp(rgb):
        x = torch.from_numpy(rgb).permute(2, 0, 1)[None].float() / 255.0
        with torch.no_grad():
            return torch.log_softmax(model._forward(guide.preprocess(x)).float(), -1)[0]

    pil_top = int(model.predict(model.transform(img)[None])[0].argmax())
    assert int(logp(img).argmax()) == pil_top
    ids = [pil_top]
    plain = sampler(img, keep, seed=0, lam=0.0, steps=3)
    adv = sampler(img, keep, seed=0, lam=0.0, steps=3, guide=guide, guide_ids=ids, adv_scale=2000.0)
    assert np.array_equal(adv[keep], img[keep])
    assert logp(adv)[ids[0]] < logp(plain)[ids[0]] - 0.05


# --------------------------------------------------------------------------- shifts
def test_shifts_are_skipped_without_a_checkpoint_with_a_hint(monkeypatch):
    from robustlab.shifts import get_shift
    from robustlab.shifts.registry import missing_resource
    from robustlab.suites import get_suite

    monkeypatch.delenv(ENV_PATH, raising=False)
    why = missing_resource(get_shift("bg_complexity"))
    assert why and ENV_PATH in why
    assert {"bg_complexity", "bg_complexity_adv"} <= set(get_suite("imagenet-e").shifts)
    monkeypatch.setenv(ENV_PATH, "/no/such/file.pt")
    assert "does not exist" in missing_resource(get_shift("bg_complexity"))


def test_a_configured_checkpoint_that_does_not_load(monkeypatch, tmp_path, tiny_adm):
    """Not a torch file: refused by the cheap check before any work. A torch file of the
    wrong architecture: one-line InputError, and the failure is remembered so every later
    sample fails at once instead of reading the file again."""
    from robustlab.shifts import get_shift
    from robustlab.shifts.registry import missing_resource
    from robustlab.shifts.generative import guided_bg

    (tmp_path / "notes.pt").write_text("not weights")
    monkeypatch.setenv(ENV_PATH, str(tmp_path / "notes.pt"))
    assert "not a torch checkpoint file" in missing_resource(get_shift("bg_complexity"))
    torch.save(tiny_adm.net.state_dict(), tmp_path / "tiny.pt")  # not the 256x256 architecture
    monkeypatch.setenv(ENV_PATH, str(tmp_path / "tiny.pt"))
    assert missing_resource(get_shift("bg_complexity")) is None
    monkeypatch.setattr(guided_bg, "_FAILED", {})
    with pytest.raises(InputError, match="keys do not fit") as first:
        guided_bg.get_bg_diffusion(device="cpu")
    (tmp_path / "tiny.pt").unlink()  # a second call does not read the file again
    with pytest.raises(InputError) as second:
        guided_bg.get_bg_diffusion(device="cpu")
    assert second.value is first.value


def test_resuming_with_another_diffusion_checkpoint_is_refused(tmp_path):
    """bg_complexity's images in one run must come from one checkpoint (as ai_bg's)."""
    from robustlab.errors import InputChangedError
    from robustlab.workflows.evaluate.resume import check_same_resources
    from robustlab.store import RunRecord, Store

    store = Store(tmp_path / "r.duckdb")
    store.start_run(
        RunRecord(
            run_id="r1",
            model_spec="lite0",
            config={"bg_diffusion": {"path": "/a.pt", "fingerprint": "aaaa"}},
        )
    )
    check_same_resources(
        store,
        RunRecord(
            run_id="r1",
            model_spec="lite0",
            config={"bg_diffusion": {"path": "/copy.pt", "fingerprint": "aaaa"}},
        ),
    )
    with pytest.raises(
        InputChangedError,
        match=r"bg_complexity/bg_complexity_adv images drawn "
        r"by the bg_diffusion /a.pt \(fingerprint aaaa\)",
    ):
        check_same_resources(
            store,
            RunRecord(
                run_id="r1",
                model_spec="lite0",
                config={"bg_diffusion": {"path": "/b.pt", "fingerprint": "bbbb"}},
            ),
        )


def test_generate_records_the_checkpoint_fingerprint(monkeypatch, tmp_path):
    """``robustlab generate`` draws bg_complexity with the configured model (here a tiny
    diffusers UNet) and names it in the manifest; evaluating the folder records that one."""
    from diffusers import UNet2DModel
    from PIL import Image

    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.workflows.generate import generate
    from robustlab.shifts.generative import guided_bg
    from robustlab.models.adm import fingerprint

    torch.manual_seed(0)
    unet = UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=6,
        layers_per_block=1,
        block_out_channels=(16, 32),
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
    )
    unet.save_pretrained(tmp_path / "ckpt")
    monkeypatch.setattr(guided_bg, "_CACHE", {})
    monkeypatch.delenv("ROBUSTLAB_BG_DIFFUSION", raising=False)  # the keywords' checkpoint only
    img, keep = _scene(64, 64)
    for root, arr in (("data", img), ("masks", keep.astype(np.uint8) * 255)):
        (tmp_path / root / "n01440764").mkdir(parents=True)
        Image.fromarray(arr).save(tmp_path / root / "n01440764" / "x.png")
    res = generate(
        "imagenet-e",
        tmp_path / "data",
        tmp_path / "out",
        shifts=["bg_complexity"],
        levels=[20],
        masks=tmp_path / "masks",
        progress=False,
        workers=0,
        bg_diffusion=tmp_path / "ckpt",
        bg_diffusion_device="cpu",
    )
    assert res.written == 1 and res.failed == 0
    manifest = json.loads(res.manifest_path.read_text())
    rec = manifest["bg_diffusion"]
    assert rec == manifest["runs"][-1]["bg_diffusion"]
    assert rec["fingerprint"] == fingerprint(tmp_path / "ckpt") and rec["kind"] == "diffusers"
    plan = make_plan(
        EvaluateRequest.build(
            "lite0", tmp_path / "out", shifts=["bg_complexity"], levels=[20], device="cpu"
        )
    )
    assert plan.record.config["bg_diffusion"] == rec
