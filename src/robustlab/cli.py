"""The ``robustlab`` command: one entry point, one module per subcommand.

Each module in :mod:`robustlab.commands` defines ``add_parser(subparsers)`` and
``run(args) -> int``, and keeps heavy imports (torch, duckdb) inside ``run`` so that
``robustlab --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Subcommand modules under robustlab.commands, in the order --help lists them.
COMMANDS = ["demo", "list_cmd", "generate", "masks", "evaluate", "results", "report", "train", "segment"]


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    from robustlab import __version__

    parser = argparse.ArgumentParser(
        prog="robustlab",
        description="Build robustness test sets for image classifiers and measure models on them.",
    )
    parser.add_argument("--version", action="version", version=f"robustlab {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"robustlab.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except (UserError, ValueError, FileNotFoundError) as exc:
        # Bad input is the user's to fix: one line, no traceback.
        print(f"robustlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"robustlab {args.command}: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
