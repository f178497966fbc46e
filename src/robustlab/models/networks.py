"""Small networks trained from scratch by ``robustlab holdout`` (32 x 32 icons, CPU budgets).

The ICONS-50 experiments of the ImageNet-C paper compare two pairs of architectures on the
held-out style and subtypes: a ResNeXt against the same ResNeXt with Shake-Shake
regularisation (Gastaldi 2017), and a DenseNet against a multi-scale dense network (MSDNet,
Huang et al. 2018). This module builds small CIFAR-style versions of the four, written for
robustlab (no code taken from the papers' releases), sized so a run converges on a CPU in
minutes, plus the plain ``small-cnn``:

- ``resnext``: ResNeXt-20 (23 k parameters at width 4, 76 k at 8, 0.27 M at 16, for 95
  classes). A 3x3 stem, then 3 stages of 2 bottleneck blocks (32, 16, 8 px).
  Each block's residual function is the sum of two *branches*, each a ResNeXt bottleneck
  (1x1 -> grouped 3x3 -> 1x1, BN after each conv), combined as ``0.5 * (b1 + b2)``: a
  ResNeXt block whose aggregated transformations are split in two halves (Gastaldi's
  "2 x 4d" layout; the factor 0.5 only rescales the sum, which the branches' last BN
  absorbs). This is Shake-Shake's "Even-Even" network, so the pair below differs *only* in
  the coefficients.
- ``shake-resnext``: the same network and parameters, the branches combined by
  :class:`ShakeShake`: ``alpha * b1 + (1 - alpha) * b2`` forward and ``beta`` / ``1 - beta``
  backward, alpha and beta independent uniforms drawn per sample and per block in training
  ("Shake-Shake-Image"), 0.5 at evaluation. The draws come from a ``torch.Generator`` seeded
  from the run's seed, so a rerun with the same seed gives the same weights.
- ``densenet``: DenseNet-BC-28 (3 dense blocks of 4 bottleneck layers, growth rate
  ``3 * width / 4`` (12 at width 16), compression 0.5; 31 k parameters at width 8, 0.11 M
  at 16), the paper's DenseNet baseline at a CPU size.
- ``msdnet``: our own small MSDNet-style network, see :class:`MSDNetLite`.

Each builder reads its hyper-parameters from :func:`network_params` (a plain dict derived
from ``--width``), which the holdout run stores in its identity and config.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from robustlab.errors import InputError

# Architectures built here; ``timm:NAME`` is handled by robustlab.workflows.train.holdout.
OWN_ARCHS = ("small-cnn", "resnext", "shake-resnext", "densenet", "msdnet")
# Architectures whose hyper-parameters enter the run identity as ``network`` (small-cnn's
# are ``width`` alone, as they were before this module, so its run ids are unchanged).
PARAM_ARCHS = ("resnext", "shake-resnext", "densenet", "msdnet")


def network_params(arch: str, width: int) -> dict[str, Any]:
    """The hyper-parameters of ``arch`` at base width ``width`` (16 is the default size).

    Recorded with the run, so a stored run says exactly what was trained.
    """
    w = int(width)
    if arch in ("resnext", "shake-resnext"):
        if w % 4:
            raise InputError(f"--width of {arch} must be a multiple of 4 (its 4 groups), not {w}")
        return {
            "depth": 20,
            "stem": 2 * w,
            "stage_channels": [4 * w, 8 * w, 16 * w],
            "branch_channels": [w, 2 * w, 4 * w],
            "groups": 4,
            "blocks_per_stage": 2,
            "branches": 2,
            "shake": "image" if arch == "shake-resnext" else "even",
        }
    if arch == "densenet":
        growth = max(2, 3 * w // 4)
        return {
            "depth": 28,
            "growth": growth,
            "stem": 2 * growth,
            "layers_per_block": [4, 4, 4],
            "bottleneck": 4,
            "compression": 0.5,
        }
    if arch == "msdnet":
        if w < 4:
            raise InputError(f"--width of msdnet must be 4 or more, not {w}")
        return {
            "scales": 3,
            "stem_channels": [w, 2 * w, 4 * w],
            "growth": [max(1, w // 4), max(1, w // 2), w],
            "layers": 6,
            "bottleneck": [1, 2, 4],
            "classifier_channels": 8 * w,
        }
    raise InputError(f"no parameters for architecture {arch!r}")


def build(arch: str, n_classes: int, width: int = 16, seed: int = 0):
    """The untrained network ``arch`` (one of :data:`OWN_ARCHS`) for ``n_classes``.

    ``seed`` seeds Shake-Shake's coefficient generator; the weights' initialisation follows
    torch's global RNG, which the caller seeds.
    """
    if arch == "small-cnn":
        return small_cnn(n_classes, width)
    if arch not in OWN_ARCHS:
        raise InputError(f"unknown architecture {arch!r}; choose from {', '.join(OWN_ARCHS)}")
    p = network_params(arch, width)
    if arch in ("resnext", "shake-resnext"):
        return ResNeXt(n_classes, p, seed=seed)
    if arch == "densenet":
        return DenseNetBC(n_classes, p)
    return MSDNetLite(n_classes, p)


def n_parameters(net) -> int:
    return sum(int(t.numel()) for t in net.parameters())


# ---------------------------------------------------------------------------- small CNN
def small_cnn(n_classes: int, width: int = 16):
    """5 conv-BN-ReLU layers (w, w, 2w, 4w, 8w), 3 max-pools, global average pool."""
    w = width

    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

    return nn.Sequential(
        *block(3, w),
        *block(w, w),
        nn.MaxPool2d(2),
        *block(w, 2 * w),
        nn.MaxPool2d(2),
        *block(2 * w, 4 * w),
        nn.MaxPool2d(2),
        *block(4 * w, 8 * w),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8 * w, n_classes),
    )


# ---------------------------------------------------------------------------- Shake-Shake
class _Shake(torch.autograd.Function):
    """``alpha * x1 + (1 - alpha) * x2`` forward; gradients ``beta * g`` and
    ``(1 - beta) * g`` backward (Gastaldi 2017, eq. 2 with its backward rule)."""

    @staticmethod
    def forward(ctx, x1, x2, alpha, beta):
        ctx.save_for_backward(beta)
        return alpha * x1 + (1 - alpha) * x2

    @staticmethod
    def backward(ctx, grad):
        (beta,) = ctx.saved_tensors
        return beta * grad, (1 - beta) * grad, None, None


def shake(x1, x2, alpha, beta):
    """Combine two branches with forward coefficient ``alpha`` and backward ``beta``.

    ``alpha``/``beta`` broadcast against the branches (N x 1 x 1 x 1 for per-sample draws).
    """
    return _Shake.apply(x1, x2, alpha, beta)


class ShakeShake(nn.Module):
    """Shake-Shake-Image combination of two branch outputs.

    Training: per sample, alpha ~ U(0, 1) scales the forward pass and an independent
    beta ~ U(0, 1) the backward pass. Evaluation (or ``mode="even"``): both are 0.5, so the
    output is exactly ``0.5 * (b1 + b2)``. The draws come from ``generator`` (shared by all
    blocks of a network, seeded by the run), never from torch's global RNG, so a seeded
    training run is reproducible whatever else draws random numbers.
    """

    def __init__(self, generator, mode: str = "image"):
        super().__init__()
        if mode not in ("image", "even"):
            raise ValueError(f"shake mode must be image or even, not {mode!r}")
        self.generator = generator
        self.mode = mode
        self.last: tuple[Any, Any] | None = None  # (alpha, beta) of the last training call

    def forward(self, b1, b2):
        if not self.training or self.mode == "even":
            return 0.5 * (b1 + b2)
        shape = (b1.shape[0],) + (1,) * (b1.dim() - 1)
        alpha = torch.rand(shape, generator=self.generator).to(b1)
        beta = torch.rand(shape, generator=self.generator).to(b1)
        self.last = (alpha, beta)
        return shake(b1, b2, alpha, beta)


class _Bottleneck(nn.Module):
    """One ResNeXt branch: 1x1 (c_in -> mid), grouped 3x3 (stride), 1x1 (mid -> c_out)."""

    def __init__(self, c_in, mid, c_out, groups, stride):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, mid, 1, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, mid, 3, stride=stride, padding=1, groups=groups, bias=False),
            nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out),
        )

    def forward(self, x):
        return self.body(x)


class _ShakeBlock(nn.Module):
    """``relu(shortcut(x) + combine(branch1(x), branch2(x)))``."""

    def __init__(self, c_in, mid, c_out, groups, stride, generator, mode):
        super().__init__()
        self.branch1 = _Bottleneck(c_in, mid, c_out, groups, stride)
        self.branch2 = _Bottleneck(c_in, mid, c_out, groups, stride)
        self.combine = ShakeShake(generator, mode)
        self.shortcut = (
            nn.Identity()
            if stride == 1 and c_in == c_out
            else nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out)
            )
        )

    def forward(self, x):
        return torch.relu(self.shortcut(x) + self.combine(self.branch1(x), self.branch2(x)))


class ResNeXt(nn.Module):
    """CIFAR-style two-branch ResNeXt (see the module docstring); ``params["shake"]`` picks
    Shake-Shake-Image (``image``) or fixed 0.5 (``even``)."""

    def __init__(self, n_classes: int, params: dict[str, Any], seed: int = 0):
        super().__init__()
        self.params = dict(params)
        # Shake-Shake's coefficients: one generator for the whole network, seeded by the run.
        self.generator = torch.Generator().manual_seed(int(seed))
        stem = int(params["stem"])
        self.stem = nn.Sequential(
            nn.Conv2d(3, stem, 3, padding=1, bias=False),
            nn.BatchNorm2d(stem),
            nn.ReLU(inplace=True),
        )
        blocks, c = [], stem
        for s, (out, mid) in enumerate(zip(params["stage_channels"], params["branch_channels"])):
            for b in range(int(params["blocks_per_stage"])):
                stride = 2 if s > 0 and b == 0 else 1
                blocks.append(
                    _ShakeBlock(
                        c, mid, out, params["groups"], stride, self.generator, params["shake"]
                    )
                )
                c = out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, n_classes))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


# ---------------------------------------------------------------------------- DenseNet-BC
def _bn_relu_conv(c_in, c_out, k, stride=1):
    return nn.Sequential(
        nn.BatchNorm2d(c_in),
        nn.ReLU(inplace=True),
        nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False),
    )


class _DenseLayer(nn.Module):
    """BN-ReLU-1x1 (bottleneck * growth) then BN-ReLU-3x3 (growth); output concatenated."""

    def __init__(self, c_in, growth, bottleneck):
        super().__init__()
        self.body = nn.Sequential(
            _bn_relu_conv(c_in, bottleneck * growth, 1),
            _bn_relu_conv(bottleneck * growth, growth, 3),
        )

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


class DenseNetBC(nn.Module):
    """DenseNet-BC (Huang et al. 2017) for 32 px inputs: 3x3 stem, 3 dense blocks, 1x1
    transitions with compression and 2x2 average pooling between them."""

    def __init__(self, n_classes: int, params: dict[str, Any]):
        super().__init__()
        self.params = dict(params)
        g, c = int(params["growth"]), int(params["stem"])
        layers: list[Any] = [nn.Conv2d(3, c, 3, padding=1, bias=False)]
        for k, n in enumerate(params["layers_per_block"]):
            for _ in range(n):
                layers.append(_DenseLayer(c, g, int(params["bottleneck"])))
                c += g
            if k < len(params["layers_per_block"]) - 1:
                out = int(c * params["compression"])
                layers += [_bn_relu_conv(c, out, 1), nn.AvgPool2d(2)]
                c = out
        layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, n_classes)

    def forward(self, x):
        return self.head(self.features(x))


# ---------------------------------------------------------------------------- MSDNet-style
class _MSDLayer(nn.Module):
    """One layer of :class:`MSDNetLite`: at every scale, new features from the same scale
    (bottleneck 1x1 -> 3x3) and, below the finest, from the next finer scale (bottleneck
    1x1 -> 3x3 stride 2), concatenated onto that scale's features (dense connectivity)."""

    def __init__(self, channels, growth, bottleneck):
        super().__init__()
        self.same = nn.ModuleList()
        self.down = nn.ModuleList()
        for s, (c, g) in enumerate(zip(channels, growth)):
            # Half of the scale's new channels from its own features, half from the finer
            # scale (all of them at the finest scale), as MSDNet splits its growth.
            g_same = g if s == 0 else g // 2
            mid = min(c, bottleneck[s] * g)
            self.same.append(nn.Sequential(_bn_relu_conv(c, mid, 1), _bn_relu_conv(mid, g_same, 3)))
            if s > 0:
                cf = channels[s - 1]
                mid_f = min(cf, bottleneck[s - 1] * g)
                self.down.append(
                    nn.Sequential(
                        _bn_relu_conv(cf, mid_f, 1), _bn_relu_conv(mid_f, g - g_same, 3, 2)
                    )
                )

    def forward(self, xs):
        out = [torch.cat([xs[0], self.same[0](xs[0])], 1)]
        for s in range(1, len(xs)):
            out.append(torch.cat([xs[s], self.same[s](xs[s]), self.down[s - 1](xs[s - 1])], 1))
        return out


class MSDNetLite(nn.Module):
    """A small MSDNet-style network (written for robustlab after Huang et al., ICLR 2018).

    What it is: a stem makes features at 3 scales (32, 16, 8 px for a 32 px input; each
    coarser one by a 3x3 stride-2 conv from the finer one); then ``layers`` multi-scale dense
    layers (:class:`_MSDLayer`): each scale grows by ``growth[s]`` channels per layer, from
    its own features and from the finer scale's (strided), and keeps every earlier layer's
    features (dense connectivity). One classifier on the coarsest scale after the last layer
    (BN-ReLU-3x3 conv of ``classifier_channels``, stride 2, then global pooling and a linear
    layer).

    How it differs from MSDNet: one classifier at the end instead of one after every block
    (no anytime prediction, no early exits, no weighted multi-exit loss); no transition
    layers that compress channels and no dropping of the finest scales in later layers; the
    classifier has one conv instead of two; and it is far smaller (24 k parameters at width
    4, 0.33 M at width 16, for 95 classes, against MSDNet's millions on CIFAR).
    """

    def __init__(self, n_classes: int, params: dict[str, Any]):
        super().__init__()
        self.params = dict(params)
        chans = [int(c) for c in params["stem_channels"]]
        growth = [int(g) for g in params["growth"]]
        stems: list[Any] = [
            nn.Sequential(
                nn.Conv2d(3, chans[0], 3, padding=1, bias=False),
                nn.BatchNorm2d(chans[0]),
                nn.ReLU(inplace=True),
            )
        ]
        for s in range(1, int(params["scales"])):
            stems.append(
                nn.Sequential(
                    nn.Conv2d(chans[s - 1], chans[s], 3, stride=2, padding=1, bias=False),
                    nn.BatchNorm2d(chans[s]),
                    nn.ReLU(inplace=True),
                )
            )
        self.stems = nn.ModuleList(stems)
        layers = []
        for _ in range(int(params["layers"])):
            layers.append(_MSDLayer(chans, growth, params["bottleneck"]))
            chans = [c + g for c, g in zip(chans, growth)]
        self.layers = nn.ModuleList(layers)
        cc = int(params["classifier_channels"])
        self.classifier = nn.Sequential(
            _bn_relu_conv(chans[-1], cc, 3, 2),
            nn.BatchNorm2d(cc),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(cc, n_classes),
        )

    def forward(self, x):
        xs = []
        for stem in self.stems:
            x = stem(x)
            xs.append(x)
        for layer in self.layers:
            xs = layer(xs)
        return self.classifier(xs[-1])


__all__ = [
    "OWN_ARCHS",
    "PARAM_ARCHS",
    "DenseNetBC",
    "MSDNetLite",
    "ResNeXt",
    "ShakeShake",
    "build",
    "n_parameters",
    "network_params",
    "shake",
    "small_cnn",
]
