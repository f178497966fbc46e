"""Shared fixtures: paths into ../shared/data, skipped with a message when it is absent."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

# The full shared data (CI, developers) or, on a fresh clone, the compact copy in the
# repository (tests/fixtures/make_shared_mini.py builds it; same layout, fewer photos).
# ROBUSTLAB_TEST_SHARED_DATA=DIR points at another folder (/nonexistent: the mini copy).
MINI = Path(__file__).resolve().parent / "fixtures" / "shared-mini"
FULL = Path(
    os.environ.get("ROBUSTLAB_TEST_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
SHARED = FULL if FULL.is_dir() else MINI
SAMPLES = SHARED / "imagenet-samples"
REFERENCE_NPZ = SHARED / "imagenet_c_reference.npz"
REFERENCE_PNGS = SHARED / "imagenet_c_reference"


@pytest.fixture(autouse=True, scope="session")
def _content_hash_cache(tmp_path_factory):
    """robustlab's cache folder in a temp folder, never the user's ~/.cache (subprocesses
    inherit it). The kernels count as compiled, so the one-time "compiling" message never
    lands in the output of whichever test happens to run first (tests/test_kernels.py
    checks the message with a cache folder of its own)."""
    import os

    from robustlab.shifts.kernels import marker_path

    path = tmp_path_factory.mktemp("robustlab-cache")
    old = os.environ.get("ROBUSTLAB_CACHE_DIR")
    os.environ["ROBUSTLAB_CACHE_DIR"] = str(path)
    marker_path().touch()
    yield path
    if old is None:
        os.environ.pop("ROBUSTLAB_CACHE_DIR", None)
    else:
        os.environ["ROBUSTLAB_CACHE_DIR"] = old


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (CI provides ../shared/data)")
    return path


@pytest.fixture(scope="session")
def full_samples_dir() -> Path:
    """All 500 photos of ../shared/data (tests whose claim needs the whole set)."""
    if not FULL.is_dir():
        pytest.skip(
            f"needs the full shared data at {FULL}: the 500 ImageNet photos "
            "(set ROBUSTLAB_TEST_SHARED_DATA to its folder)"
        )
    return FULL / "imagenet-samples"


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """Folder of real ImageNet photos with labels.csv: 500, or 120 scaled-down ones from
    the repository's compact copy."""
    return _need(SAMPLES)


@pytest.fixture(scope="session")
def reference():
    """The reference ImageNet-C outputs: (key -> uint8 (n, 224, 224, 3) mapping, meta dict).

    From the shared npz (five photos), or from the repository's compact PNG copy (``clean``
    for the five photos, the corruptions for the first one).
    """
    if REFERENCE_NPZ.exists() or not REFERENCE_PNGS.is_dir():
        data = np.load(_need(REFERENCE_NPZ))
        return data, json.loads(str(data["meta"]))
    from PIL import Image

    data = {}
    for png in REFERENCE_PNGS.glob("*.png"):
        stacked = np.asarray(Image.open(png))
        data[png.stem] = stacked.reshape(-1, 224, *stacked.shape[1:])
    return data, json.loads((REFERENCE_PNGS / "meta.json").read_text())


@pytest.fixture(scope="session")
def photo(samples_dir) -> np.ndarray:
    """One real 224x224 RGB photo (resize 256, center crop 224)."""
    from PIL import Image

    img = Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return np.asarray(img.crop((left, top, left + 224, top + 224))).copy()


def make_masked_folder(samples_dir: Path, root: Path, n: int, step: float):
    """``n`` real photos in class folders under ``root/data``, each with an elliptic mask
    PNG under ``root/masks`` (ellipse centre moves down by ``step`` of the height per photo)."""
    import csv
    import shutil

    from PIL import Image

    data, masks = root / "data", root / "masks"
    with open(samples_dir / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for i, r in enumerate(rows):
        (data / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        shutil.copy(samples_dir / r["file"], data / r["wnid"] / r["file"])
        w, h = Image.open(samples_dir / r["file"]).size
        yy, xx = np.mgrid[:h, :w]
        m = ((yy - h * (0.45 + step * i)) / (0.3 * h)) ** 2 + ((xx - w / 2) / (0.25 * w)) ** 2 <= 1
        Image.fromarray(m.astype(np.uint8) * 255).save(
            masks / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png")
        )
    return data, masks


def _byte_chars() -> list[str]:
    """The 256 printable stand-ins CLIP's byte-level BPE uses for raw bytes."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    extra = [b for b in range(256) if b not in keep]
    return [chr(c) for c in keep] + [chr(256 + i) for i in range(len(extra))]


def tiny_sd_parts(*, unet_in_channels: int = 4, context_length: int = 77) -> dict:
    """Tiny random Stable Diffusion components (no download), seeded.

    The tokenizer's vocabulary is the 512 single-byte symbols (with and without the
    end-of-word mark) written here; the 4-level VAE has the usual factor 8, so 64x64 images
    have 8x8 latents. ``unet_in_channels``: 4 for text-to-image, 9 for inpainting (noisy
    latents + mask + masked-image latents).
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for suffix in ("", "</w>"):
        for c in _byte_chars():
            vocab[c + suffix] = len(vocab)
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[], model_max_length=context_length)
    text = CLIPTextModel(
        CLIPTextConfig(
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
            hidden_size=32,
            intermediate_size=37,
            num_attention_heads=4,
            num_hidden_layers=2,
            vocab_size=len(vocab),
            max_position_embeddings=context_length,
        )
    )
    unet = UNet2DConditionModel(
        block_out_channels=(16, 32),
        layers_per_block=1,
        sample_size=8,
        in_channels=unet_in_channels,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        attention_head_dim=4,
        norm_num_groups=8,
    )
    vae = AutoencoderKL(
        block_out_channels=(8, 8, 16, 16),
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        norm_num_groups=4,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        layers_per_block=1,
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    return {
        "vae": vae,
        "text_encoder": text,
        "tokenizer": tokenizer,
        "unet": unet,
        "scheduler": scheduler,
        "safety_checker": None,
        "feature_extractor": None,
        "requires_safety_checker": False,
    }


def save_tiny_text2image(path: Path) -> Path:
    """A StableDiffusionPipeline with tiny random weights (:func:`tiny_sd_parts`), saved
    with save_pretrained."""
    from diffusers import StableDiffusionPipeline

    StableDiffusionPipeline(**tiny_sd_parts()).save_pretrained(path)
    return path


def kill_after_first_file(cmd: list[str], out: Path, pattern: str, timeout: float = 120) -> None:
    """Start ``cmd``, SIGKILL it as soon as a file matching ``pattern`` exists under
    ``out`` (a crash in the middle of a run), and check that it really was killed."""
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout
        while time.time() < deadline and proc.poll() is None:
            if any(out.rglob(pattern)):
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


# Headless Chromium for the browser tests: Debian's package, driven by Playwright.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def sync_playwright_or_skip():
    """Playwright's ``sync_playwright``, or a skip that says what is missing."""
    if not CHROMIUM.exists():
        pytest.skip(f"browser test needs Chromium at {CHROMIUM} (Debian package 'chromium')")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser test needs the playwright Python package (pip install playwright)")
    return sync_playwright


@pytest.fixture(scope="session")
def ray_cluster() -> str:
    """One Ray instance for the whole test run (starting one takes seconds): 2 CPUs and one
    declared GPU, so the model actors take the ``num_gpus=1`` path on a CPU-only machine
    (torch finds no CUDA there and the model runs on the CPU). Yields the address that
    ``--address`` takes, for CLI runs in subprocesses; in this process robustlab uses the
    running instance as it is."""
    import logging

    ray = pytest.importorskip(
        "ray",
        reason="the Ray backend tests need ray[data] (pip install "
        "'robustlab[ray]', part of the test extra)",
    )
    pytest.importorskip("ray.data")
    started = not ray.is_initialized()
    if started:
        ray.init(
            num_cpus=2,
            num_gpus=1,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def pytest_collection_modifyitems(config, items):
    """Every test that uses the session's Ray instance runs on one xdist worker
    (``--dist loadgroup`` in pyproject's addopts): a Ray instance costs seconds to start and
    keeps daemons busy, so two workers each starting one would pay that twice on a 2-core
    machine. Without xdist the mark does nothing."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ray"))
