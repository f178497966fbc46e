"""Training with corruption augmentation, holding out whole corruption families.

Each training image is, with probability ``clean_fraction``, the clean image; otherwise one
corruption of the pool (the registry's ImageNet-C corruptions, tag ``imagenet-c``) at one of
its severities, both drawn uniformly. Families named in ``holdout_families`` (``noise``,
``blur``, ``weather``, ``digital``) are never drawn, so evaluating on them measures
robustness to corruptions the model did not see during training (the ImageNet-C paper's
point: training on the test corruptions is not a robustness method).

Draws follow the seed rule: the draw for position ``pos`` of step ``step`` on sample
``sid`` comes from ``derive_seed(seed, sid, "corruption-aug", f"{step}/{pos}")``, so it
depends on nothing else (not on workers, device or other samples). The corrupted pixels
are those ``robustlab generate`` writes for that (sample, corruption, severity) cell.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from robustlab.errors import InputError
from robustlab.seeding import derive_seed, make_rng
from robustlab.store import CLEAN_SHIFT

POOL_TAG = "imagenet-c"
DRAW_KEY = "corruption-aug"


def pool_families(tag: str = POOL_TAG) -> dict[str, tuple[str, ...]]:
    """family -> shift names of the augmentation pool, in registry order."""
    from robustlab.shifts.registry import list_shifts

    out: dict[str, list[str]] = {}
    for s in list_shifts(tag=tag):
        out.setdefault(s.family, []).append(s.name)
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True)
class CorruptionAugmentation:
    """Corruption augmentation's parameters (recorded with the checkpoint and its runs).

    Attributes:
        holdout_families: Families never drawn (evaluated as unseen corruptions).
        clean_fraction: Share of draws that keep the clean image, in [0, 1).
    """

    holdout_families: tuple[str, ...] = ()
    clean_fraction: float = 0.5
    name: ClassVar[str] = "corruption-aug"

    def __post_init__(self) -> None:
        families = pool_families()
        held = tuple(dict.fromkeys(str(f) for f in self.holdout_families))
        object.__setattr__(self, "holdout_families", held)
        unknown = [f for f in held if f not in families]
        if unknown:
            raise InputError(
                f"unknown corruption family {unknown[0]!r}; the families are {', '.join(families)}"
            )
        if set(held) == set(families):
            raise InputError(
                f"holding out every corruption family ({', '.join(held)}) leaves "
                "nothing to train on",
                hint="hold out one to three families",
            )
        f = float(self.clean_fraction)
        if not (math.isfinite(f) and 0.0 <= f < 1.0):
            raise InputError(f"clean fraction must be in [0, 1), got {self.clean_fraction}")

    @property
    def train_shifts(self) -> tuple[str, ...]:
        """Corruptions that may be drawn (families not held out)."""
        return tuple(
            s
            for fam, names in pool_families().items()
            if fam not in self.holdout_families
            for s in names
        )

    @property
    def held_out_shifts(self) -> tuple[str, ...]:
        """Corruptions of the held-out families (the unseen test corruptions)."""
        fams = pool_families()
        return tuple(s for fam in self.holdout_families for s in fams[fam])

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "holdout_families": list(self.holdout_families),
            "held_out_shifts": list(self.held_out_shifts),
            "train_shifts": list(self.train_shifts),
            "clean_fraction": float(self.clean_fraction),
            "pool": POOL_TAG,
            "draw": f"seed rule ({DRAW_KEY}, step/position), uniform",
        }

    def draw(self, sample_id: str, *, seed: int, step: int, pos: int) -> tuple[str, Any]:
        """The (shift, level) cell one training image is made of."""
        from robustlab.shifts.registry import get_shift

        rng = make_rng(derive_seed(seed, sample_id, DRAW_KEY, f"{step}/{pos}"))
        if rng.random() < float(self.clean_fraction):
            return CLEAN_SHIFT, 0
        shifts = self.train_shifts
        name = shifts[int(rng.integers(len(shifts)))]
        levels = get_shift(name).levels
        return name, levels[int(rng.integers(len(levels)))]

    def items(self, items, *, step: int, samples, seed: int):
        """The step's (sample, shift, level) items, each clean item replaced by a draw."""
        return [
            (i, *self.draw(samples[i].id, seed=seed, step=step, pos=pos))
            for pos, (i, _, _) in enumerate(items)
        ]

    def loss(self, forward, x, labels, columns, gen, preprocessing):
        """Plain cross-entropy on the (augmented) batch."""
        import torch.nn.functional as F

        logits = forward(x)
        if columns is not None:
            logits = logits.index_select(1, columns.to(logits.device))
        return F.cross_entropy(logits, labels)


__all__ = ["POOL_TAG", "CorruptionAugmentation", "pool_families"]
