"""``timm:NAME``: any timm architecture with a local checkpoint or timm's own weights.

Weights, in order: ``weights=PATH`` (a state dict; a head with another class count is
detected and built to match); timm's pretrained file already in the local cache (Hugging
Face hub cache or torch hub checkpoints); a download through timm, only when downloads
are allowed (not ``HF_HUB_OFFLINE=1``). Preprocessing is the model's pretrained config
(input size, crop_pct, interpolation, mean/std), as timm's own eval transform uses it.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from robustlab.errors import InputError, MissingResourceError

from .base import TorchModel
from .devices import auto_device, default_batch_size
from .hub import hub_endpoint, offline, unreachable
from .preprocess import Preprocessing
from .registry import unknown_model
from .weights import head_classes, load_state_dict_file, load_strict, package_versions, weights_hash

CPU_BATCH = 32


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def cached_weights(cfg) -> Path | None:
    """timm's pretrained file for ``cfg`` if it is already on this machine, else None."""
    hub_id = getattr(cfg, "hf_hub_id", None)
    if hub_id:
        from huggingface_hub import try_to_load_from_cache

        names = (
            [cfg.hf_hub_filename]
            if getattr(cfg, "hf_hub_filename", None)
            else ["model.safetensors", "pytorch_model.bin"]
        )
        repo, _, revision = hub_id.partition("@")
        for name in names:
            try:
                p = try_to_load_from_cache(repo, name, revision=revision or None)
            except Exception:  # noqa: BLE001 - malformed id: treat as not cached
                p = None
            if isinstance(p, str) and Path(p).is_file():
                return Path(p)
    url = getattr(cfg, "url", None)
    if url:
        import torch

        p = Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(url).path).name
        if p.is_file():
            return p
    return None


def _where(cfg) -> str:
    """Where timm's weights for ``cfg`` come from and where a manual download should go."""
    if getattr(cfg, "hf_hub_id", None):
        from huggingface_hub import constants

        repo = cfg.hf_hub_id.partition("@")[0]
        return (
            f"download model.safetensors from https://huggingface.co/{repo} (it is looked for "
            f"in the Hugging Face cache {constants.HF_HUB_CACHE}) and pass --weights PATH"
        )
    import torch

    return (
        f"download {cfg.url} into {Path(torch.hub.get_dir()) / 'checkpoints'} "
        "or pass --weights PATH"
    )


def preprocessing_of(net) -> Preprocessing:
    from timm.data import resolve_data_config

    cfg = resolve_data_config({}, model=net)
    _, h, w = cfg["input_size"]
    interp = cfg.get("interpolation") or "bilinear"
    if interp == "random":
        interp = "bilinear"
    return Preprocessing(
        input_size=h if h == w else (h, w),
        crop_pct=float(cfg.get("crop_pct") or 1.0),
        interpolation=interp,
        mean=tuple(cfg["mean"]),
        std=tuple(cfg["std"]),
    )


def load(
    name: str, *, spec: str, weights=None, device=None, label_space=None, batch_size=None
) -> TorchModel:
    import timm

    hub = name.startswith("hf-hub:")
    if not hub and not timm.models.is_model(name):
        raise unknown_model("timm", name, timm.list_models(), "timm.list_models()")
    source = "file"
    if weights is not None:
        path = Path(weights).expanduser()
        if not path.is_file():
            raise MissingResourceError(f"weights file {path} does not exist")
        sd = load_state_dict_file(path)
        net = timm.create_model(name, pretrained=False)
        n = head_classes(net, sd)
        if n is not None:
            net = timm.create_model(name, pretrained=False, num_classes=n)
        load_strict(net, sd, f"timm:{name}")
        files = [path]
    else:
        cfg = None if hub else timm.models.get_pretrained_cfg(name)
        if not hub and (cfg is None or not (cfg.hf_hub_id or cfg.url)):
            raise InputError(f"timm has no pretrained weights for {name!r}; pass --weights PATH")
        local = None if hub else cached_weights(cfg)
        if local is not None:
            net = timm.create_model(
                name, pretrained=True, pretrained_cfg_overlay={"file": str(local)}
            )
            source, files = "timm cache", [local]
        elif offline():
            raise MissingResourceError(
                f"timm:{name} has no weights on this machine and downloads are off "
                f"(HF_HUB_OFFLINE): "
                + (f"download the hub model {name[7:]}" if hub else _where(cfg))
            )
        else:
            why = unreachable(hub_endpoint() if hub or cfg.hf_hub_id else cfg.url)
            if why:
                raise MissingResourceError(
                    f"cannot download timm:{name} weights: {why}; "
                    + (f"download the hub model {name[7:]}" if hub else _where(cfg))
                )
            try:
                net = timm.create_model(name, pretrained=True)
            except Exception as exc:  # noqa: BLE001 - no network, missing file on the hub...
                raise MissingResourceError(
                    f"could not download timm:{name} weights ({_first_line(exc)}); "
                    + (f"download the hub model {name[7:]}" if hub else _where(cfg))
                ) from None
            local = None if hub else cached_weights(cfg)
            source = "timm download"
            files = [local] if local is not None else []
    dev = auto_device(device)
    return TorchModel(
        spec,
        net,
        preprocessing=preprocessing_of(net),
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=label_space,
        weights_path=files[0] if files else None,
        weights_hash=weights_hash(*files) if files else "",
        model_outputs=net.num_classes,
        details={
            "architecture": f"timm:{name}",
            "weights_source": source,
            "versions": package_versions("timm"),
        },
    )
