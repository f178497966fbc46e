"""Stability training (Zheng et al. 2016), as the ImageNet-C paper tested it (section 5).

The loss on a batch of clean images ``x`` with labels ``y`` is

    L = CE(f(x), y) + weight * KL(softmax(f(x)) || softmax(f(x')))

where ``x'`` is ``x`` plus uniform noise in ``[-noise, +noise]`` on the [0, 1] pixel scale
(clipped back to [0, 1]) and the KL divergence is averaged over the batch. The ImageNet-C
paper describes the term as "the cross-entropy from the noisy image's softmax distribution
to the softmax of the clean image": the clean softmax is the *target*. So the divergence
sends gradients through the noisy branch only (the clean softmax is detached there); the
clean branch learns from the cross-entropy alone. With a fixed target, cross-entropy and
KL differ by the target's entropy, a constant: both readings give the same gradients.

The paper's grid: noise in {0.01, 0.05, 0.1}, weight in {0.01, 0.05, 0.1}; none of its
nine fine-tuned ResNet-50s beat the baseline's mCE. Cross-entropy is computed on the clean
images only, as in Zheng et al.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from robustlab.errors import InputError

PAPER_NOISES = (0.01, 0.05, 0.1)
PAPER_WEIGHTS = (0.01, 0.05, 0.1)


def _select(logits, columns):
    return logits if columns is None else logits.index_select(1, columns.to(logits.device))


def stability_loss(clean_logits, noisy_logits, labels, weight: float, columns=None):
    """Cross-entropy on the clean logits plus ``weight`` x KL(clean softmax || noisy softmax).

    Args:
        clean_logits, noisy_logits: (B, K) logits of the clean images and their noisy copies.
        labels: (B,) targets in the label space.
        weight: The stability weight (alpha); 0 gives plain cross-entropy.
        columns: Logit columns of the label space (None: all), for subset label spaces.

    Returns:
        A scalar tensor. The divergence treats the clean softmax as a fixed target (no
        gradient reaches the clean logits through it; see the module docstring).
    """
    import torch.nn.functional as F

    clean, noisy = _select(clean_logits, columns), _select(noisy_logits, columns)
    ce = F.cross_entropy(clean, labels)
    target = F.log_softmax(clean.detach(), dim=1)
    kl = F.kl_div(F.log_softmax(noisy, dim=1), target, reduction="batchmean", log_target=True)
    return ce + float(weight) * kl


def noisy_copy(x, noise: float, gen, mean, std):
    """``x`` (normalised model input) with uniform pixel noise in ±``noise`` on [0, 1].

    The noise is drawn on the CPU from ``gen`` (the training's seeded generator) so the same
    config gives the same noise on every device; the noisy pixels are clipped to [0, 1]
    (a real image) before being normalised again.
    """
    import torch

    m = torch.as_tensor(mean, dtype=x.dtype).view(1, 3, 1, 1).to(x.device)
    s = torch.as_tensor(std, dtype=x.dtype).view(1, 3, 1, 1).to(x.device)
    u = (torch.rand(x.shape, generator=gen, dtype=x.dtype) * 2 - 1) * float(noise)
    pixels = (x * s + m + u.to(x.device)).clamp_(0.0, 1.0)
    return (pixels - m) / s


@dataclass(frozen=True)
class StabilityTraining:
    """Stability training's parameters (recorded with the checkpoint and its runs).

    Attributes:
        noise: Half-width of the uniform pixel noise on the [0, 1] scale, in (0, 1].
        weight: Stability weight alpha, >= 0.
    """

    noise: float = 0.05
    weight: float = 0.05
    name: ClassVar[str] = "stability"

    def __post_init__(self) -> None:
        if not (math.isfinite(float(self.noise)) and 0.0 < float(self.noise) <= 1.0):
            raise InputError(
                f"stability noise must be in (0, 1] on the [0, 1] pixel scale, got {self.noise}",
                hint="the paper's grid is 0.01, 0.05, 0.1",
            )
        if not (math.isfinite(float(self.weight)) and float(self.weight) >= 0.0):
            raise InputError(
                f"stability weight must be a number >= 0, got {self.weight}",
                hint="the paper's grid is 0.01, 0.05, 0.1",
            )

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "noise": float(self.noise),
            "weight": float(self.weight),
            "noise_kind": "uniform +-noise on [0,1] pixels, clipped",
            "divergence": "KL(softmax clean || softmax noisy), clean side detached",
        }

    def items(self, items, *, step: int, samples, seed: int):
        """Training items of one step: the clean images themselves."""
        return items

    def loss(self, forward, x, labels, columns, gen, preprocessing):
        """One step's loss: clean and noisy copies in one forward pass."""
        import torch

        noisy = noisy_copy(x, self.noise, gen, preprocessing.mean, preprocessing.std)
        logits = forward(torch.cat([x, noisy]))
        clean_logits, noisy_logits = logits[: len(x)], logits[len(x) :]
        return stability_loss(clean_logits, noisy_logits, labels, self.weight, columns)


def stability_grid(noises, weights) -> list[StabilityTraining]:
    """One :class:`StabilityTraining` per (noise, weight) pair, noise-major order."""
    return [StabilityTraining(float(n), float(w)) for n in noises for w in weights]


__all__ = [
    "PAPER_NOISES",
    "PAPER_WEIGHTS",
    "StabilityTraining",
    "noisy_copy",
    "stability_grid",
    "stability_loss",
]
