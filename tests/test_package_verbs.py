"""``import robustlab`` offers the command line's verbs as the functions the commands call,
and stays light until one is used."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pandas as pd
import pytest

import robustlab
from robustlab.cli import main as cli


def test_each_verb_is_the_function_its_command_calls():
    from robustlab.models import list_models, load_model
    from robustlab.shifts.corruptions import corrupt
    from robustlab.shifts.registry import list_shifts
    from robustlab.suites import list_suites
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.generate import generate
    from robustlab.workflows.imagenet_d.vlm.workflow import vlm
    from robustlab.workflows.report import build_report
    from robustlab.workflows.results import results
    from robustlab.workflows.train.holdout.workflow import holdout

    expected = {
        "corrupt": corrupt,
        "evaluate": evaluate,
        "generate": generate,
        "report": build_report,
        "results": results,
        "holdout": holdout,
        "vlm": vlm,
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
        "verbs = ('evaluate', 'generate', 'results', 'report', 'holdout', 'vlm', 'corrupt',\n"
        "         'list_shifts', 'list_suites', 'list_models', 'load_model')\n"
        "assert set(verbs) <= set(robustlab.__all__) and set(verbs) <= set(dir(robustlab))\n"
        "assert not [m for m in sys.modules if m.startswith('robustlab.workflows')]\n"
        "try:\n"
        "    robustlab.no_such_verb\n"
        "except AttributeError as exc:\n"
        "    assert 'no_such_verb' in str(exc)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _photos(src: Path, dst: Path, n: int) -> Path:
    """A flat folder of ``n`` real photos (hard links) and their labels.csv rows."""
    dst.mkdir(parents=True)
    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for r in rows:
        os.link(src / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


def _printed(args: list[str]) -> tuple[str, str]:
    """The command's stdout and stderr (exit 0)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli(args) == 0
    return out.getvalue(), err.getvalue()


def test_evaluate_and_results_give_what_their_commands_give(samples_dir, tmp_path):
    """The Python verb and the command over one real case: lite0 on three photos and one
    corruption stores the same run (id and rows) either way, and ``robustlab.results``
    returns the rows ``robustlab results --format csv`` prints, notes included."""
    data = _photos(samples_dir, tmp_path / "photos", 3)
    cells = {"suite": "imagenet-c", "shifts": ["contrast"], "levels": [2]}
    by_api = tmp_path / "api.duckdb"
    run = robustlab.evaluate("lite0", data, db=by_api, workers=0, progress=False, **cells)
    from robustlab.workflows.evaluate import EvaluateResult

    assert isinstance(run, EvaluateResult)
    assert list(zip(run.table["shift"], run.table["level"])) == [("clean", "0"), ("contrast", "2")]
    by_cli = tmp_path / "cli.duckdb"
    flags = ["--suite", "imagenet-c", "--shift", "contrast", "--level", "2", "--workers", "0"]
    _printed(
        ["evaluate", "lite0", "--data", str(data), "--db", str(by_cli), "--no-progress", *flags]
    )
    from robustlab.store import Store

    (cli_id,) = Store(by_cli).runs()["run_id"]
    assert cli_id == run.run_id and not run.resumed and run.n_written == 3 * 2
    cols = ["sample_id", "shift", "level", "label", "top5_ids", "correct"]
    pd.testing.assert_frame_equal(
        Store(by_api).predictions([run.run_id], columns=cols),
        Store(by_cli).predictions([cli_id], columns=cols),
    )

    res = robustlab.results(by_api)
    out, err = _printed(["results", "--db", str(by_api), "--format", "csv"])
    assert res.view == "cells" and len(res.notes) == 1 and "no CE/mCE rows" in res.notes[0]
    assert err.splitlines() == [f"note: {n}" for n in res.notes]
    printed = pd.read_csv(io.StringIO(out))
    assert list(printed.columns) == list(res.table.columns)
    assert printed["top1"].tolist() == res.table["top1"].astype(float).tolist()
    assert printed[["shift", "level"]].astype(str).values.tolist() == [
        ["clean", "0"],
        ["contrast", "2"],
    ]
    summary = robustlab.results(by_api, summary=True, models="lite0")
    assert summary.view == "summary" and summary.table["run_id"].tolist() == [run.run_id[:8]]
    with pytest.raises(TypeError, match="did you mean summary"):
        robustlab.results(by_api, sumary=True)
