"""Keyword arguments routed to the typed spec that owns them: one rule for every workflow.

A workflow's request is a few frozen specs (data, cells, model, execution), each validated
once when it is built; its Python function keeps the flat keyword signature users know
(``evaluate(model, data, suite=..., workers=0)``, ``generate(suite, data, out, seed=3)``)
by sending each keyword to the spec with a field of that name. So adding an option touches
its spec, the parser and the code that reads it, nothing else. A field whose keyword is not
its name says so in its metadata (``keyword``). An unknown keyword is the ``TypeError``
Python gives for a function's own, with the closest names.
"""

from __future__ import annotations

import dataclasses
from os import PathLike
from collections.abc import Iterable, Mapping
from typing import Any

from robustlab.errors import closest


def keyword_of(f: dataclasses.Field) -> str:
    """The keyword a spec field is passed as (its metadata's ``keyword``, else its name)."""
    return f.metadata.get("keyword", f.name)


def owners(specs: Mapping[str, type]) -> dict[str, tuple[str, str]]:
    """``keyword -> (part, field)`` over the init fields of ``specs`` (the first spec that
    has a keyword owns it)."""
    out: dict[str, tuple[str, str]] = {}
    for part, spec in specs.items():
        for f in dataclasses.fields(spec):
            if f.init:
                out.setdefault(keyword_of(f), (part, f.name))
    return out


def route_keywords(
    caller: str, options: Mapping[str, Any], specs: Mapping[str, type]
) -> dict[str, dict[str, Any]]:
    """``options`` split by the spec that owns each keyword, as field-name dicts.

    Raises:
        TypeError: A keyword no spec owns: ``run_protocol() got an unexpected keyword
            argument 'mask'; did you mean masks?``.
    """
    owner = owners(specs)
    out: dict[str, dict[str, Any]] = {part: {} for part in specs}
    for key, value in options.items():
        if key not in owner:
            raise TypeError(unexpected(caller, key, owner))
        part, name = owner[key]
        out[part][name] = value
    return out


def build_specs(
    caller: str,
    options: Mapping[str, Any],
    specs: Mapping[str, type],
    given: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One instance per spec: the one the caller passed in ``given``, else one built from
    the keywords it owns (its defaults for the rest).

    Raises:
        TypeError: a keyword no spec owns (with the closest names), or a keyword given
            beside an instance of the spec that owns it (which one wins would be unclear).
    """
    given = given or {}
    routed = route_keywords(caller, options, specs)
    out: dict[str, Any] = {}
    for part, cls in specs.items():
        if given.get(part) is None:
            out[part] = cls(**routed[part])
        elif routed[part]:
            raise TypeError(
                f"{caller}() got {', '.join(routed[part])} both as keywords and in {part}=; "
                "pass them one way"
            )
        else:
            out[part] = given[part]
    return out


def as_names(value) -> tuple[str, ...] | None:
    """A spec field's list of names as a tuple (one name alone is one name, not its
    letters; None stays None)."""
    if value is None:
        return None
    return (str(value),) if isinstance(value, (str, PathLike)) else tuple(str(v) for v in value)


def unexpected(caller: str, key: str, known: Iterable[str]) -> str:
    """The message of an unknown keyword, naming the closest known ones."""
    near = closest(key, known)
    tip = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{caller}() got an unexpected keyword argument {key!r}{tip}"


def specs_from_args(
    caller: str, args: Any, specs: Mapping[str, type], **computed: Any
) -> dict[str, Any]:
    """The specs of a command's parsed arguments, built by the same rule as the Python
    keywords: each field is read from the argument of its keyword's name when the parser
    has one (a field's metadata ``arg = (dest, read)`` names another; ``progress`` is read
    from ``--no-progress``), and ``computed`` holds what the command derives itself (a
    comma list split, one flag feeding two fields). A new option is then a spec field and
    a flag of the same name, and the command's code does not change.

    Raises:
        TypeError: a ``computed`` keyword no spec owns.
    """
    values: dict[str, Any] = {}
    for spec in specs.values():
        for f in dataclasses.fields(spec):
            key = keyword_of(f)
            if not f.init or key in computed:
                continue
            if "arg" in f.metadata:
                dest, read = f.metadata["arg"]
                if hasattr(args, dest):
                    values[key] = read(getattr(args, dest))
            elif key == "progress" and hasattr(args, "no_progress"):
                values[key] = not args.no_progress
            elif hasattr(args, key):
                values[key] = getattr(args, key)
    return build_specs(caller, {**values, **computed}, specs)
