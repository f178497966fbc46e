"""Keyword arguments routed to the frozen request specs that own them.

A workflow that writes a folder (generate, synth, mine) takes a few frozen dataclasses
(what it reads, what it makes, how it runs), each validated once in its ``__post_init__``.
Its Python signature stays the flat one users know (``generate(suite, data, out,
seed=3, workers=0)``): each keyword goes to the spec with a field of that name, so an
option is added to its spec, the parser and the code that reads it, and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from robustlab.errors import closest


def route_options(
    where: str, options: Mapping[str, Any], specs: Mapping[str, tuple[type, Any]]
) -> dict[str, Any]:
    """One instance per spec: the one passed, else one built from the keywords it owns.

    Args:
        where: The function's name, for the messages.
        options: The keywords the caller passed beyond the specs.
        specs: Parameter name -> (spec class, the instance passed for it or None).

    Returns:
        Parameter name -> spec instance.

    Raises:
        TypeError: a keyword no spec owns (with the closest field names), or a keyword
            given beside an instance of the spec that owns it (which one wins is unclear).
    """
    owner = {f.name: name for name, (cls, _) in specs.items() for f in dataclasses.fields(cls)}
    routed: dict[str, dict[str, Any]] = {name: {} for name in specs}
    for key, value in options.items():
        if key not in owner:
            near = closest(key, owner)
            tip = f"; did you mean {' or '.join(near)}?" if near else ""
            raise TypeError(f"{where}() got an unexpected keyword argument {key!r}{tip}")
        routed[owner[key]][key] = value
    out: dict[str, Any] = {}
    for name, (cls, given) in specs.items():
        if given is None:
            out[name] = cls(**routed[name])
        elif routed[name]:
            raise TypeError(
                f"{where}() got {', '.join(routed[name])} both as keywords and in {name}=; "
                "pass them one way"
            )
        else:
            out[name] = given
    return out
