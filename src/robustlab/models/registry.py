"""The model-adapter registry: one table maps a spec prefix to the function that loads it.

Built-in adapters register by dotted path, so ``load_model("lite0")`` never imports timm,
open_clip or onnxruntime; an adapter's module is imported the first time a spec names it.
Users add their own adapter with the decorator, and it then works everywhere a spec is
accepted (CLI included, once the module that defines it is imported)::

    from robustlab.models import register_adapter, TorchModel

    @register_adapter("mylab", pattern="mylab:NAME", description="our in-house nets")
    def load(name, *, spec, weights=None, device=None, label_space=None, batch_size=None):
        ...
        return TorchModel(...)

    load_model("mylab:resnet-v7")
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from robustlab.errors import InputError, closest

if TYPE_CHECKING:
    from robustlab.models.base import Model

Loader = Callable[..., "Model"]


@dataclass(frozen=True)
class Adapter:
    """One registered adapter.

    Attributes:
        prefix: What comes before ``:`` in a spec (``timm`` in ``timm:resnet18``).
        pattern: How a spec for it is written, shown by ``robustlab list models``.
        description: One line for ``robustlab list models``.
        target: The loader, or ``"module:function"`` imported on first use.
        inline_weights: Whether ``NAME@PATH`` gives the weights inline.
    """

    prefix: str
    pattern: str
    description: str
    target: Loader | str
    inline_weights: bool = True

    def loader(self) -> Loader:
        """The loading function, importing its module on first use."""
        if callable(self.target):
            return self.target
        module, _, func = self.target.partition(":")
        return getattr(importlib.import_module(module), func)


_ADAPTERS: dict[str, Adapter] = {}


def add_adapter(adapter: Adapter) -> Adapter:
    """Register ``adapter``; a prefix can be registered once (a second one is a bug)."""
    if not adapter.prefix.isidentifier():
        raise InputError(f"adapter prefix must be a plain name, got {adapter.prefix!r}")
    if adapter.prefix in _ADAPTERS:
        raise InputError(
            f"a model adapter for {adapter.prefix!r} is already registered",
            hint="pick another prefix",
        )
    _ADAPTERS[adapter.prefix] = adapter
    return adapter


def register_adapter(
    prefix: str, *, pattern: str | None = None, description: str = "", inline_weights: bool = True
) -> Callable[[Loader], Loader]:
    """Decorator: make ``load_model("PREFIX:REST")`` call the decorated function.

    The function is called as ``fn(REST, spec=..., weights=..., device=..., label_space=...,
    batch_size=...)`` and returns a :class:`robustlab.models.Model`.
    """

    def decorate(fn: Loader) -> Loader:
        add_adapter(Adapter(prefix, pattern or f"{prefix}:NAME", description, fn, inline_weights))
        return fn

    return decorate


def adapters() -> list[Adapter]:
    """Every registered adapter, in registration order."""
    return list(_ADAPTERS.values())


def find_adapter(prefix: str) -> Adapter | None:
    return _ADAPTERS.get(prefix)


def unknown_model(prefix: str, name: str, known: Iterable[str], listing: str) -> InputError:
    """The error for a name an adapter does not know, with the closest of ``known`` (the
    adapter's own list: ``timm.list_models()``...) written as whole specs, so that the
    suggestion can be pasted back: ``unknown timm model 'resnet5'; did you mean
    timm:resnet50?``. Without a close name, ``listing`` says where the names are."""
    close = closest(name, known)
    if close:
        specs = " or ".join(f"{prefix}:{c}" for c in close)
        return InputError(f"unknown {prefix} model {name!r}; did you mean {specs}?")
    return InputError(f"unknown {prefix} model {name!r}", hint=f"{listing} lists them")


for _prefix, _pattern, _description, _inline in (
    (
        "timm",
        "timm:NAME",
        "timm architecture; --weights PATH or timm's cached pretrained weights",
        True,
    ),
    (
        "torchvision",
        "torchvision:NAME",
        "torchvision architecture; --weights PATH or its cached weights",
        True,
    ),
    ("hf", "hf:PATH_OR_ID", "transformers image classifier from a local folder or the hub", False),
    (
        "open_clip",
        "open_clip:ARCH",
        "CLIP zero-shot over the label space's class names; needs --weights PATH",
        True,
    ),
    ("onnx", "onnx:PATH", "ONNX image classifier run with onnxruntime", False),
):
    add_adapter(
        Adapter(
            _prefix,
            _pattern,
            _description,
            f"robustlab.models.{_prefix}_models:load"
            if _prefix != "hf"
            else "robustlab.models.hf_models:load",
            _inline,
        )
    )
