"""The table of batched shifts: name -> ``fn(x, params, gens, **context) -> uint8 batch``.

Kept apart from the shift registry on purpose: a batched version is an alternative way to
draw the *same* registered shift (same name, same per-level parameters, read from
:func:`robustlab.shifts.registry.get_shift`), not a shift of its own.

A random batched shift is registered in three parts (:class:`RandomParts`): its draws from
torch generators, a deterministic apply that takes those draws, and a replay that makes
the exact path's own draws for one image. Fidelity then splits into two checks that need
no model: the apply fed the exact path's draws must give the exact path's pixels
(``apply_matched``), and the torch draws must follow the same distribution as the replayed
ones. Whatever difference is left between the paths' errors is the randomness itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

BATCHED: dict[str, Callable] = {}
# What a batched version needs besides the pixels: "masks" (N, H, W) bool foreground,
# "boxes" (N, 4) int64 object boxes (x0, y0, x1, y1, exclusive ends).
CONTEXT: dict[str, tuple[str, ...]] = {}


@dataclass(frozen=True)
class RandomParts:
    """A random batched shift split into draws and a deterministic apply.

    Draws are a ``dict[str, torch.Tensor]`` whose values all have the batch dimension
    first, so the draws of single images concatenate into a batch's.

    Attributes:
        draw: ``draw(x, params, gens) -> draws``, one torch generator per image.
        apply: ``apply(x, params, draws) -> (N, 3, H, W) uint8``, no randomness left.
        replay: ``replay(img, params, rng) -> draws`` for one (H, W, 3) uint8 numpy image
            and the generator the exact path would get (batch dimension 1): the exact
            path's draws, made by the exact module's own draw code in its own order, in
            this layout.
        matched_mad: The mean absolute pixel difference (levels of 0..255) allowed
            between ``apply`` on replayed draws and the exact path; 0 means identical.
            Non-zero only where the arithmetic differs (float32 against float64, a
            bilinear warp), and the module docstring says where.
    """

    draw: Callable
    apply: Callable
    replay: Callable
    matched_mad: float = 0.0


PARTS: dict[str, RandomParts] = {}


def batched(name: str, context: tuple[str, ...] = ()):
    """Register ``fn(x, params, gens, **context)`` as the batched version of ``name``.

    ``x`` is an (N, 3, H, W) uint8 tensor, ``params`` the level's entry of the shift's
    parameter table, ``gens`` one ``torch.Generator`` per image on ``x``'s device;
    ``context`` names the per-image inputs it takes as keyword arguments.
    """

    def deco(fn: Callable) -> Callable:
        BATCHED[name] = fn
        CONTEXT[name] = tuple(context)
        return fn

    return deco


def random_batched(name: str, *, draw: Callable, replay: Callable, matched_mad: float = 0.0):
    """Register ``apply(x, params, draws)`` with its ``draw`` and ``replay`` as ``name``.

    The batched version is ``apply(x, params, draw(x, params, gens))``; see
    :class:`RandomParts` for the three signatures.
    """

    def deco(apply: Callable) -> Callable:
        PARTS[name] = RandomParts(draw, apply, replay, float(matched_mad))

        def fn(x, params, gens):
            return apply(x, params, draw(x, params, gens))

        fn.__doc__ = apply.__doc__
        BATCHED[name] = fn
        CONTEXT[name] = ()
        return apply

    return deco
