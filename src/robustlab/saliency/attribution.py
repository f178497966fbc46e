"""Saliency maps from well-kept libraries: ``grad-cam`` for the CAM family, Captum for
gradient methods. robustlab only picks the layer, the target class and the batch; the
maps are the libraries' own (tests/test_saliency.py checks lite0's Grad-CAM against
``pytorch_grad_cam`` called directly).

The target layer is found, not configured: a forward pass with hooks on every module
records which ones output a spatial feature map (B, C, H, W with H, W > 1); the last map
computed before the classifier is the one Grad-CAM explains (for a CNN, what the global
pooling reads: ``bn2`` of timm's EfficientNets, ``layer4`` of a ResNet). The outermost
module that returns that tensor is named, so a block is chosen over the activation inside
it. A vision transformer (a module with ``blocks`` and ``patch_embed``, timm's layout) has
no late spatial map: its last block's ``norm1`` is used, the tokens reshaped into the
patch grid (prefix tokens dropped), as the grad-cam documentation does for ViTs. The
chosen layer is recorded with the run; ``--target-layer NAME`` overrides it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from robustlab.errors import InputError, MissingResourceError
from robustlab.saliency.methods import DEFAULT_METHOD, METHODS

# Integrated Gradients: steps of the path from Captum's default baseline (zeros of the
# normalised input, i.e. the normalisation's mean colour) to the image.
IG_STEPS = 32
INSTALL_HINT = "pip install 'robustlab[saliency]' (grad-cam==1.5.7, captum==0.9.0)"


def require_library(method: str) -> None:
    """One-line MissingResourceError naming the package when the method's library is absent."""
    if method not in METHODS:
        raise InputError(
            f"unknown saliency method {method!r}", hint=f"use one of: {', '.join(METHODS)}"
        )
    lib = METHODS[method][0]
    module = "pytorch_grad_cam" if lib == "grad-cam" else "captum.attr"
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        version = "grad-cam==1.5.7" if lib == "grad-cam" else "captum==0.9.0"
        raise MissingResourceError(
            f"saliency method {method!r} needs the {lib} package, which is not installed",
            hint=f"pip install {version} (or {INSTALL_HINT})",
        ) from None


@dataclass(frozen=True)
class TargetLayer:
    """The layer a CAM method explains.

    Attributes:
        name: Dotted module name inside the network (``bn2``, ``layer4``, ``blocks.11.norm1``).
        kind: ``"conv"`` (a B, C, H, W map) or ``"tokens"`` (B, N, C tokens of a ViT).
        grid: (H, W) of the patch grid for ``tokens``.
        prefix: Tokens before the patches (class, distillation, registers) for ``tokens``.
        how: ``"auto"`` or ``"user"``.
    """

    name: str
    kind: str = "conv"
    grid: tuple[int, int] | None = None
    prefix: int = 0
    how: str = "auto"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "grid": list(self.grid) if self.grid else None,
            "prefix": self.prefix,
            "how": self.how,
        }

    def reshape_transform(self) -> Callable | None:
        if self.kind != "tokens":
            return None
        return _TokenGrid(self.grid or (0, 0), self.prefix)


class _TokenGrid:
    """(B, prefix + H*W, C) tokens -> (B, C, H, W), a picklable reshape for grad-cam."""

    def __init__(self, grid: tuple[int, int], prefix: int):
        self.grid, self.prefix = tuple(grid), int(prefix)

    def __call__(self, tensor):
        h, w = self.grid
        x = tensor[:, self.prefix :, :]
        return x.reshape(x.shape[0], h, w, x.shape[2]).permute(0, 3, 1, 2)


def _module(net, name: str):
    try:
        return net.get_submodule(name)
    except AttributeError:
        names = [n for n, _ in net.named_modules() if n]
        raise InputError(
            f"the network has no layer {name!r}",
            hint=f"name one of its modules, e.g. {', '.join(names[-5:])}",
        ) from None


def find_target_layer(net, input_hw: tuple[int, int], name: str | None = None) -> TargetLayer:
    """The layer Grad-CAM should explain in ``net`` (see the module docstring).

    Args:
        net: The ``torch.nn.Module``.
        input_hw: The model's input (height, width), for the probing forward pass.
        name: A module name the user chose (checked to exist), or None to find one.
    """
    import torch

    is_vit = hasattr(net, "blocks") and hasattr(net, "patch_embed")
    if is_vit:
        grid = getattr(net.patch_embed, "grid_size", None)
        if grid is None:
            n = int(getattr(net.patch_embed, "num_patches", 0))
            grid = (int(math.isqrt(n)),) * 2
        prefix = int(getattr(net, "num_prefix_tokens", 1))
        chosen = name or f"blocks.{len(net.blocks) - 1}.norm1"
        _module(net, chosen)
        return TargetLayer(
            chosen, "tokens", (int(grid[0]), int(grid[1])), prefix, "user" if name else "auto"
        )
    if name is not None:
        _module(net, name)
        return TargetLayer(name, "conv", how="user")
    seen: list[tuple[int, str, Any]] = []
    hooks = []

    def hook(mod_name):
        def fn(_mod, _inp, out):
            if isinstance(out, torch.Tensor) and out.ndim == 4 and min(out.shape[-2:]) > 1:
                seen.append((len(seen), mod_name, out))

        return fn

    for mod_name, mod in net.named_modules():
        if mod_name:
            hooks.append(mod.register_forward_hook(hook(mod_name)))
    dev = next(net.parameters()).device
    try:
        with torch.no_grad():
            net(torch.zeros(1, 3, *input_hw, device=dev))
    finally:
        for h in hooks:
            h.remove()
    if not seen:
        raise InputError(
            "found no layer with a spatial feature map for a CAM method",
            hint="use --method input_x_gradient, or name a layer with --target-layer",
        )
    last = seen[-1][2]
    # The outermost module returning that very tensor (a block, not the activation in it).
    same = [n for _, n, out in seen if out is last]
    return TargetLayer(min(same, key=lambda n: (n.count("."), len(n))), "conv")


@contextmanager
def _graph_from(net, layer: TargetLayer | None) -> Iterator[None]:
    """Record the autograd graph from ``layer``'s output to the logits only.

    A CAM method needs the gradient of the class score at the layer's output and nothing
    below it, but with the network's parameters requiring gradients autograd keeps every
    activation of the whole forward pass for a backward pass through the whole network
    (lite0, 32 images at 224: 3 GB, and grad-cam held the previous batch's graph while
    the next was built: 6 GB peaks). Here the parameters require no gradient while the
    call runs, and the layer's output is handed on as a fresh leaf that does: below the
    layer nothing is recorded, and the gradient at the layer, a function of what lies
    above it only, is the same one the whole graph gives, in the same operations.
    """
    import torch

    if layer is None:
        yield
        return
    params = [p for p in net.parameters() if p.requires_grad]

    def leaf(_module, _inputs, output):
        if isinstance(output, torch.Tensor) and torch.is_grad_enabled():
            return output.detach().requires_grad_(True)
        return None

    handle = net.get_submodule(layer.name).register_forward_hook(leaf, prepend=True)
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        handle.remove()
        for p in params:
            p.requires_grad_(True)


class Attributor:
    """Computes saliency maps for a batch, the target class given per image.

    Args:
        net: The ``torch.nn.Module`` (in eval mode, on its device).
        method: A key of :data:`METHODS`.
        layer: The :class:`TargetLayer` (CAM methods; ignored by gradient methods).
    """

    def __init__(self, net, method: str, layer: TargetLayer | None):
        require_library(method)
        self.net = net
        self.method = method
        self.layer = layer
        lib, cls, needs_layer = METHODS[method]
        self._cam = None
        if lib == "grad-cam":
            import pytorch_grad_cam

            if layer is None:
                raise InputError(f"{method} needs a target layer")
            self._cam = getattr(pytorch_grad_cam, cls)(
                model=net,
                target_layers=[net.get_submodule(layer.name)],
                reshape_transform=layer.reshape_transform(),
            )
        else:
            import captum.attr

            self._captum = getattr(captum.attr, cls)(net)

    def __call__(self, inputs, targets) -> np.ndarray:
        """(B, H, W) float32 maps at the input's resolution.

        Args:
            inputs: (B, 3, H, W) float32 normalised input.
            targets: (B,) output column of the network to explain, per image.
        """
        import torch

        targets = [int(t) for t in targets]
        if self._cam is not None:
            from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

            with _graph_from(self.net, self.layer):
                try:
                    return self._cam(
                        input_tensor=inputs, targets=[ClassifierOutputTarget(t) for t in targets]
                    )
                finally:
                    # grad-cam keeps the last batch's output, and with it that batch's
                    # graph (retain_graph=True), until the next call has built its own.
                    self._cam.outputs = None
        x = inputs.detach().clone().requires_grad_(True)
        kw: dict[str, Any] = {"target": torch.as_tensor(targets, device=x.device)}
        if self.method == "integrated_gradients":
            kw["n_steps"] = IG_STEPS
            kw["internal_batch_size"] = x.shape[0]
        attr = self._captum.attribute(x, **kw)
        # Channels summed: a pixel's evidence is the sum over its colour inputs.
        return attr.sum(1).detach().float().cpu().numpy()

    def describe(self) -> dict[str, Any]:
        lib, cls, _ = METHODS[self.method]
        from importlib import metadata

        return {
            "method": self.method,
            "library": lib,
            "class": cls,
            "version": metadata.version(lib),
            "layer": self.layer.describe() if self.layer is not None else None,
            **({"n_steps": IG_STEPS} if self.method == "integrated_gradients" else {}),
        }

    def close(self) -> None:
        """Remove grad-cam's hooks from the network."""
        if self._cam is not None:
            self._cam.activations_and_grads.release()
            self._cam = None


__all__ = ["METHODS", "DEFAULT_METHOD", "Attributor", "TargetLayer", "find_target_layer"]
