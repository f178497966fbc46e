"""Speed and memory of ``robustlab evaluate`` (prints ratios; nothing here is a test).

1. Throughput: on-the-fly evaluation of lite0 on clean + cheap corruptions (noise,
   brightness, contrast, jpeg) against the bare forward pass of the same model on the same
   batches (tensors prepared in advance, so only ``model.predict`` is timed). The target is
   a ratio of at least 0.85. With a model on the CPU, evaluate's default prepares the
   images (decode, shift, JPEG round trip, transform) in the main process between batches
   (its forward pass uses every core; ``--workers 1`` measures a worker process beside
   it); with a GPU model, DataLoader workers prepare them while the GPU runs.
2. Memory: peak RSS and PSS of the whole process tree (main + workers) of ``robustlab evaluate``
   on folders of 1,000 and 10,000 images, built by hard-linking the shared photos under
   different names. The target is a growth below 100 MB.

Usage:
    python benchmarks/evaluate.py                      # both parts
    python benchmarks/evaluate.py --part speed --photos 64
    python benchmarks/evaluate.py --part memory --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"
CHEAP = ("gaussian_noise", "brightness", "contrast", "jpeg_compression")


def make_folder(dst: Path, n: int, src: Path = SHARED) -> Path:
    """A flat folder of ``n`` images: the labelled photos of ``src`` (default the shared
    ones) hard-linked under new names."""
    with open(src / "labels.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if (src / r["file"]).is_file()]
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        r = rows[i % len(rows)]
        name = f"img{i:06d}_{r['file']}"
        target = dst / name
        if not target.exists():
            try:
                os.link(src / r["file"], target)
            except OSError:
                target.symlink_to(src / r["file"])
        out.append({**r, "file": name})
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(out[0]))
        w.writeheader()
        w.writerows(out)
    return dst


def available_cheap() -> list[str]:
    from robustlab.shifts.registry import list_shifts

    have = {s.name for s in list_shifts()}
    return [c for c in CHEAP if c in have]


def speed(
    n_photos: int,
    batch_size: int,
    workers: int | None,
    level: int,
    repeats: int,
    lanes: int | None = None,
) -> None:
    import torch

    import robustlab
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.models import load_model
    from robustlab.execution.executors import iterate_local
    from robustlab.execution.lanes import default_lanes, forward_lanes
    from robustlab.execution.lifeline import default_workers
    from robustlab.execution.runner import _ModelTransform
    from robustlab.execution.tasks import TaskDataset, Task

    shifts = available_cheap()
    if not shifts:
        print("speed: none of the cheap corruptions is registered yet; skipped")
        return
    tmp = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    data = make_folder(tmp / "photos", n_photos)
    model = load_model("lite0", device="cpu")
    plan = make_plan(
        EvaluateRequest.build(model, data, suite="imagenet-c", shifts=shifts, levels=[level])
    )
    cells = plan.cells
    n_images = n_photos * len(cells)
    # The same batches, prepared up front (in a worker process, as evaluate does, so the
    # main process's thread pools are in the same state): only the forward pass is timed.
    ds = TaskDataset(
        plan.samples,
        [Task(i, tuple(cells)) for i in range(len(plan.samples))],
        plan.images,
        _ModelTransform(model),
    )
    tensors = torch.cat([item[1] for item in iterate_local(ds, workers=1)])
    batches = [b.contiguous() for b in torch.split(tensors, batch_size)]
    del tensors
    model.predict(batches[0])  # warm-up
    lanes = default_lanes(model, lanes)
    # The machine is shared: alternate the measurements and keep the best of each.
    bare, in_lanes, full, loads = [], [], [], []
    for r in range(repeats):
        loads.append(os.getloadavg()[0])
        t0 = time.perf_counter()
        for b in batches:
            model.predict(b)
        bare.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with forward_lanes(model.predict, lanes) as pool:
            for b in batches:
                pool.submit(b)
                list(pool.ready())
            list(pool.ready(drain=True))
        in_lanes.append(time.perf_counter() - t0)
        db = tmp / f"speed{r}.duckdb"
        t0 = time.perf_counter()
        robustlab.evaluate(
            model,
            data,
            suite="imagenet-c",
            shifts=shifts,
            levels=[level],
            db=db,
            batch_size=batch_size,
            workers=workers,
            lanes=lanes,
            progress=False,
        )
        full.append(time.perf_counter() - t0)
    print(
        "  times (s): bare "
        + " ".join(f"{x:.2f}" for x in bare)
        + f" | bare in {lanes} lanes "
        + " ".join(f"{x:.2f}" for x in in_lanes)
        + " | evaluate "
        + " ".join(f"{x:.2f}" for x in full)
        + " | load average before each pair "
        + " ".join(f"{x:.2f}" for x in loads)
    )
    fb, fl, ff = min(bare), min(in_lanes), min(full)
    used = default_workers(model.input_device()) if workers is None else workers
    how = "" if workers is not None else " (evaluate's default for a model on the CPU)"
    print(
        f"speed: lite0, {n_photos} photos x {len(cells)} cells (clean + {', '.join(shifts)} "
        f"at severity {level}) = {n_images} images, batch {batch_size}, {used} worker(s){how}, "
        f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs"
    )
    print(f"  bare forward pass : {n_images / fb:7.1f} images/s (best of {repeats})")
    print(
        f"  the same batches in {lanes} lane(s): {n_images / fl:7.1f} images/s "
        f"(x{fb / fl:.2f} of the bare pass)"
    )
    print(
        f"  on-the-fly evaluate: {n_images / ff:7.1f} images/s (best of {repeats}, incl. worker "
        f"start-up and database writes, {lanes} lane(s))"
    )
    print(f"  ratio evaluate / forward = {fb / ff:.3f} (target >= 0.85)")
    print(f"  ratio evaluate / forward in the same lanes = {fl / ff:.3f}")


def _tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes of ``pid`` and all its descendants (Linux /proc).

    RSS counts pages shared between the main process and its forked workers once per
    process; PSS splits them, so it is the better total for a process tree. PSS is 0 where
    ``smaps_rollup`` is unavailable.
    """
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    rss = pss = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as fh:
                rss += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
        stack.extend(children.get(p, []))
    return rss, pss


def peak_tree_memory(cmd: list[str], interval: float = 0.2) -> tuple[int, int, float, int]:
    """Run ``cmd``; return (peak RSS, peak PSS of its process tree, seconds, exit status)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = [0, 0]

    def watch():
        while proc.poll() is None:
            rss, pss = _tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(interval)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode:
        print(err.strip().splitlines()[-1] if err.strip() else "failed", file=sys.stderr)
    return peak[0], peak[1], time.perf_counter() - t0, proc.returncode


def memory(
    sizes: list[int],
    workers: int | None,
    batch_size: int,
    shift: str | None,
    lanes: int | None = None,
) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rl-bench-mem-"))
    peaks = []
    for n in sizes:
        data = make_folder(tmp / f"d{n}", n)
        cmd = [
            sys.executable,
            "-m",
            "robustlab.cli",
            "evaluate",
            "lite0",
            "--data",
            str(data),
            "--db",
            str(tmp / f"m{n}.duckdb"),
            *(["--workers", str(workers)] if workers is not None else []),
            *(["--lanes", str(lanes)] if lanes is not None else []),
            "--batch-size",
            str(batch_size),
            "--no-progress",
        ]
        if shift:
            cmd += ["--suite", "imagenet-c", "--shift", shift, "--level", "3"]
        rss, pss, secs, rc = peak_tree_memory(cmd)
        peaks.append((rss, pss))
        print(
            f"memory: {n:6d} images{' (+' + shift + '/3)' if shift else ''}: peak of the process "
            f"tree RSS {rss / 2**20:7.1f} MB, PSS {pss / 2**20:7.1f} MB, {secs:6.1f} s, exit {rc}",
            flush=True,
        )
    if len(peaks) >= 2:
        d_rss = (peaks[-1][0] - peaks[0][0]) / 2**20
        d_pss = (peaks[-1][1] - peaks[0][1]) / 2**20
        print(
            f"  growth {sizes[0]} -> {sizes[-1]} images: RSS {d_rss:+.1f} MB, PSS {d_pss:+.1f} MB "
            "(target < 100 MB)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["speed", "memory", "all"], default="all")
    ap.add_argument("--photos", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument(
        "--workers",
        type=int,
        default=None,
        help="evaluate's --workers (default: evaluate's own, none for a model on the CPU)",
    )
    ap.add_argument(
        "--lanes", type=int, default=None, help="evaluate's --lanes (default: evaluate's own)"
    )
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument(
        "--memory-shift",
        default=None,
        help="also evaluate this corruption in the memory runs (default: clean only)",
    )
    args = ap.parse_args()
    if not SHARED.exists():
        sys.exit(f"shared photos not found at {SHARED}")
    if args.part in ("speed", "all"):
        speed(args.photos, args.batch_size, args.workers, args.level, args.repeats, args.lanes)
    if args.part in ("memory", "all"):
        memory(args.sizes, args.workers, args.batch_size, args.memory_shift, args.lanes)


if __name__ == "__main__":
    main()
