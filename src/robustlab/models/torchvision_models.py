"""``torchvision:NAME``: a torchvision classification model with a local state dict or its
default weights from the torch hub cache.

Weights, in order: ``weights=PATH`` (a state dict; a head with another class count is
built to match); the file of the model's ``DEFAULT`` weights already in
``<torch hub dir>/checkpoints``; a download by torchvision, only when downloads are
allowed. Preprocessing is that of the ``DEFAULT`` weights (``resize_size`` then
``crop_size``, their mean/std and interpolation), ImageNet 256/224 bilinear otherwise.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

from robustlab.errors import InputError, MissingResourceError

from .base import TorchModel
from .devices import auto_device, default_batch_size
from .hub import offline, unreachable
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from .registry import unknown_model
from .weights import head_classes, load_state_dict_file, load_strict, package_versions, weights_hash

CPU_BATCH = 32


def _default_weights(name: str):
    from torchvision.models import get_model_weights

    try:
        return get_model_weights(name).DEFAULT
    except (ValueError, KeyError, AttributeError):
        return None


def preprocessing_of(w) -> Preprocessing:
    """Preprocessing of a torchvision weights enum (its ``transforms()`` description)."""
    if w is None:
        return Preprocessing(224, 0.875, "bilinear", IMAGENET_MEAN, IMAGENET_STD)
    t = w.transforms()
    crop, resize = int(t.crop_size[0]), int(t.resize_size[0])
    return Preprocessing(
        input_size=crop,
        crop_pct=crop / resize,
        interpolation=str(t.interpolation.value),
        mean=tuple(float(v) for v in t.mean),
        std=tuple(float(v) for v in t.std),
    )


def cache_path(w) -> Path:
    import torch

    return Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(w.url).path).name


def load(
    name: str, *, spec: str, weights=None, device=None, label_space=None, batch_size=None
) -> TorchModel:
    from torchvision.models import get_model, list_models

    known = list_models()
    if name not in known:
        raise unknown_model("torchvision", name, known, "torchvision.models.list_models()")
    default = _default_weights(name)
    if weights is not None:
        path, source = Path(weights).expanduser(), "file"
        if not path.is_file():
            raise MissingResourceError(f"weights file {path} does not exist")
    else:
        if default is None:
            raise InputError(
                f"torchvision has no pretrained weights for {name!r}; pass --weights PATH"
            )
        path, source = cache_path(default), "torch hub cache"
        if not path.is_file():
            if offline():
                raise MissingResourceError(
                    f"torchvision:{name} has no weights on this machine and downloads "
                    f"are off: download {default.url} to {path} or pass --weights PATH"
                )
            why = unreachable(default.url)
            if why:
                raise MissingResourceError(
                    f"cannot download torchvision:{name} weights: {why}; download "
                    f"{default.url} to {path} or pass --weights PATH"
                )
            try:
                default.get_state_dict(progress=False, check_hash=True)
            except Exception as exc:  # noqa: BLE001 - urllib/hash errors of many types
                msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise MissingResourceError(
                    f"could not download torchvision:{name} weights ({msg}); download "
                    f"{default.url} to {path} or pass --weights PATH"
                ) from None
            source = "torchvision download"
    sd = load_state_dict_file(path)
    kwargs = {}
    if name in ("inception_v3", "googlenet"):
        # torchvision's own weights for these expect its input re-normalisation, as
        # get_model(weights=...) would switch on; a user checkpoint keeps the default.
        kwargs = {"aux_logits": True, "init_weights": False, "transform_input": weights is None}
    net = get_model(name, weights=None, **kwargs)
    n = head_classes(net, sd)
    if n is not None:
        net = get_model(name, weights=None, num_classes=n, **kwargs)
    load_strict(net, sd, f"torchvision:{name}")
    num = _num_outputs(net)
    dev = auto_device(device)
    return TorchModel(
        spec,
        net,
        preprocessing=preprocessing_of(default),
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=label_space,
        weights_path=path,
        weights_hash=weights_hash(path),
        model_outputs=num,
        details={
            "architecture": f"torchvision:{name}",
            "weights_source": source,
            "weights_enum": str(default) if default is not None else None,
            "versions": package_versions("torchvision"),
        },
    )


def _num_outputs(net) -> int:
    """Classes of a torchvision classifier, from one tiny forward pass (heads differ a lot)."""
    import torch

    net.eval()
    with torch.inference_mode():
        out = net(torch.zeros(1, 3, 224, 224))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return int(out.shape[1])
