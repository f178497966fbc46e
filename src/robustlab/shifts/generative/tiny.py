"""Tiny diffusion checkpoints with random weights: every diffusion-backed path, offline.

``robustlab synth``, the ``ai_bg`` scenario and the ImageNet-E diffusers fill
(``ROBUSTLAB_INPAINTER``) and background complexity (``ROBUSTLAB_BG_DIFFUSION``) need a
local checkpoint of gigabytes that a new user may not have, and that a test cannot
download. :func:`build_tiny_checkpoints` writes the same kinds of folders (diffusers
``save_pretrained`` layouts) with a few thousand seeded random weights each, so the whole
pipeline (loading, batching, seeding, resuming, files, database) can be tried in seconds on a
CPU. Their pictures are noise: the folders carry a marker file (:data:`MARKER`) and every run
that loads one says so in a warning line (:func:`warn_if_random`), because numbers measured
on them mean nothing.

``robustlab data tiny-checkpoints --out DIR`` is the command; the tests use the same
builders, so what a user tries is what is tested.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from robustlab.errors import MissingResourceError, environment_errors
from robustlab.records.manifest import MANIFEST, SYNTH_PREFIX, read_record
from robustlab.files.safety import claim_out_folder
from robustlab.shifts.generative._diffusers import quiet_loading

log = logging.getLogger(__name__)

# The file that marks a folder's weights as random (written into each checkpoint folder).
MARKER = "ROBUSTLAB_RANDOM_WEIGHTS.json"

# Subfolder -> what it stands for and which option takes it (the README's words).
KINDS = {
    "text2image": "a Stable Diffusion text-to-image pipeline: robustlab synth --checkpoint",
    "inpaint": "a Stable Diffusion inpainting pipeline: ROBUSTLAB_INPAINTER (the ai_bg "
    "scenario, ROBUSTLAB_EDIT_FILL=diffusers for the ImageNet-E edits)",
    "bg-unet": "a pixel-space diffusion UNet (learned sigma): ROBUSTLAB_BG_DIFFUSION (the "
    "ImageNet-E bg_complexity shifts)",
}

WARNING = (
    "{path} holds RANDOM weights (robustlab data tiny-checkpoints): its images are noise, "
    "for trying the pipeline only, never for numbers"
)

_warned: set[str] = set()
_warned_lock = threading.Lock()


def _byte_chars() -> list[str]:
    """The 256 printable stand-ins CLIP's byte-level BPE uses for raw bytes."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    extra = [b for b in range(256) if b not in keep]
    return [chr(c) for c in keep] + [chr(256 + i) for i in range(len(extra))]


def _need_diffusers() -> None:
    try:
        import diffusers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise MissingResourceError(
            "tiny diffusion checkpoints need diffusers and transformers",
            hint="pip install 'robustlab[models]'",
        ) from None


def tiny_sd_parts(*, unet_in_channels: int = 4, context_length: int = 77, seed: int = 0) -> dict:
    """Tiny random Stable Diffusion components (no download), seeded.

    The tokenizer's vocabulary is the 512 single-byte symbols (with and without the
    end-of-word mark) written here, so any prompt tokenizes without a merges file; the
    4-level VAE has the usual factor 8, so 64x64 images have 8x8 latents.
    ``unet_in_channels``: 4 for text-to-image, 9 for inpainting (noisy latents + mask +
    masked-image latents).
    """
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(seed)
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


def save_text2image(path, *, seed: int = 0) -> Path:
    """A ``StableDiffusionPipeline`` with tiny random weights, saved with save_pretrained."""
    _need_diffusers()
    from diffusers import StableDiffusionPipeline

    path = Path(path)
    with quiet_loading():
        StableDiffusionPipeline(**tiny_sd_parts(seed=seed)).save_pretrained(path)
    _mark(path, "text2image", seed)
    return path


def save_inpaint(path, *, seed: int = 0, context_length: int = 77) -> Path:
    """A ``StableDiffusionInpaintPipeline`` (9-channel UNet) with tiny random weights."""
    _need_diffusers()
    from diffusers import StableDiffusionInpaintPipeline

    path = Path(path)
    parts = tiny_sd_parts(unet_in_channels=9, context_length=context_length, seed=seed)
    with quiet_loading():
        StableDiffusionInpaintPipeline(**parts).save_pretrained(path)
    _mark(path, "inpaint", seed)
    return path


def save_bg_unet(path, *, seed: int = 0) -> Path:
    """A pixel-space ``UNet2DModel`` (3 in, 6 out channels: learned sigma, as the guided
    sampler reads the official ADM) with tiny random weights.

    Every parameter is drawn at random: diffusers' init zeroes no output layer today, but
    a network whose noise estimate is identically 0 would hide the network from the run.
    """
    _need_diffusers()
    import torch
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    unet = UNet2DModel(
        sample_size=16,
        in_channels=3,
        out_channels=6,
        layers_per_block=1,
        block_out_channels=(16, 32),
        norm_num_groups=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    )
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in unet.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    path = Path(path)
    with quiet_loading():
        unet.save_pretrained(path)
    _mark(path, "bg-unet", seed)
    return path


BUILDERS = {"text2image": save_text2image, "inpaint": save_inpaint, "bg-unet": save_bg_unet}


def _mark(path: Path, kind: str, seed: int) -> None:
    with environment_errors(f"cannot write {path / MARKER}"):
        (path / MARKER).write_text(
            json.dumps(
                {
                    "random_weights": True,
                    "made_by": "robustlab data tiny-checkpoints",
                    "kind": kind,
                    "stands_for": KINDS[kind],
                    "seed": seed,
                    "use": "trying the pipeline offline; never for numbers",
                },
                indent=2,
            )
            + "\n"
        )


README = """# Tiny diffusion checkpoints with RANDOM weights

Made by `robustlab data tiny-checkpoints`. Every weight here is a seeded random number: the
images these checkpoints draw are noise. They exist to try robustlab's diffusion-backed
commands offline, in seconds, on a CPU (loading, seeding, batching, resuming, files and the
results database), and for its tests. Never report a number measured with them; every run
that loads one prints a warning line saying so.

{listing}

Use your own checkpoints (same layouts, written by diffusers' `save_pretrained`) for real runs.
"""


def build_tiny_checkpoints(out, *, seed: int = 0) -> dict[str, Path]:
    """Write every tiny checkpoint under ``out`` (one folder per :data:`KINDS` key) plus a
    README; a folder already made (its marker is there) is kept. Returns name -> folder."""
    _need_diffusers()
    root = claim_out_folder(out, command="data tiny-checkpoints")  # the owner mark first
    made = {}
    for name, build in BUILDERS.items():
        folder = root / name
        if not (folder / MARKER).is_file():
            build(folder, seed=seed)
        made[name] = folder
    listing = "\n".join(f"- `{name}/`: {KINDS[name]}" for name in KINDS)
    with environment_errors(f"cannot write {root / 'README.md'}"):
        (root / "README.md").write_text(README.format(listing=listing))
    return made


def is_random(path) -> bool:
    """Whether the checkpoint at ``path`` (a folder, or a file inside one) carries the
    random-weights marker, in itself or in the folder above (a pipeline's ``unet/``)."""
    p = Path(path).expanduser()
    folder = p if p.is_dir() else p.parent
    return (folder / MARKER).is_file() or (folder.parent / MARKER).is_file()


def warn_if_random(path) -> bool:
    """Log :data:`WARNING` once per process for a random-weights checkpoint; True if it is."""
    if not is_random(path):
        return False
    key = str(Path(path).expanduser().resolve())
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        log.warning(WARNING.format(path=key))
    return True


def drawn_by_random(data_root) -> str | None:
    """The random-weight checkpoint that drew ``data_root``, when it is a ``robustlab
    synth`` folder whose manifest names one (the report flags runs on it); else None."""
    root = Path(data_root).expanduser()
    manifest = read_record(root / MANIFEST) or {}
    if not str(manifest.get("format", "")).startswith(SYNTH_PREFIX):
        return None
    try:
        path = manifest["checkpoint"]["path"]
    except (KeyError, TypeError):
        return None
    return str(path) if path and is_random(path) else None


def warn_if_drawn_by_random(data_root) -> bool:
    """Log one warning when ``data_root`` is a ``robustlab synth`` folder drawn by a
    random-weight checkpoint (its manifest names the checkpoint): numbers measured on its
    images (evaluate, mine) are about noise. True if it is."""
    root = Path(data_root).expanduser()
    path = drawn_by_random(root)
    if path is None:
        return False
    key = f"data:{root.resolve()}"
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        log.warning(
            "the images in %s were drawn by %s, a checkpoint with RANDOM weights (robustlab data "
            "tiny-checkpoints): they are noise, numbers measured on them mean nothing",
            root,
            path,
        )
    return True


__all__ = [
    "BUILDERS",
    "KINDS",
    "MARKER",
    "build_tiny_checkpoints",
    "drawn_by_random",
    "is_random",
    "save_bg_unet",
    "save_inpaint",
    "save_text2image",
    "tiny_sd_parts",
    "warn_if_drawn_by_random",
    "warn_if_random",
]
