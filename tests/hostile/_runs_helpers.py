"""Fixtures-by-hand for the run-integrity hostile tests (``test_runs_*.py``).

Kept out of ``tests/hostile/conftest.py`` (another branch owns it): each test module puts
this folder on ``sys.path`` and imports this file. Everything here uses the repository's
own real photos (``tests/fixtures/shared-mini``), so the tests run without
``../shared/data``.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

MINI = Path(__file__).resolve().parents[1] / "fixtures" / "shared-mini" / "imagenet-samples"


def photo_rows(n: int) -> list[dict]:
    """The first ``n`` rows of the mini set's labels.csv (file, index, wnid, name)."""
    with open(MINI / "labels.csv", newline="") as fh:
        return list(csv.DictReader(fh))[:n]


def flat_folder(root: Path, n: int = 3) -> Path:
    """A flat folder of ``n`` real photos plus their ``labels.csv``."""
    root.mkdir(parents=True, exist_ok=True)
    rows = photo_rows(n)
    for r in rows:
        shutil.copyfile(MINI / r["file"], root / r["file"])
    write_labels(root / "labels.csv", rows)
    return root


def write_labels(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["file", "index", "wnid", "name"])
        w.writeheader()
        w.writerows(rows)


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """``robustlab ARGS`` in this process: (exit status, stdout, stderr)."""
    from robustlab.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_id_of(stdout: str) -> str:
    """The run id ``robustlab evaluate`` printed (``run ID stored in DB``)."""
    import re

    found = re.findall(r"^run ([0-9a-f]{16}) stored in", stdout, flags=re.M)
    assert found, stdout
    return found[-1]


def subprocess_env() -> dict:
    """This process's environment with the robustlab this process imported first on the
    path (a child runs the same sources as the test)."""
    import robustlab

    src = str(Path(robustlab.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def robustlab_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "robustlab.cli", *[str(a) for a in args]]


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``robustlab ARGS`` in a child process (exit status, stdout, stderr)."""
    return subprocess.run(
        robustlab_cmd(*args), env=subprocess_env(), capture_output=True, text=True, timeout=timeout
    )


def error_lines(stderr: str) -> list[str]:
    """stderr without log records (``INFO name: ...``/``WARNING ...``): what a user reads
    as the error."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not line.startswith(("INFO ", "WARNING ", "DEBUG "))
    ]


def assert_user_error(code: int, stderr: str, *, codes=(2, 3), contains: str = "") -> str:
    """A user-caused condition: exit 2 or 3, one error line (plus an optional hint), no
    traceback. Returns the error line."""
    lines = error_lines(stderr)
    assert code in codes, f"exit {code}, stderr:\n{stderr}"
    assert "Traceback" not in stderr, stderr
    assert "internal error" not in stderr, stderr
    assert 1 <= len(lines) <= 2, lines
    assert ": error: " in lines[0], lines
    if len(lines) == 2:
        assert lines[1].lstrip().startswith("hint:"), lines
    assert contains in lines[0], lines[0]
    return lines[0]


def predictions(db: Path, run_id: str):
    """The stored rows of one run, sorted (sample, shift, level)."""
    from robustlab.store import Store

    df = Store(db).predictions([run_id])
    return df.sort_values(["sample_id", "shift", "level"]).reset_index(drop=True)


class DiesAt:
    """Tasks ``0..n-1`` whose task ``at`` kills the worker process preparing it, every time
    (what the kernel's OOM killer does to a worker that decodes a huge image): a real
    process death, for the runner's retry-then-stop path."""

    def __init__(self, n: int, at: int):
        self.n, self.at = n, at

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        import signal
        import time

        if i == self.at:
            # As a real decode does, this takes a moment: the tasks before it have reached
            # the main process by then (a worker killed at once loses what it had queued).
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        return i, None, [], []
