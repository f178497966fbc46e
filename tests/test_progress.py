"""Progress output: periodic lines when stderr is not a terminal, and skipped cells counted
as done so bars and lines end at 100 %."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from robustlab.workflows.demo import DEMO_LABEL_SPACE, materialise
from robustlab.execution.progress import CellProgress, LineProgress


class _Clock:
    """A clock the test moves by hand (no sleeping, no timed assertion)."""

    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_line_progress_prints_rate_and_eta_every_interval():
    clock, out = _Clock(), io.StringIO()
    p = LineProgress(100, what="evaluate", unit="pred", interval=10, stream=out, clock=clock)
    clock.t += 4
    p.update(20)  # within the interval: no line
    clock.t += 6
    p.update(20)  # 10 s after the start: 40 done at 4/s, 60 left
    clock.t += 5
    p.update(60)
    p.close()
    p.close()  # closing twice prints once
    lines = out.getvalue().splitlines()
    assert lines == [
        "evaluate: 0/100 (0 %)",
        "evaluate: 40/100 (40 %), 4.0 pred/s, ETA 15s",
        "evaluate: 100/100 (100 %), 6.7 pred/s, took 15s",
    ]


def test_line_progress_of_a_resumed_run_counts_only_new_work_in_the_rate():
    clock, out = _Clock(), io.StringIO()
    p = LineProgress(200, done=100, interval=1, stream=out, clock=clock, what="x", unit="img")
    clock.t += 10
    p.update(50)
    assert out.getvalue().splitlines()[-1] == "x: 150/200 (75 %), 5.0 img/s, ETA 10s"


def test_line_progress_of_a_run_with_nothing_left_prints_one_line():
    clock, out = _Clock(), io.StringIO()
    p = LineProgress(456, done=456, interval=10, stream=out, clock=clock, what="evaluate")
    clock.t += 0.2
    p.close()
    assert out.getvalue().splitlines() == ["evaluate: 456/456 (100 %)"]


def test_cell_progress_in_line_mode_counts_skipped_cells():
    err = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        p = CellProgress({("clean", "0"): 2, ("blur", "1"): 2}, terminal=False)
        p.update([("clean", "0"), ("clean", "0"), ("blur", "1")])
        p.update([("blur", "1")])  # the runner's call for a skipped cell
        p.close()
    finally:
        sys.stderr = old
    assert err.getvalue().splitlines()[-1].startswith("evaluate: 4/4 (100 %)")


@pytest.mark.long
def test_evaluate_cli_prints_progress_lines_to_a_pipe_and_skips_reach_100(tmp_path):
    """Two demo photos of different classes: mixed_same has no same-class donor, so every
    one of its cells is skipped; the last progress line still says 6/6 (100 %)."""
    data, masks = materialise(tmp_path / "demo", ["rocket/rocket.jpg", "cat/chelsea.png"])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "robustlab.cli",
            "evaluate",
            "lite0",
            "--data",
            str(data),
            "--masks",
            str(masks),
            "--label-space",
            DEMO_LABEL_SPACE,
            "--suite",
            "imagenet9",
            "--shift",
            "mixed_same",
            "--shift",
            "mixed_rand",
            "--workers",
            "0",
            "--db",
            str(tmp_path / "r.duckdb"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # stderr is a pipe
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("evaluate: ")]
    assert lines[0] == "evaluate: 0/6 (0 %)"
    assert re.fullmatch(r"evaluate: 6/6 \(100 %\), [0-9.]+ pred/s, took \S+", lines[-1])
    assert "\r" not in proc.stderr  # no terminal bars in a log
    assert "skipped 2 image(s)" in proc.stderr


def test_build_masks_counts_a_skipped_last_image_as_done(tmp_path):
    """The last image is unreadable: progress still reaches total/total."""
    from robustlab.data.sources import Sample
    from robustlab.masks.auto import AutoMasker
    from robustlab.masks.build import build_masks

    data, _ = materialise(tmp_path / "demo", ["rocket/rocket.jpg"])
    broken = data / "rocket" / "zz_broken.jpg"
    broken.write_bytes(b"\xff\xd8 not really a jpeg")
    samples = [
        Sample(
            id="rocket/rocket.jpg",
            path=data / "rocket" / "rocket.jpg",
            class_name="rocket",
            bbox=(150, 20, 330, 420),
        ),
        Sample(id="rocket/zz_broken.jpg", path=broken, class_name="rocket", bbox=(0, 0, 10, 10)),
    ]
    calls = []
    summary = build_masks(
        samples,
        tmp_path / "masks",
        AutoMasker("grabcut"),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert summary["n_skipped"] == 1
    assert calls == [(1, 2), (2, 2)]
