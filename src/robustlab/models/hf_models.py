"""``hf:PATH_OR_ID``: a transformers image-classification model.

A local folder (``save_pretrained`` output: ``config.json``, weights, and normally
``preprocessor_config.json``) never touches the network. A hub id is downloaded by
transformers only because the user named it, and not at all when ``HF_HUB_OFFLINE=1``
(then only the local Hugging Face cache is used).

The preprocessing is read from ``preprocessor_config.json`` and reproduced by robustlab's
own transform, so it is recorded like every other adapter's: ``size`` as
``{"shortest_edge"}`` (resize the shorter side; with ``crop_pct`` or ``crop_size``, center
crop) or ``{"height", "width"}`` (squash to that size, then center crop ``crop_size``
when ``do_center_crop``), ``resample``, ``image_mean``/``image_std`` (0/1 when
``do_normalize`` is false).
"""

from __future__ import annotations

import json
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError, closest

from .base import Model
from .devices import auto_device, default_batch_size
from .hub import hub_endpoint, offline, unreachable
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from .weights import is_unsafe_pickle, package_versions, weights_hash, weights_refusal

CPU_BATCH = 16
WEIGHT_PATTERNS = (
    "*.safetensors",
    "pytorch_model*.bin",
    "*.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _side(size, default: int) -> tuple[str, int, int]:
    """('shortest', s, s) or ('exact', h, w) from a processor ``size`` entry."""
    if isinstance(size, int):
        return "shortest", size, size
    if isinstance(size, dict):
        if "shortest_edge" in size:
            return "shortest", int(size["shortest_edge"]), int(size["shortest_edge"])
        if "height" in size and "width" in size:
            return "exact", int(size["height"]), int(size["width"])
    return "shortest", default, default


# ConvNextImageProcessor warps to the square without a crop from this shortest_edge on.
CONVNEXT_NO_CROP = 384


def preprocessing_from(cfg: dict | None, image_size: int) -> tuple[Preprocessing, str]:
    """(Preprocessing, note) from a ``preprocessor_config.json`` dict (None: defaults).

    Pixel-equal to transformers' PIL image processors (``ViTImageProcessorPil``,
    ``CLIPImageProcessorPil``, ``ConvNextImageProcessorPil``: the processors of the
    transformers releases the checkpoints were evaluated with); transformers 5's default
    torchvision backend resizes tensors and differs by a grey level here and there.
    """
    if not cfg:
        return (
            Preprocessing(image_size, 0.875, "bilinear", IMAGENET_MEAN, IMAGENET_STD),
            "no preprocessor_config.json: ImageNet defaults",
        )
    interp = _RESAMPLE.get(cfg.get("resample", 2), "bilinear")
    if cfg.get("do_normalize", True):
        mean = tuple(float(v) for v in cfg.get("image_mean", IMAGENET_MEAN))
        std = tuple(float(v) for v in cfg.get("image_std", IMAGENET_STD))
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    kind, h, w = _side(cfg.get("size"), image_size)
    crop = cfg.get("do_center_crop", False) and cfg.get("crop_size") is not None
    if crop:
        _, ch, cw = _side(cfg["crop_size"], image_size)
    note = "from preprocessor_config.json"
    # transformers' processors start a centre crop at margin // 2 (torchvision rounds).
    args = (interp, mean, std)
    if kind == "shortest":
        if "crop_pct" in cfg and cfg.get("crop_pct"):
            # ConvNeXt's processor: below 384, resize to shortest_edge / crop_pct and crop
            # shortest_edge; from 384 on, warp to shortest_edge x shortest_edge, no crop.
            if h >= CONVNEXT_NO_CROP:
                return Preprocessing(h, 1.0, *args, "squash"), note
            return Preprocessing(h, float(cfg["crop_pct"]), *args, crop_offset="floor"), note
        if crop:
            size = (ch, cw) if ch != cw else ch
            return Preprocessing(size, min(1.0, ch / h), *args, crop_offset="floor"), note
        return Preprocessing(h, 1.0, *args), note
    if crop:
        pct = min(1.0, ch / h)
        size = (ch, cw) if ch != cw else ch
        return Preprocessing(size, pct, *args, "squash", crop_offset="floor"), note
    return Preprocessing((h, w) if h != w else h, 1.0, *args, "squash"), note


class HFModel(Model):
    adapter = "hf"

    def __init__(self, spec: str, net, **kwargs):
        self.module = net.eval().to(kwargs["device"])
        super().__init__(spec, **kwargs)

    def _forward(self, batch):
        out = self.module(pixel_values=batch.to(self.device, non_blocking=True))
        return out.logits


def _weight_files(folder: Path) -> list[Path]:
    files = []
    for pattern in WEIGHT_PATTERNS:
        files += sorted(p for p in folder.glob(pattern) if p.is_file())
    return sorted(set(files))


def load(
    src: str, *, spec: str, weights=None, device=None, label_space=None, batch_size=None
) -> HFModel:
    try:
        from transformers import AutoConfig, AutoModelForImageClassification
    except ImportError:
        raise MissingResourceError(
            "hf: models need transformers: pip install transformers"
        ) from None
    if weights is not None:
        raise InputError(
            "hf: models take their weights from the folder or hub id; "
            "--weights is not used (point hf: at a folder instead)"
        )
    local = Path(src).expanduser()
    is_local = local.exists()
    if is_local and not (local / "config.json").is_file():
        raise InputError(f"{local} is not a transformers model folder (no config.json)")
    if not is_local and (src.startswith((".", "/", "~")) or src.count("/") > 1):
        raise MissingResourceError(f"model folder {src} does not exist")
    # No network: use the local cache only, rather than retrying the hub for a minute.
    no_hub = None if is_local or offline() else unreachable(hub_endpoint())
    only_local = is_local or offline() or no_hub is not None
    where = str(local) if is_local else src
    try:
        config = AutoConfig.from_pretrained(where, local_files_only=only_local)
        net = AutoModelForImageClassification.from_pretrained(where, local_files_only=only_local)
    except Exception as exc:  # noqa: BLE001 - sorted below; anything else is a bug
        if is_unsafe_pickle(exc):  # a pytorch_model.bin holding more than tensors
            files = _weight_files(local) if is_local else []
            raise weights_refusal(files[0] if files else f"of hf:{src}", exc) from None
        if not isinstance(exc, (OSError, ValueError, KeyError)):
            raise
        if no_hub:
            raise MissingResourceError(
                f"hf:{src} is not in the local Hugging Face cache and {no_hub}"
                f"{_cached_near(src)}: download it (e.g. huggingface-cli download {src} "
                "--local-dir DIR) and use hf:DIR"
            ) from None
        if not is_local and offline():
            raise MissingResourceError(
                f"hf:{src} is not in the local Hugging Face cache and downloads are off "
                f"(HF_HUB_OFFLINE=1){_cached_near(src)}: download it (e.g. huggingface-cli "
                f"download {src} --local-dir DIR) and use hf:DIR"
            ) from None
        raise InputError(
            f"cannot load hf:{src} as an image classifier: {_first_line(exc)}"
        ) from None
    folder = local if is_local else _snapshot_folder(src)
    proc = None
    if folder is not None and (folder / "preprocessor_config.json").is_file():
        proc = json.loads((folder / "preprocessor_config.json").read_text(encoding="utf-8"))
    image_size = getattr(config, "image_size", None) or 224
    if isinstance(image_size, (list, tuple)):
        image_size = int(image_size[0])
    pre, note = preprocessing_from(proc, int(image_size))
    files = _weight_files(folder) if folder is not None else []
    dev = auto_device(device)
    return HFModel(
        spec,
        net,
        preprocessing=pre,
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=label_space,
        weights_path=files[0] if len(files) == 1 else folder,
        weights_hash=weights_hash(*files) if files else "",
        model_outputs=int(config.num_labels),
        details={
            "architecture": f"transformers:{type(net).__name__}",
            "preprocessing_source": note,
            "weights_source": "folder" if is_local else "hub",
            "versions": package_versions("transformers"),
        },
    )


def _cached_near(repo: str) -> str:
    """``"; did you mean hf:ORG/NAME?"`` for the closest model ids of the local hub cache
    (its ``models--ORG--NAME`` folders: the one list of hf: models this machine has), or
    ``""`` when none is close."""
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
    except ImportError:
        return ""
    root = Path(HF_HUB_CACHE)
    cached = [p.name[len("models--") :].replace("--", "/") for p in root.glob("models--*")]
    close = closest(repo, sorted(cached)) if root.is_dir() else []
    return f"; did you mean {' or '.join(f'hf:{c}' for c in close)}?" if close else ""


def _snapshot_folder(repo: str) -> Path | None:
    """Folder of the cached hub snapshot of ``repo`` (where transformers put its files)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        p = try_to_load_from_cache(repo, "config.json")
    except Exception:  # noqa: BLE001 - no cache entry is just 'not cached'
        return None
    return Path(p).parent if isinstance(p, str) else None
