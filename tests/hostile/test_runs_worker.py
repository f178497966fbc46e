"""A worker process of ``robustlab evaluate`` killed in the middle of a run (what the
kernel's out-of-memory killer does): the run retries the lost tasks and finishes with every
prediction, instead of crashing with a DataLoader traceback (exit 70)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _runs_helpers as h  # noqa: E402
import pytest  # noqa: E402


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ")".
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _workers(pid: int) -> list[int]:
    """DataLoader workers of robustlab ``pid``: the children of its forkserver."""
    servers = [c for c in _children(pid) if "forkserver" in _cmdline(c)]
    return [w for s in servers for w in _children(s)]


@pytest.mark.slow  # a real child process and model: 15 s on an idle 2-core machine
def test_killed_worker_is_replaced_and_the_run_completes(tmp_path):
    # Enough images that the run outlasts finding and killing its worker on an idle machine.
    n = 40
    data = h.flat_folder(tmp_path / "data", n)
    db = tmp_path / "a.duckdb"
    cmd = h.robustlab_cmd(
        "evaluate", "lite0", "--data", data, "--db", db, "--suite", "imagenet-c",
        "--shift", "brightness", "--level", "1", "--workers", "1", "--batch-size", "2",
        "--no-progress",
    )  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=h.subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    killed = None
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and killed is None:
            workers = _workers(proc.pid)
            if workers:
                time.sleep(0.5)  # let it deliver a task or two first
                if proc.poll() is None and workers[0] in _workers(proc.pid):
                    os.kill(workers[0], signal.SIGKILL)
                    killed = workers[0]
            time.sleep(0.05)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert killed is not None, "the run ended before a worker could be killed"
    assert proc.returncode == 0, err
    assert "Traceback" not in err, err
    assert "a worker process died" in err, err
    run = h.run_id_of(out + err)
    rows = h.predictions(db, run)
    # Every (image, cell) once: n images x (clean + 1 cell).
    assert len(rows) == n * 2
    assert not rows.duplicated(["sample_id", "shift", "level"]).any()


@pytest.mark.slow  # three worker deaths, each noticed by the DataLoader's 5 s status check
def test_a_task_that_kills_every_worker_stops_the_run_in_one_line():
    """Workers die at the same task again and again: the runner retries it, then stops with
    one user-facing line (exit 3 from the CLI), every earlier task delivered exactly once."""
    from types import SimpleNamespace

    from robustlab.errors import EnvironmentProblem
    from robustlab.execution.local_workers import WORKER_DEATHS, surviving_worker_deaths
    from robustlab.execution.runner import RunOptions
    from robustlab.execution.tasks import Task

    n, at = 6, 3
    samples = [SimpleNamespace(id=f"img{i}.jpg") for i in range(n)]
    tasks = [Task(i, (("clean", 0),)) for i in range(n)]
    options = RunOptions(workers=1)
    seen = []
    with pytest.raises(EnvironmentProblem) as caught:
        items = surviving_worker_deaths(h.DiesAt(n, at), tasks, samples, options, pin_memory=False)
        for item in items:
            seen.append(item[0])
    assert seen == list(range(at))  # in order, none twice, none lost before the bad task
    message = str(caught.value)
    assert f"died {WORKER_DEATHS} times while preparing img{at}.jpg" in message
    assert "\n" not in message and "rerun" in caught.value.hint
