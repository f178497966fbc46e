"""After ``kill -9`` of robustlab, no worker process may live on (issue 8).

Each test starts the real CLI with two workers, waits until its worker processes exist,
SIGKILLs the robustlab process only, and then waits (polling, generous deadline) until
every process that descended from it is gone. Before the fix the forkserver and its
workers outlived robustlab for minutes, generate workers still writing images.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="reads /proc; the parent-death signal is Linux-only",
)

DEADLINE_S = 30.0


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of ``pid``, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                children.setdefault(st[0], []).append(int(entry.name))
    found, todo = {}, [root]
    while todo:
        for kid in children.get(todo.pop(), []):
            st = _stat(kid)
            if st is not None:
                found[kid] = st[2]
                todo.append(kid)
    return found


def _alive(procs: dict[int, int]) -> list[int]:
    """The processes of ``procs`` still running (same pid and start time, not a zombie)."""
    out = []
    for pid, started in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == started and st[1] not in ("Z", "X"):
            out.append(pid)
    return out


def _kill_mid_run_leaves_nothing(args: list[str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "robustlab.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        procs: dict[int, int] = {}
        while time.monotonic() < deadline and proc.poll() is None:
            procs = _descendants(proc.pid)
            # Workers are grandchildren (forked by the forkserver, a child).
            workers = [p for p in procs if (_stat(p) or (proc.pid,))[0] != proc.pid]
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.fail(f"the run ended before its workers were seen: {proc.stderr.read()[-800:]}")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        procs.update(_descendants(proc.pid))  # nothing: the parent is gone, kept for clarity
        deadline = time.monotonic() + DEADLINE_S
        while _alive(procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _alive(procs)
        for pid in left:  # do not leave them to the rest of the test session
            os.kill(pid, signal.SIGKILL)
        assert not left, f"{len(left)} of {len(procs)} descendant processes outlived robustlab"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two ImageNet classes, six noise photos each: enough work to be killed mid-run."""
    root = tmp_path_factory.mktemp("lifeline") / "data"
    rng = np.random.default_rng(0)
    for wnid in ("n01440764", "n01443537"):
        (root / wnid).mkdir(parents=True)
        for i in range(6):
            pixels = (rng.random((160, 200, 3)) * 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / wnid / f"img{i}.png")
    return root


@pytest.mark.slow
def test_killed_evaluate_leaves_no_worker(folder, tmp_path):
    _kill_mid_run_leaves_nothing(
        [
            "evaluate",
            "lite0",
            "--data",
            str(folder),
            "--suite",
            "imagenet-c",
            "--db",
            str(tmp_path / "r.duckdb"),
            "--workers",
            "2",
            "--batch-size",
            "2",
            "--no-progress",
        ]
    )


@pytest.mark.slow
def test_killed_generate_leaves_no_worker(folder, tmp_path):
    _kill_mid_run_leaves_nothing(
        [
            "generate",
            "imagenet-c",
            "--data",
            str(folder),
            "--out",
            str(tmp_path / "out"),
            "--workers",
            "2",
            "--quiet",
        ]
    )


def test_die_with_parent_kills_an_orphan(tmp_path):
    """The mechanism itself, without torch: a grandchild that asked for the signal dies
    with its parent; one that did not lives on (so the test can fail)."""
    script = tmp_path / "tree.py"
    script.write_text(
        "import os, sys, time\n"
        "from robustlab.execution.lifeline import die_with_parent\n"
        "for ask in (True, False):\n"
        "    if os.fork() == 0:\n"
        "        if ask:\n"
        "            die_with_parent()\n"
        "        os.write(1, f'{int(ask)} {os.getpid()}\\n'.encode())  # one atomic write\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    procs: dict[int, int] = {}
    try:
        ready = {}  # pid -> asked; each child prints "<asked> <pid>" once set up
        for _ in range(2):
            asked, pid = map(int, proc.stdout.readline().split())
            ready[pid] = asked
        procs = {pid: _stat(pid)[2] for pid in ready}
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + DEADLINE_S
        while len(_alive(procs)) > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _alive(procs) == [p for p, asked in ready.items() if not asked]
    finally:
        for pid in procs:
            if _alive({pid: procs[pid]}):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


@pytest.mark.long
def test_workers_do_not_rerun_an_unguarded_main_script(tmp_path):
    """A plain script with no ``__main__`` guard: robustlab's DataLoader workers and a pool
    on :func:`worker_context` run without re-running the script (which used to start the
    whole job again in every worker and kill it: "DataLoader worker exited unexpectedly")."""
    script = tmp_path / "job.py"
    script.write_text(
        "import concurrent.futures as cf, math\n"
        "from robustlab.execution.executors import iterate_local\n"
        "from robustlab.execution.lifeline import worker_context\n"
        "print('SCRIPT RAN', flush=True)\n"
        "items = list(iterate_local(list(range(6)), workers=2))\n"
        "with cf.ProcessPoolExecutor(2, mp_context=worker_context()) as pool:\n"
        "    roots = list(pool.map(math.sqrt, [4.0, 9.0]))\n"
        "print('DONE', items, roots, flush=True)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("SCRIPT RAN") == 1, done.stdout
    assert "DONE [0, 1, 2, 3, 4, 5] [2.0, 3.0]" in done.stdout


def test_default_workers_leave_the_cores_of_a_cpu_model_to_it(monkeypatch):
    """One worker per core the main process leaves free: cores - 1 without a model on the
    CPU (generate, a GPU model), only the cores beyond torch's threads with one."""
    import torch

    from robustlab.execution import lifeline

    monkeypatch.setattr(lifeline, "available_cpus", lambda: 8)
    assert lifeline.default_workers() == 7
    assert lifeline.default_workers("cuda:0") == 7
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert lifeline.default_workers("cpu") == 0  # the forward pass uses every core
    monkeypatch.setattr(torch, "get_num_threads", lambda: 6)
    assert lifeline.default_workers("cpu") == 2
    monkeypatch.setattr(lifeline, "available_cpus", lambda: 1)
    assert lifeline.default_workers() == 1


def test_evaluate_of_a_cpu_model_prepares_images_in_the_main_process():
    """``evaluate``'s options for a model on the CPU: no worker process by default (the
    images are prepared between batches), the workers asked for otherwise."""
    import torch

    from robustlab.models import load_model
    from robustlab.execution.lifeline import available_cpus
    from robustlab.workflows.evaluate.execute import run_options
    from robustlab.workflows.evaluate.request import ExecutionSpec

    lite0 = load_model("lite0", device="cpu")
    free = max(0, available_cpus() - torch.get_num_threads())
    assert run_options(ExecutionSpec(), lite0).workers == free
    assert run_options(ExecutionSpec(workers=3), lite0).workers == 3
    assert run_options(ExecutionSpec(backend="ray"), lite0).workers == 0
