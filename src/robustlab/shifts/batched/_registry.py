"""The table of batched corruptions: name -> ``fn(x, params, gens) -> uint8 batch``.

Kept apart from the shift registry on purpose: a batched version is an alternative way to
draw the *same* registered shift (same name, same per-level parameters, read from
:func:`robustlab.shifts.registry.get_shift`), not a shift of its own.
"""

from __future__ import annotations

from collections.abc import Callable

BATCHED: dict[str, Callable] = {}


def batched(name: str):
    """Register ``fn(x, params, gens)`` as the batched version of the shift ``name``.

    ``x`` is an (N, 3, H, W) uint8 tensor, ``params`` the level's entry of the shift's
    parameter table, ``gens`` one ``torch.Generator`` per image on ``x``'s device.
    """

    def deco(fn: Callable) -> Callable:
        BATCHED[name] = fn
        return fn

    return deco
