"""``import robustlab`` offers the command line's verbs as the functions the commands call,
and stays light until one is used."""

from __future__ import annotations

import subprocess
import sys

import robustlab


def test_each_verb_is_the_function_its_command_calls():
    from robustlab.models import list_models, load_model
    from robustlab.shifts.corruptions import corrupt
    from robustlab.shifts.registry import list_shifts
    from robustlab.suites import list_suites
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.generate import generate
    from robustlab.workflows.report import build_report

    expected = {
        "corrupt": corrupt,
        "evaluate": evaluate,
        "generate": generate,
        "report": build_report,
        "list_shifts": list_shifts,
        "list_suites": list_suites,
        "list_models": list_models,
        "load_model": load_model,
    }
    for name, fn in expected.items():
        assert getattr(robustlab, name) is fn, name
        assert name in robustlab.__all__ and name in dir(robustlab)
    assert {s.name for s in robustlab.list_suites()} >= {"imagenet-c", "ximagenet12"}
    assert "fog" in {s.name for s in robustlab.list_shifts()}


def test_importing_the_package_imports_no_heavy_module():
    code = (
        "import sys, robustlab\n"
        "heavy = ('torch', 'numba', 'cv2', 'pandas', 'duckdb', 'numpy')\n"
        "assert not [m for m in heavy if m in sys.modules], sys.modules.keys()\n"
        "try:\n"
        "    robustlab.no_such_verb\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_verb' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
