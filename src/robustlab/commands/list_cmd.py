"""``robustlab list shifts|suites|models``: what the registries hold."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("list", help="list registered shifts, suites or models")
    p.add_argument("what", choices=["shifts", "suites", "models"])
    p.set_defaults(func=run)


def _fmt_levels(levels) -> str:
    from robustlab.cells import level_key

    return ",".join(level_key(level) for level in levels)


def run(args) -> int:
    if args.what == "shifts":
        from robustlab.shifts import list_shifts

        rows = [
            (s.name, s.family, _fmt_levels(s.levels), ",".join(sorted(s.tags)), s.doc)
            for s in list_shifts()
        ]
        header = ("name", "family", "levels", "tags", "description")
    elif args.what == "suites":
        from robustlab.suites import list_suites

        rows = [
            (s.name, s.version, str(len(s.cells())), s.protocol.name, s.description)
            for s in list_suites()
        ]
        header = ("name", "version", "cells", "protocol", "description")
    else:
        from robustlab.models import list_models

        rows = [(m.spec, m.description) for m in list_models()]
        header = ("spec", "description")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header) - 1)]
    for r in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) + "  " + str(r[-1]))
    return 0
