"""The one cell type: a (shift, level) pair, and the one spelling of a level as text.

A cell is what a suite selects, a plan lists, a task computes and the store keys its rows
by. The level is kept as the shift registry defines it (an int severity, a float, a named
scenario such as ImageNet-E's ``"0.10"``), because the shift needs that value; wherever
the level must be text (the store's ``level`` column, a generated folder's level folder,
a manifest's hash and failure keys, progress counters, lookups of what a folder holds),
it is :attr:`Cell.key` or, for a bare level, :func:`level_key`, and nothing else spells
it. The text is exactly ``str(level)``, as it has been since the first stored run, so
run ids, stored rows and folder names stay what they were: ``"3"``, ``"0"`` for the
clean cell, ``"0.10"`` (not ``"0.1"``) for a named level that is a string.

This module is in the core layer: suites, plans, tasks, the store and the readers of
folders all import it, so it imports nothing of robustlab.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple


def level_key(level: Any) -> str:
    """The text form of a level: the store's ``level`` column, the level folder's name.

    ``3 -> "3"``, ``0.5 -> "0.5"``, ``"0.10" -> "0.10"`` (a named level keeps its own
    spelling). A key given back returns itself, so code that holds either may call it.
    """
    return str(level)


class Cell(NamedTuple):
    """One (shift, level) cell: immutable, hashable, picklable, and a plain 2-tuple to code
    that unpacks (``shift, level = cell``), indexes or compares it with a tuple.

    Attributes:
        shift: The shift's registry name (``"gaussian_noise"``, ``"clean"``).
        level: The level as the shift defines it (an int severity, a float, a name).
    """

    shift: str
    level: Any

    @property
    def key(self) -> str:
        """The level as text (:func:`level_key`): what the store and the folders hold."""
        return level_key(self.level)

    @property
    def stored(self) -> tuple[str, str]:
        """``(shift, key)``: the cell as the store, a manifest or a folder listing spells it."""
        return self.shift, level_key(self.level)

    @property
    def folder(self) -> str:
        """``shift/key``: the cell's folder relative to a generated or published root."""
        return f"{self.shift}/{level_key(self.level)}"


def as_cells(pairs: Iterable[tuple[str, Any]]) -> tuple[Cell, ...]:
    """``pairs`` (cells, or plain ``(shift, level)`` tuples) as a tuple of :class:`Cell`.

    A tuple that holds only cells is returned as it is, not copied: the tasks of a run
    share their cell groups (50,000 photos x 75 cells must not become 3.75 million new
    objects when each task checks its cells)."""
    if type(pairs) is tuple and {*map(type, pairs)} <= {Cell}:
        return pairs
    return tuple(Cell(*pair) for pair in pairs)


def cells_record(pairs: Iterable[tuple[str, Any]]) -> list[list[str]]:
    """``[[shift, key], ...]``: the cells as a run's identity and config list them (JSON)."""
    return [list(Cell(*pair).stored) for pair in pairs]


def level_named(key: str, levels: Iterable[Any]) -> Any | None:
    """The one of ``levels`` (a shift's registry levels) whose :func:`level_key` is ``key``,
    or None: how a stored or folder level goes back to the value the shift computes with."""
    for level in levels:
        if level_key(level) == key:
            return level
    return None
