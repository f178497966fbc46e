"""Keyword arguments routed to the typed spec that owns them.

A workflow's request is a few frozen specs (data, cells, model, execution); its Python
function keeps its keyword signature (``run_protocol(spec, data, masks=..., seed=...)``)
by sending each keyword to the spec with a field of that name. An unknown keyword is the
``TypeError`` Python gives for a function's own, with the closest names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from robustlab.errors import closest


def route_keywords(
    caller: str, options: Mapping[str, Any], specs: Mapping[str, type]
) -> dict[str, dict[str, Any]]:
    """``options`` split by the spec that owns each keyword (a dataclass field of that name;
    the first spec in ``specs`` that has it).

    Raises:
        TypeError: A keyword no spec owns: ``run_protocol() got an unexpected keyword
            argument 'mask'; did you mean masks?``.
    """
    owner = {}
    for part, spec in specs.items():
        for f in dataclasses.fields(spec):
            owner.setdefault(f.name, part)
    out: dict[str, dict[str, Any]] = {part: {} for part in specs}
    for key, value in options.items():
        if key not in owner:
            raise TypeError(_unexpected(caller, key, owner))
        out[owner[key]][key] = value
    return out


def _unexpected(caller: str, key: str, known: Iterable[str]) -> str:
    near = closest(key, known)
    tip = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{caller}() got an unexpected keyword argument {key!r}{tip}"
