"""Records that tell the truth: a manifest's counts come from the files on disk, not from
one process's memory, and a run killed mid-way is marked as such by the next one (generate
and synth)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _runs_helpers as h  # noqa: E402

GEN = ("--shift", "brightness,contrast", "--level", "1,2,3")  # cheap shifts, 6 cells


def _files(out: Path, pattern: str = "*.JPEG") -> list[Path]:
    return [p for p in out.rglob(pattern) if not p.name.startswith(".")]


def _kill_after(cmd: list[str], out: Path, pattern: str, n: int = 1) -> None:
    """Start ``cmd``, SIGKILL it once ``n`` files matching ``pattern`` exist under ``out``."""
    proc = subprocess.Popen(
        cmd, env=h.subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None and len(_files(out, pattern)) < n:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


def test_generate_counts_after_kill_and_resume_are_the_files_on_disk(tmp_path, capsys):
    data = h.flat_folder(tmp_path / "data", 10)
    out = tmp_path / "gen"
    args = ("generate", "imagenet-c", "--data", data, "--out", out, *GEN, "--no-progress")
    _kill_after(h.robustlab_cmd(*args, "--workers", "0"), out, "*.JPEG", n=3)
    before = len(_files(out))
    assert 3 <= before < 60
    code, _, err = h.cli(capsys, *args, "--workers", "0")
    assert code == 0, err
    m = json.loads((out / "manifest.json").read_text())
    assert len(_files(out)) == 60
    assert m["counts"]["written"] == 60  # on main: only the resumed run's files
    # The files of the image in flight had no recorded hash yet: drawn again by the rerun.
    redrawn = m["runs"][-1]["redrawn"]
    assert 0 <= redrawn <= before and m["counts"]["written_this_run"] == 60 - before + redrawn
    assert [r["status"] for r in m["runs"]] == ["killed", "complete"]


@pytest.mark.slow  # two generate processes of zoom_blur: about 10 s
def test_two_concurrent_generates_count_each_file_once(tmp_path):
    """Two runs started together draw the same images at the same time (each checks that
    a file is missing, then writes it): the folder holds each file once, and so must the
    count. zoom_blur is slow enough for the two to overlap."""
    data = h.flat_folder(tmp_path / "data", 8)
    out = tmp_path / "gen"
    cmd = h.robustlab_cmd(
        "generate", "imagenet-c", "--data", data, "--out", out, "--shift", "zoom_blur",
        "--level", "1,2", "--workers", "1", "--no-progress",
    )  # fmt: skip
    env = h.subprocess_env()
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    m = json.loads((out / "manifest.json").read_text())
    assert len(_files(out)) == 16
    assert m["counts"]["written"] == 16  # on main: the two runs' sum
    assert [r["status"] for r in m["runs"]] == ["complete", "complete"]


def _root_conftest():
    """tests/conftest.py by path (this folder may have a conftest of its own)."""
    path = Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("_robustlab_root_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # two interpreters that import torch and diffusers
def test_killed_synth_is_marked_and_counted_from_disk(tmp_path):
    pytest.importorskip("diffusers")
    checkpoint = _root_conftest().save_tiny_text2image(tmp_path / "tiny-sd")
    out = tmp_path / "synth"
    args = (
        "synth", "--checkpoint", checkpoint, "--out", out, "--classes", "backpack,banana,bucket",
        "--nuisances", "texture", "--max-nuisances", "8", "--steps", "2", "--size", "64",
        "--device", "cpu", "--quiet",
    )  # fmt: skip
    _kill_after(h.robustlab_cmd(*args), out, "*.png", n=3)
    before = len(_files(out, "*.png"))
    assert 3 <= before < 24
    done = h.run_cli(*args)
    assert done.returncode == 0, done.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert len(_files(out, "*.png")) == 24
    assert m["counts"]["written"] == 24  # on main: only the resumed run's images
    assert [r["status"] for r in m["runs"]] == ["killed", "complete"]  # on main: "running"


@pytest.mark.long
def test_killed_evaluate_is_marked_killed_by_the_next_run(tmp_path, capsys):
    data = h.flat_folder(tmp_path / "data", 6)
    db = tmp_path / "r.duckdb"
    cmd = h.robustlab_cmd(
        "evaluate", "lite0", "--data", data, "--db", db, "--suite", "imagenet-c", "--shift",
        "brightness,contrast", "--level", "1,2,3", "--workers", "0", "--batch-size", "1",
        "--no-progress",
    )  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=h.subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and not db.exists():
            time.sleep(0.02)
        time.sleep(1.0)  # the run row is in, predictions are being made
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    from robustlab.store import Store

    runs = Store(db).runs()
    assert list(runs["status"]) == ["running"]  # what the killed process left
    killed = runs["run_id"][0]
    # Another run (clean images only: another run id) starts in the same database.
    code, _, err = h.cli(
        capsys, "evaluate", "lite0", "--data", data, "--db", db, "--workers", "0",
        "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert Store(db).get_run(killed)["status"] == "killed"  # on main: "running" for ever
