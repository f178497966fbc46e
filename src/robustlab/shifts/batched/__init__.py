"""Batched torch versions of the ImageNet-C corruptions and the mask scenes (``--shift-device``).

The exact path (:mod:`robustlab.shifts.corruptions`) reproduces the reference byte for
byte, one image at a time on one CPU core. These versions apply the same corruption with
the same per-level parameters to a whole (N, 3, H, W) uint8 batch with tensor operations,
on the GPU or on CPU tensors, drawing from one ``torch.Generator`` per image seeded by the
seed rule (``derive_seed(seed, sample_id, shift, level)``). The draws are not numpy's, so
the images of a random corruption differ pixel by pixel from the exact path's. Fidelity
is shown in two parts, both tested on CPU tensors (tests/test_batched_matched.py):

* every random corruption is split into its draws and a deterministic apply
  (:class:`robustlab.shifts.registry.RandomParts`, the entry's ``parts``); fed the exact path's own draws
  (:func:`apply_matched`), the apply gives the exact path's pixels, bit for bit;
* its torch draws follow the exact path's distribution (Kolmogorov-Smirnov per kind of
  draw).

The deterministic corruptions agree to the pixel except for rare float32/float64
rounding flips. What is left between the two paths' errors on a model is the randomness
of single draws, which benchmarks/torch_shifts.py measures against two draws of the
exact path itself (its record is in benchmarks/README.md).

Every ImageNet-C corruption (15 common, 4 extra) has a batched version except
``spatter`` (OpenCV's Canny edges, distance transform and histogram equalisation have no
simple tensor equivalent): :func:`apply` runs the exact version for such shifts, image by
image on the CPU, with the exact seed rule, so a run still covers every cell.

Each module here registers its versions on the shifts' own registry entries
(:func:`robustlab.shifts.registry.register_batched`: ``Shift.batched``,
``batched_needs``, ``parts``); importing this package loads them all, and
``get_shift(name, batched=True)`` imports it on demand.

Example:
    >>> import torch
    >>> from robustlab.shifts.batched import apply
    >>> x = torch.zeros((2, 3, 64, 64), dtype=torch.uint8)
    >>> apply("gaussian_noise", 3, x, ["a.jpg", "b.jpg"], seed=0).shape
    torch.Size([2, 3, 64, 64])
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import torch

from robustlab.errors import CellSkipped
from robustlab.shifts.batched import blur, digital, noise, scenes, weather  # noqa: F401
from robustlab.shifts.batched._ops import generators
from robustlab.shifts.batched.jpeg import codec_name, jpeg_roundtrip

__all__ = [
    "apply",
    "apply_matched",
    "codec_name",
    "has_batched",
    "jpeg_roundtrip",
]


def has_batched(name: str) -> bool:
    """Whether ``name`` has a batched torch version (else :func:`apply` runs the exact one)."""
    from robustlab.shifts.registry import get_shift

    return get_shift(name, batched=True).batched is not None


def apply(
    name: str,
    level: Hashable,
    x: torch.Tensor,
    sample_ids: Sequence[str],
    *,
    seed: int = 0,
    masks: torch.Tensor | None = None,
    boxes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Apply the shift ``name`` at ``level`` to a uint8 batch, one seed-rule generator per image.

    Args:
        name: A registered shift (its parameter table is the exact path's).
        level: One of its levels.
        x: (N, 3, H, W) uint8 on any device.
        sample_ids: The N sample ids (the seed rule keys each image's generator by its id).
        seed: Global seed of the seed rule.
        masks: (N, H, W) bool foreground masks, for the scenes (usable ones: see
            :func:`.scenes.problem`).
        boxes: (N, 4) int object boxes ``(x0, y0, x1, y1)``, for the box scenes.

    Returns:
        (N, 3, H, W) uint8 on ``x``'s device (an RGBA scene: its colour channels).

    Raises:
        ValueError: unknown level, a bad batch, or a scene without its masks or boxes.
    """
    from robustlab.seeding import derive_seed
    from robustlab.shifts.registry import get_shift

    sh = get_shift(name, batched=True)
    _check(sh, level, x, sample_ids)
    context = _context(sh, x, masks, boxes)
    if sh.batched is None:
        return _exact(sh, level, x, sample_ids, seed, masks, boxes)
    seeds = [derive_seed(seed, sid, name, level) for sid in sample_ids]
    out = sh.batched(x, sh.params[level], generators(seeds, x.device), **context)
    return _checked(name, out, x)


def apply_matched(
    name: str,
    level: Hashable,
    x: torch.Tensor,
    sample_ids: Sequence[str],
    *,
    seed: int = 0,
    masks: torch.Tensor | None = None,
    boxes: torch.Tensor | None = None,
) -> torch.Tensor:
    """The batched ``name`` fed the exact path's own draws instead of torch's.

    Each image gets the generator the exact path would give it (the seed rule, numpy),
    the shift's replay makes the exact path's draws with it, and the batched apply uses
    them: the result is the exact path's image up to the shift's documented arithmetic
    differences (its entry's ``parts.matched_mad``). This is how the batched arithmetic is
    checked apart from its randomness; runs use :func:`apply`. Deterministic shifts and
    those without a batched version have nothing to replay and give :func:`apply`'s result.
    The random scenes' replay is their exact draw function itself (``Shift.draw``); they
    take ``masks`` as in :func:`apply`.

    Raises:
        ValueError: as :func:`apply`.
    """
    from robustlab.seeding import derive_seed, make_rng
    from robustlab.shifts.registry import get_shift

    sh = get_shift(name, batched=True)
    parts = sh.parts
    if parts is None:
        return apply(name, level, x, sample_ids, seed=seed, masks=masks, boxes=boxes)
    _check(sh, level, x, sample_ids)
    context = _context(sh, x, masks, boxes)
    params = sh.params[level]
    host = x.permute(0, 2, 3, 1).cpu().numpy()
    per_image = [
        parts.replay(img, params, make_rng(derive_seed(seed, sid, name, level)))
        for img, sid in zip(host, sample_ids)
    ]
    draws = {k: torch.cat([d[k] for d in per_image]).to(x.device) for k in per_image[0]}
    return _checked(name, parts.apply(x, params, draws, **context), x)


def _check(sh, level, x: torch.Tensor, sample_ids) -> None:
    if level not in sh.params:
        raise ValueError(f"{sh.name}: level {level!r} is not defined; levels are {list(sh.levels)}")
    if x.dtype != torch.uint8 or x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(
            f"batched shifts need an (N, 3, H, W) uint8 tensor, got {x.dtype} {tuple(x.shape)}"
        )
    if len(sample_ids) != x.shape[0]:
        raise ValueError(f"{len(sample_ids)} sample ids for {x.shape[0]} images")


def _context(sh, x: torch.Tensor, masks, boxes) -> dict[str, torch.Tensor]:
    """The per-image inputs the entry's ``batched_needs`` names, checked, on ``x``'s device."""
    n, _, h, w = x.shape
    if masks is not None and (masks.dtype != torch.bool or tuple(masks.shape) != (n, h, w)):
        raise ValueError(
            f"masks must be ({n}, {h}, {w}) bool, got {masks.dtype} {tuple(masks.shape)}"
        )
    if boxes is not None and tuple(boxes.shape) != (n, 4):
        raise ValueError(f"boxes must be ({n}, 4), got {tuple(boxes.shape)}")
    given = {"masks": masks, "boxes": boxes}
    context = {}
    for key in sh.batched_needs:
        if given[key] is None:
            raise CellSkipped(f"{sh.name} needs the batch's {key}")
        context[key] = given[key].to(x.device)
    return context


def _checked(name: str, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if out.shape != x.shape or out.dtype != torch.uint8:  # a bug in the batched version
        raise RuntimeError(
            f"batched {name} returned {out.dtype} {tuple(out.shape)} for {tuple(x.shape)}"
        )
    return out


def _exact(sh, level, x: torch.Tensor, sample_ids, seed: int, masks, boxes) -> torch.Tensor:
    """The exact shift image by image on the CPU (shifts without a batched version; a
    scene gets its mask and box, and one that needs a donor fails as without one)."""
    from robustlab.pipeline import apply_shift

    host = x.permute(0, 2, 3, 1).cpu().numpy()
    ctxs: list[dict | None] = [None] * len(host)
    if masks is not None:
        ctxs = [{"mask": m} for m in masks.cpu().numpy()]
        if boxes is not None:
            for ctx, box in zip(ctxs, boxes.tolist()):
                ctx["bbox"] = box
    out = np.stack(
        [
            apply_shift(img, sid, sh, level, seed, ctx)[..., :3]
            for img, sid, ctx in zip(host, sample_ids, ctxs)
        ]
    )
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous().to(x.device)
