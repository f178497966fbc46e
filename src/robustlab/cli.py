"""The ``robustlab`` command: one entry point, one module per subcommand.

Each module in :mod:`robustlab.commands` defines ``add_parser(subparsers)`` and
``run(args) -> int``, and keeps heavy imports (torch, duckdb) inside ``run`` so that
``robustlab --help`` stays instant.

The error contract (see docs/INTERFACES.md): a :class:`robustlab.errors.RobustlabError`
is the user's to fix and prints as one line plus an optional hint, exiting with the
error's ``exit_code`` (2 bad input or missing resource, 3 store or environment);
anything else is a bug and prints with its traceback, exiting with
:data:`EXIT_INTERNAL`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import traceback

from robustlab.errors import EnvironmentProblem, InputError, RobustlabError, environment_problem

# Subcommand modules under robustlab.commands, in the order --help lists them.
COMMANDS = [
    "demo",
    "list_cmd",
    "data",
    "generate",
    "masks",
    "evaluate",
    "results",
    "report",
    "train",
    "holdout",
    "segment",
    "saliency",
    "synth",
    "mine",
    "export",
    "review",
    "vlm",
    "card",
]

# Long-running commands that resume: SIGTERM (a scheduler's or `kill`'s stop) ends them the
# way Ctrl-C does, so the run is recorded as interrupted instead of staying "running".
RESUMABLE = {
    "card",
    "evaluate",
    "generate",
    "train",
    "segment",
    "saliency",
    "synth",
    "mine",
    "vlm",
    "export",
}


# Exit status of an unexpected exception (a bug): EX_SOFTWARE of sysexits.h, distinct from
# 1 (nothing could be produced), 2 (bad input), 3 (store or environment) and 130/143.
EXIT_INTERNAL = 70

# Kept for code written against the first CLI: a user mistake is an InputError.
UserError = InputError


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless the help already says it.

    Unlike argparse's ArgumentDefaultsHelpFormatter, says nothing for ``None`` (no
    default), flags (``store_true``: the default is "off") and positionals.
    """

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or not action.option_strings
            or default is None
            or isinstance(default, bool)
            or default is argparse.SUPPRESS
            or default == []
            or action.help is argparse.SUPPRESS
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose help shows defaults and whose errors name the closest choice or
    flag (subcommand parsers inherit it)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        super().error(_with_suggestion(self, message))


def _with_suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """argparse's error ``message`` with a "did you mean" for a misspelt choice (``robustlab
    evalute``, ``list shfts``) or an unknown flag (``--shfit``): the closest names by the
    one rule every robustlab message uses (:func:`robustlab.errors.closest`)."""
    import re

    from robustlab.errors import closest

    choice = re.search(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)$", message)
    if choice:
        choices = [c.strip().strip("'\"") for c in choice.group(2).split(",")]
        near = closest(choice.group(1), choices)
        return f"{message}; did you mean {' or '.join(near)}?" if near else message
    if message.startswith("unrecognized arguments: "):
        flags = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        words = message.split(": ", 1)[1].split()
        near = {w: closest(w.split("=", 1)[0], flags, n=1) for w in words if w.startswith("--")}
        tips = list(dict.fromkeys(m[0] for m in near.values() if m))
        return f"{message}; did you mean {' or '.join(tips)}?" if tips else message
    return message


def build_parser() -> argparse.ArgumentParser:
    from robustlab.version import __version__

    parser = Parser(
        prog="robustlab",
        description="Build robustness test sets for image classifiers and measure models on them.",
    )
    parser.add_argument("--version", action="version", version=f"robustlab {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="log debug messages (and show the traceback of an error)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"robustlab.commands.{name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            # argparse reports a subcommand's unknown flag with the top-level usage
            # ("usage: robustlab [-h] ... COMMAND"), which shows none of the flags that
            # command takes; report it with the subcommand's usage instead.
            _subparser(parser, args.command).error(f"unrecognized arguments: {' '.join(extra)}")
    except RobustlabError as exc:  # an argument action's own check (a blank list)
        _print_error(getattr(exc, "prog", "robustlab"), exc)
        return exc.exit_code
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    terminated: list[int] = []
    restore = _catch_sigterm(terminated) if args.command in RESUMABLE else None
    try:
        try:
            from robustlab.commands._outputs import check_args

            check_args(args.command, args)  # no output may overwrite or mix with an input
            return int(args.func(args) or 0)
        except OSError as exc:
            # A full disk, a read-only folder or a path through a file met somewhere
            # without its own message is still not a bug.
            problem = environment_problem(exc, "")
            if problem is exc:
                raise
            raise problem from exc
        except MemoryError as exc:
            raise EnvironmentProblem(
                "out of memory", hint="use a smaller --batch-size or fewer --workers"
            ) from exc
        except RuntimeError as exc:
            from robustlab.envcheck import is_torchvision_op_error, torchvision_problem

            if is_torchvision_op_error(exc):  # torchvision imported outside load_model
                raise torchvision_problem(exc) from exc
            if type(exc).__name__ != "OutOfMemoryError":  # torch's, for a full GPU
                raise
            raise EnvironmentProblem(
                f"out of GPU memory: {_one_line(exc)[:200]}", hint="use a smaller --batch-size"
            ) from exc
    except RobustlabError as exc:
        # The user's to fix: one line (and a hint), no traceback.
        _print_error(f"robustlab {args.command}", exc)
        if args.verbose:
            traceback.print_exc()
        return exc.exit_code
    except KeyboardInterrupt:
        how = "terminated (SIGTERM)" if terminated else "interrupted"
        print(f"robustlab {args.command}: {how}; rerun the same command to resume", file=sys.stderr)
        # The shell's convention, 128 + signal number: 143 for SIGTERM, 130 for Ctrl-C.
        return 128 + signal.SIGTERM if terminated else 130
    except Exception as exc:  # noqa: BLE001 - anything else is a bug: say so, show where
        print(
            f"robustlab {args.command}: internal error (a bug, please report it): "
            f"{type(exc).__name__}: {_one_line(exc)}",
            file=sys.stderr,
        )
        traceback.print_exc()
        return EXIT_INTERNAL
    finally:
        if restore is not None:
            restore()


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The parser of subcommand ``command`` (``parser`` itself when there is none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(command, parser)
    return parser


def _print_error(prog: str, exc: RobustlabError) -> None:
    """``PROG: error: MESSAGE`` on one line, then the hint if there is one."""
    print(f"{prog}: error: {_one_line(exc)}", file=sys.stderr)
    if exc.hint:
        print(f"  hint: {exc.hint}", file=sys.stderr)


def _one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (a multi-line message would read as several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _catch_sigterm(seen: list[int]):
    """Make SIGTERM raise KeyboardInterrupt in the main thread, as Ctrl-C does.

    The command's own cleanup (the run marked ``interrupted``, the manifest written) then
    runs; only the batch in flight is lost. Further SIGTERMs during that cleanup are
    ignored (SIGKILL still ends the process). Returns a function that puts the previous
    handler back, or None when this is not the main thread (handlers cannot be set there).
    """

    def handler(signum, frame):
        if seen:
            return
        seen.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread of the main interpreter
        return None
    # None: a handler set outside Python, which cannot be put back; use the default.
    return lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
