"""The table of batched shifts: name -> ``fn(x, params, gens, **context) -> uint8 batch``.

Kept apart from the shift registry on purpose: a batched version is an alternative way to
draw the *same* registered shift (same name, same per-level parameters, read from
:func:`robustlab.shifts.registry.get_shift`), not a shift of its own.
"""

from __future__ import annotations

from collections.abc import Callable

BATCHED: dict[str, Callable] = {}
# What a batched version needs besides the pixels: "masks" (N, H, W) bool foreground,
# "boxes" (N, 4) int64 object boxes (x0, y0, x1, y1, exclusive ends).
CONTEXT: dict[str, tuple[str, ...]] = {}


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
