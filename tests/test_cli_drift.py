"""One CLI vocabulary (issue 23, item 7): a flag name means one thing in every command.

The test walks every subparser of the real parser and compares each flag that several
commands take: its dest, default, choices, type, action and help must agree, unless the flag
is in :data:`ALLOWED` with the reason its meaning is the command's own. Old spellings kept
for users (hidden, warning) are listed in :data:`DEPRECATED`.
"""

from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
from collections import defaultdict

import pytest

from robustlab.cli import build_parser
from robustlab.commands import _args

# Flags whose meaning is the command's own: what --data holds or where --out goes depends on
# what the command reads and writes. Keep this short; a new entry needs a reason.
ALLOWED = {
    "--data": "what the command reads: images, a generated folder, ImageNet-D's root",
    "--out": "what the command writes: a folder, an HTML page, checkpoints",
    "--suite": "the suite to run, or (results) the stored suites to show",
    "--model": "the model to run (vlm) or the stored models to show (results)",
    "--weights": "one weights file, or (mine) one per surrogate",
    "--label-space": "each command's default label space is its benchmark's",
    "--batch-size": "a batch of the command's work: images per forward pass or per "
    "training step, prompts per diffusion call",
    "--limit": "the first N of what the command reads (images, grid cells, questions)",
    "--steps": "optimiser steps (train) or denoising steps (synth)",
    "--size": "the side of generated images: icons or diffusion outputs",
    "--lr": "each trainer's own learning-rate default",
    "--test-fraction": "each trainer's own split default",
    "--classes": "class filter of the command's own data",
    "--method": "how the command works: masking method or training method",
    "--mode": "how the command works: linear/full training or VLM scoring",
    "--export": "what the command exports: Parquet tables or reviewed files",
    "--format": "the output's format: results' table, export's shards (the issue's spelling)",
    "--force": "which output it may replace",
    "--baseline": "the same CE baseline; the help says where each command falls back",
    "--precision": "the same fp32/bf16/fp16; synth casts the pipeline, others autocast",
    "-k": "at least K voters: surrogates wrong (mine) or annotators agreeing (review)",
    "--k": "alias of -k",
    "--agree": "alias of -k",
}

# (command, flag): an old spelling kept working with a warning; one meaning per visible name.
DEPRECATED = {
    ("results", "--seed"): "--bootstrap-seed (--seed is the global seed elsewhere)",
    ("report", "--seed"): "--bootstrap-seed",
    ("generate", "--format"): "--image-format (--format is results' table format)",
    ("synth", "--dtype"): "--precision",
    ("train", "--protocol"): "--experiment (--protocol is evaluate's view protocol)",
}


def _commands():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}

    def walk(name, p):
        out[name] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sp in a.choices.items():
                    walk(f"{name} {n}", sp)

    for name, p in sub.choices.items():
        walk(name, p)
    return out


def _uses():
    uses = defaultdict(list)
    for name, p in _commands().items():
        for a in p._actions:
            for flag in a.option_strings:
                uses[flag].append((name, a))
    return uses


def _meaning(a: argparse.Action) -> tuple:
    choices = tuple(a.choices) if a.choices is not None else None
    return (a.dest, a.default, choices, a.type, type(a).__name__, a.nargs, a.help)


def test_a_flag_means_the_same_in_every_command():
    drift = []
    for flag, uses in sorted(_uses().items()):
        visible = [(n, a) for n, a in uses if (n, flag) not in DEPRECATED]
        if len(visible) < 2 or flag in ALLOWED:
            continue
        meanings = {_meaning(a) for _, a in visible}
        if len(meanings) > 1:
            drift.append(f"{flag}: " + "; ".join(f"{n}: {_meaning(a)}" for n, a in visible))
    assert not drift, "\n".join(drift)


def test_the_lists_name_real_flags_only():
    """A stale entry would silently allow drift when the flag comes back."""
    uses = _uses()
    for flag in ALLOWED:
        assert len({n for n, _ in uses.get(flag, [])}) >= 2, flag
    for cmd, flag in DEPRECATED:
        actions = [a for n, a in uses[flag] if n == cmd]
        assert actions and isinstance(actions[0], _args.Deprecated), (cmd, flag)
        assert actions[0].help is argparse.SUPPRESS
    deprecated = {
        (n, f) for f, us in uses.items() for n, a in us if isinstance(a, _args.Deprecated)
    }
    assert deprecated == set(DEPRECATED)


@pytest.mark.parametrize(
    "argv, old, dest, value, new",
    [
        (["results", "--seed", "3"], "--seed", "bootstrap_seed", 3, "--bootstrap-seed"),
        (
            ["report", "--out", "r", "--seed", "3"],
            "--seed",
            "bootstrap_seed",
            3,
            "--bootstrap-seed",
        ),
        (
            ["generate", "s", "--data", "d", "--out", "o", "--format", "png"],
            "--format",
            "fmt",
            "png",
            "--image-format",
        ),
        (
            ["synth", "--checkpoint", "c", "--out", "o", "--dtype", "float16"],
            "--dtype",
            "dtype",
            "float16",
            "--precision",
        ),
        (
            ["train", "m", "--data", "d", "--protocol", "ex1"],
            "--protocol",
            "protocol",
            "ex1",
            "--experiment",
        ),
    ],
)
def test_old_spellings_still_work_and_warn(capsys, argv, old, dest, value, new):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"warning: {old} is deprecated here, use {new}" in err[0], err


def test_new_spellings_give_the_same_values_without_a_warning(capsys):
    p = build_parser()
    assert p.parse_args(["results", "--bootstrap-seed", "3"]).bootstrap_seed == 3
    assert (
        p.parse_args(["generate", "s", "--data", "d", "--out", "o", "--image-format", "png"]).fmt
        == "png"
    )
    assert p.parse_args(["train", "m", "--data", "d", "--experiment", "ex2"]).protocol == "ex2"
    assert capsys.readouterr().err == ""


def test_one_default_for_shared_numbers():
    """The constants spelled in commands/_args.py (so --help imports nothing heavy) are the
    library's own."""
    from robustlab.commands.train_methods import METHODS
    from robustlab.metrics.bootstrap import bootstrap_ci
    from robustlab.models.inference import PRECISIONS
    from robustlab.store import DEFAULT_DB
    from robustlab.workflows.train import methods

    assert _args.DEFAULT_DB == DEFAULT_DB
    assert _args.PRECISIONS == PRECISIONS
    assert METHODS == methods.METHODS
    assert inspect.signature(bootstrap_ci).parameters["n_resamples"].default == _args.RESAMPLES
    p = build_parser()
    assert p.parse_args(["results"]).resamples == p.parse_args(["report", "--out", "r"]).resamples


@pytest.mark.parametrize(
    "argv", [["--help"], *([c, "--help"] for c in _commands() if " " not in c)], ids=" ".join
)
def test_help_imports_nothing_heavy(argv):
    """``robustlab --help`` stays instant: no numba, cv2, torch, pandas, duckdb, numpy."""
    code = (
        "import sys\n"
        "from robustlab.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
        "heavy = ('numba', 'cv2', 'torch', 'pandas', 'duckdb', 'numpy', 'PIL')\n"
        "print(','.join(m for m in heavy if m in sys.modules), file=sys.stderr)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
    )
    assert "usage: robustlab" in res.stdout
    assert res.stderr.strip().splitlines()[-1:] in ([], [""]), res.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["masks", "--data", "d", "--out", "o"],
        ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"],
        ["holdout", "--data", "d"],
        ["vlm", "--model", "vlm:x"],
        ["mine", "--data", "d"],
        ["report", "--out", "r.html"],
        ["train", "m", "--data", "d"],
    ],
    ids=lambda c: c[0],
)
def test_no_progress_in_every_command_that_reports_progress(command):
    p = build_parser()
    assert p.parse_args(command).no_progress is False
    assert p.parse_args([*command, "--no-progress"]).no_progress is True
    assert p.parse_args([*command, "--quiet"]).no_progress is True


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "lite0", "--data", "d"],
        ["generate", "s", "--data", "d", "--out", "o"],
        ["train", "m", "--data", "d"],
        ["mine", "--data", "d"],
    ],
    ids=lambda c: c[0],
)
def test_workers_has_one_default(command):
    """None everywhere: CPU cores - 1 (robustlab.execution.lifeline.default_workers)."""
    assert build_parser().parse_args(command).workers is None


def _literal_flags(module) -> set[str]:
    """The option strings a module passes to ``add_argument`` as literals (its own
    definitions, as opposed to those it gets from a helper of another module)."""
    import ast

    tree = ast.parse(inspect.getsource(module))
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
        ):
            out |= {
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and str(a.value).startswith("-")
            }
    return out


def test_a_shared_flag_is_defined_once():
    """The drift test above compares meanings, so a command that defines a flag again with
    the very meaning of another command's (a copy of the same add_argument, or of what a
    helper of ``commands/_args.py`` makes) passes it; this one does not: a meaning that
    two commands share has one definition, outside the commands that use it."""
    import importlib

    own: dict[str, list[tuple[str, tuple]]] = defaultdict(list)  # flag -> defined in place
    shared: dict[str, set[tuple]] = defaultdict(set)  # flag -> meanings made by helpers
    for name, p in _commands().items():
        func = p._defaults.get("func")
        if func is None:
            continue
        literal = _literal_flags(importlib.import_module(func.__module__))
        for a in p._actions:
            for flag in a.option_strings:
                if flag in literal:
                    own[flag].append((f"{name} ({func.__module__})", _meaning(a)))
                else:
                    shared[flag].add(_meaning(a))
    copies = []
    for flag, defs in sorted(own.items()):
        for where, meaning in defs:
            twins = [
                w for w, m in defs if m == meaning and w.split(" (")[1] != where.split(" (")[1]
            ]
            if meaning in shared[flag] or twins:
                copies.append(f"{flag} in {where}" + (f", as in {twins}" if twins else ""))
    assert not copies, "defined again instead of taken from commands/_args.py:\n" + "\n".join(
        copies
    )
