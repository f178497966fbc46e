"""Cells per second of ONE evaluation worker process, for two versions of the code.

Usage: python benchmarks/worker_cells.py [--base REV] [--photos 20] [--repeats 3]
    [--suite imagenet-c] [--json FILE]

What is measured is what each DataLoader worker of ``robustlab evaluate --suite
imagenet-c`` does (exact path, no ``--shift-device``): decode and prepare a photo, make
its 75 corrupted cells and the clean one, put every cell through the model transform
(lite0's, uint8) and hand the task's tensor to the main process. It runs through
``robustlab.execution.executors.iterate_local`` with one worker, so the hand-over between
processes is included; the worker's start-up is not (the clock starts when the first task
arrives).

The two versions are this checkout (``new``) and ``--base`` (default ``HEAD``), exported
(``git archive``) into a temporary folder; each run is a fresh process with that tree's
``src`` on ``PYTHONPATH``, the versions alternate (base, new, base, new, ...) so that
the load of a shared machine falls on both alike, and the median of the repeats is
printed, as the rate over wall time and over the worker's own CPU time. The bytes of
every task's tensor (all its cells) are hashed in every run; the script fails if any
differs between the versions or between repeats.

Prints rates and their ratio; asserts no speed (the machine may be shared).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
SHARED = REPO.parent / "shared" / "data" / "imagenet-samples"


class TimedTasks:
    """The task dataset, returning each item with the worker's CPU seconds for it."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        t = time.process_time()
        item = self.dataset[i]
        return item, time.process_time() - t


def pick_photos(dst: Path, n: int, src: Path = SHARED) -> Path:
    """``n`` evenly spaced labelled photos of ``src`` (a spread of sizes), linked into ``dst``."""
    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    step = max(1, len(rows) // n)
    picked = rows[::step][:n]
    dst.mkdir(parents=True, exist_ok=True)
    for r in picked:
        target = dst / r["file"]
        try:
            os.link(src / r["file"], target)
        except OSError:
            shutil.copy(src / r["file"], target)
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(picked[0]))
        w.writeheader()
        w.writerows(picked)
    return dst


def child(photos: Path, suite: str) -> dict:
    """One measurement with the robustlab on ``sys.path``: rates and per-task hashes."""
    import robustlab
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.models import load_model
    from robustlab.execution.executors import iterate_local
    from robustlab.execution.bookkeeping import plan_tasks
    from robustlab.execution.runner import RunOptions, _ModelTransform
    from robustlab.execution.tasks import TaskDataset
    from robustlab.store import Store

    model = load_model("lite0", device="cpu")
    plan = make_plan(EvaluateRequest.build(model, photos, suite=suite))
    with tempfile.TemporaryDirectory() as tmp:
        tasks, _, _ = plan_tasks(
            plan.samples,
            plan.cells,
            Store(Path(tmp) / "none.duckdb"),
            "none",
            RunOptions().cells_per_task,
        )
    from worker_cells import TimedTasks as Timed  # importable by name in the worker

    ds = Timed(TaskDataset(plan.samples, tasks, plan.images, _ModelTransform(model)))
    hashes, cells, cpu, first = [], 0, 0.0, None
    for (_index, tensor, errors, *_), cpu_s in iterate_local(ds, workers=1, prefetch=2):
        digest = hashlib.sha256(repr(errors).encode())
        if tensor is not None:
            digest.update(repr((tuple(tensor.shape), tensor.dtype)).encode())
            digest.update(tensor.contiguous().numpy().tobytes())
        hashes.append(digest.hexdigest())
        if first is None:  # the clock starts at the first task: no start-up in the rate
            first = time.perf_counter()
            continue
        cells += 0 if tensor is None else tensor.shape[0]
        cpu += cpu_s
    wall = time.perf_counter() - first
    return {
        "robustlab": robustlab.__file__,
        "tasks": len(tasks),
        "cells_timed": cells,
        "wall_cells_s": cells / wall,
        "cpu_cells_s": cells / cpu,
        "hashes": hashes,
    }


def run_child(src: Path, photos: Path, suite: str) -> dict:
    # This folder too: the worker unpickles TimedTasks from the module worker_cells.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(HERE.parent)])}
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", str(photos), "--suite", suite],
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode:
        sys.exit(f"the run with {src} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare with")
    ap.add_argument("--photos", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--suite", default="imagenet-c")
    ap.add_argument("--json", default=None, help="write the result here too")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(Path(args.child), args.suite)), flush=True)
        return

    with tempfile.TemporaryDirectory(prefix="rl-cells-") as tmp:
        tmp = Path(tmp)
        photos = pick_photos(tmp / "photos", args.photos)
        base_tree = tmp / "base"  # the base's src, exported (no worktree to register)
        base_tree.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.base, "src"], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(base_tree)], input=archive, check=True)
        trees = {"base": base_tree / "src", "new": REPO / "src"}
        runs: dict[str, list[dict]] = {"base": [], "new": []}
        for rep in range(args.repeats):
            for name, src in trees.items():
                r = run_child(src, photos, args.suite)
                assert Path(r["robustlab"]).is_relative_to(src), r["robustlab"]
                runs[name].append(r)
                print(
                    f"repeat {rep + 1} {name:4s}: {r['wall_cells_s']:7.1f} cells/s wall, "
                    f"{r['cpu_cells_s']:7.1f} cells/s of worker CPU",
                    flush=True,
                )

    reference = runs["base"][0]["hashes"]
    same = all(r["hashes"] == reference for rs in runs.values() for r in rs)
    med = {
        name: {k: statistics.median(r[k] for r in rs) for k in ("wall_cells_s", "cpu_cells_s")}
        for name, rs in runs.items()
    }
    result = {
        "base": args.base,
        "photos": args.photos,
        "tasks": runs["new"][0]["tasks"],
        "cells_per_run": runs["new"][0]["cells_timed"],
        "repeats": args.repeats,
        "median": med,
        "ratio_wall": med["new"]["wall_cells_s"] / med["base"]["wall_cells_s"],
        "ratio_cpu": med["new"]["cpu_cells_s"] / med["base"]["cpu_cells_s"],
        "identical_bytes": same,
        "load_avg": os.getloadavg(),
        "cpus": os.cpu_count(),
    }
    print(
        f"median of {args.repeats}: base {med['base']['wall_cells_s']:.1f} -> new "
        f"{med['new']['wall_cells_s']:.1f} cells/s wall (x{result['ratio_wall']:.2f}); "
        f"worker CPU {med['base']['cpu_cells_s']:.1f} -> {med['new']['cpu_cells_s']:.1f} "
        f"cells/s (x{result['ratio_cpu']:.2f}); all cells identical: {same}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    if not same:
        sys.exit("the two versions (or two repeats) produced different bytes")


if __name__ == "__main__":
    main()
