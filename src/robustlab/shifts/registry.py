"""The one registry of shifts.

Every image change robustlab knows (a corruption, a background scenario, an attribute
edit) is a :class:`Shift`: a pure function plus a table of parameters per level. The CLI,
the suites and the parametrised tests all read this registry, so adding a shift is one
decorated function and its parameter table.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ShiftFn = Callable[..., np.ndarray]


@dataclass(frozen=True)
class Shift:
    """A registered family of image changes with discrete levels.

    Attributes:
        name: Unique registry key, e.g. ``"glass_blur"``.
        family: Group used for reporting, e.g. ``"blur"`` or ``"background"``.
        fn: ``fn(image, params, rng, ctx) -> image``; ``params`` is ``self.params[level]``.
        params: Level -> parameters (a tuple, dataclass or mapping); the keys are the levels.
        needs: Context keys the shift requires, e.g. ``{"mask"}``.
        deterministic: True when the output does not depend on the random generator.
        tags: Free-form groups (``"imagenet-c"``, ``"imagenet-c-extra"``, ...).
        doc: One-line description (first docstring line of ``fn``).
    """

    name: str
    family: str
    fn: ShiftFn
    params: Mapping[Hashable, Any]
    needs: frozenset[str] = frozenset()
    deterministic: bool = False
    tags: frozenset[str] = frozenset()
    doc: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def levels(self) -> tuple:
        return tuple(self.params)

    def apply(self, image: np.ndarray, level: Hashable, rng: Any = None, ctx: Mapping | None = None):
        """Apply the shift at ``level`` with random generator ``rng`` and context ``ctx``."""
        if level not in self.params:
            raise ValueError(
                f"{self.name}: level {level!r} is not defined; levels are {list(self.levels)}"
            )
        ctx = dict(ctx or {})
        missing = [k for k in sorted(self.needs) if ctx.get(k) is None]
        if missing:
            raise ValueError(f"{self.name} needs {', '.join(missing)} in its context")
        return self.fn(image, self.params[level], rng, ctx)


_REGISTRY: dict[str, Shift] = {}


def register_shift(
    name: str,
    *,
    family: str,
    params: Mapping[Hashable, Any],
    needs: Iterable[str] = (),
    deterministic: bool = False,
    tags: Iterable[str] = (),
    **extra: Any,
) -> Callable[[ShiftFn], ShiftFn]:
    """Decorator that registers ``fn`` as the shift ``name``.

    Example:
        >>> @register_shift("invert", family="digital", params={1: 1.0}, deterministic=True)
        ... def invert(x, p, rng, ctx):
        ...     return 255 - x
    """
    if not params:
        raise ValueError(f"shift {name!r} needs at least one level")

    def deco(fn: ShiftFn) -> ShiftFn:
        if name in _REGISTRY and _REGISTRY[name].fn.__qualname__ != fn.__qualname__:
            raise ValueError(f"shift {name!r} is already registered")
        doc = (fn.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = Shift(
            name=name,
            family=family,
            fn=fn,
            params=dict(params),
            needs=frozenset(needs),
            deterministic=deterministic,
            tags=frozenset(tags),
            doc=doc[0] if doc else "",
            extra=dict(extra),
        )
        return fn

    return deco


# Modules whose import registers shifts; loaded lazily so that importing the registry
# alone has no side effects. A new family adds its module here.
FAMILY_MODULES = ("robustlab.shifts.corruptions", "robustlab.shifts.scenes")


def _ensure_loaded() -> None:
    for module in FAMILY_MODULES:
        importlib.import_module(module)


def get_shift(name: str) -> Shift:
    """Return the registered shift ``name`` or raise ValueError listing the known names."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown shift {name!r}; known shifts: {', '.join(_REGISTRY)}"
        ) from None


def list_shifts(pattern: str | None = None, *, tag: str | None = None) -> list[Shift]:
    """Registered shifts in registration order, filtered by name glob, family or tag."""
    _ensure_loaded()
    out = list(_REGISTRY.values())
    if tag is not None:
        out = [s for s in out if tag in s.tags]
    if pattern:
        out = [
            s
            for s in out
            if fnmatch.fnmatchcase(s.name, pattern) or s.family == pattern or pattern in s.tags
        ]
    return out
