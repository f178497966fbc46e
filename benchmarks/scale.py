"""Local backend against the Ray backend: generate and evaluate throughput per core count.

Usage: python benchmarks/scale.py [--images 16] [--cores 1,2] [--shifts gaussian_noise,...]
       [--levels 1,3,5] [--skip evaluate]

For each core count C (this process and all it starts pinned to C cores): ``generate``
with the local backend (C worker processes; 1 = in this process) and ``evaluate`` (lite0 on
the CPU, loaded once, C - 1 data workers plus the model in this process), each twice, then a
Ray instance started here with C CPUs runs the same jobs twice, into fresh folders and
databases. "cold" is a backend's first job (Ray: its worker processes start, import
robustlab and load the model; local: the first pool and JIT compilation), "warm" the second
(what every later job on a running cluster sees). Prints images/s and Ray's rate as a
ratio of the local one, plus Ray's start-up overhead (``ray.init`` and the first, empty Ray
Data pipeline), the load average around each job (on a busy shared machine the wall-time
ratio flatters the backend with more processes, which get a larger share of the cores) and,
for evaluate on Ray, where the time went per stage. Asserts nothing: the machine is shared
and timings vary.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import make_folder

import robustlab
from robustlab.generate import generate
from robustlab.run.ray_backend import stages_line


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def pin(cores: list[int]) -> None:
    """Run every thread of this process, and what it starts from now on, on ``cores``.

    ``os.sched_setaffinity(0, ...)`` moves only the calling thread: torch's OpenMP threads,
    started when the model was loaded, kept all the cores, so the local backend's "1 core"
    ran its forward passes on two (earlier runs of this benchmark, see benchmarks/README.md).
    """
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended meanwhile
            pass


def _startup(ray, cpus: int) -> tuple[float, float, float]:
    """Seconds of ``ray.init``, of a first one-row Ray Data pipeline and of a second one
    (the fixed cost every job pays on a running instance)."""
    import ray.data

    t_init = _timed(
        lambda: ray.init(
            num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR
        )
    )
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False

    def empty():
        return ray.data.from_items([{"x": 0}]).map_batches(lambda b: b).take_all()

    return t_init, _timed(empty), _timed(empty)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=16)
    ap.add_argument(
        "--cores", default="1,2", help="core counts, comma-separated ('all': every CPU)"
    )
    ap.add_argument("--shifts", default="gaussian_noise,contrast,jpeg_compression")
    ap.add_argument("--levels", default="1,3,5")
    ap.add_argument("--skip", default="", help="generate and/or evaluate")
    args = ap.parse_args()
    import ray
    import torch

    cores = [os.cpu_count() if c == "all" else int(c) for c in args.cores.split(",")]
    shifts, levels = args.shifts.split(","), [int(x) for x in args.levels.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rl-scale-"))
    data = make_folder(work / "photos", args.images)
    n_cells = len(shifts) * len(levels)
    print(
        f"{args.images} images x {n_cells} cells ({','.join(shifts)} at {args.levels}); "
        f"{os.cpu_count()} CPUs here, load average {os.getloadavg()[0]:.1f}"
    )
    kw = {"shifts": shifts, "levels": levels, "progress": False}
    rows = []

    def run_generate(tag: str, **extra) -> float:
        out = work / f"gen-{tag}"
        seconds = _timed(lambda: generate("imagenet-c", data, out, **kw, **extra))
        shutil.rmtree(out)
        return args.images / seconds

    def run_evaluate(tag: str, model, **extra) -> float:
        db = work / f"{tag}.duckdb"
        out: dict = {}
        seconds = _timed(
            lambda: out.update(
                df=robustlab.evaluate(model, data, suite="imagenet-c", db=db, **kw, **extra)
            )
        )
        db.unlink()
        n = args.images * (1 + n_cells)
        print(
            f"  {tag}: {n / seconds:.1f} img/s, load average {os.getloadavg()[0]:.1f}", flush=True
        )
        if out["df"].attrs.get("stages"):  # Ray: where the time went, per stage
            print(f"    {stages_line(out['df'].attrs['stages'])}", flush=True)
        return n / seconds

    from robustlab.models import load_model

    model = load_model("lite0", device="cpu")  # loaded once: what is timed is the job
    everything = sorted(os.sched_getaffinity(0))
    for c in cores:
        # C cores for this process and everything it starts (pools, Ray's processes).
        pin(everything[:c])
        # what a process started on C cores gets (OpenMP sizes its pool by the affinity mask);
        # the model was loaded on all cores, and two threads on one core thrash
        torch.set_num_threads(c)
        result = {"cores": c, "load_before": os.getloadavg()[0]}
        for phase in ("cold", "warm"):
            if "generate" not in args.skip:
                # one core: in this process (workers=0); more: one worker process per core
                result[f"gen_local_{phase}"] = run_generate(
                    f"local{c}{phase}", workers=0 if c == 1 else c
                )
            if "evaluate" not in args.skip:
                result[f"eval_local_{phase}"] = run_evaluate(
                    f"local{c}{phase}", model, workers=c - 1
                )
        result["init_s"], result["first_pipeline_s"], result["next_pipeline_s"] = _startup(ray, c)
        try:
            # generate's jobs first: an evaluate pipeline's model actor may hold its CPU for
            # a while after the job, which would halve the generate job after it
            for phase in ("cold", "warm"):
                if "generate" not in args.skip:
                    result[f"gen_ray_{phase}"] = run_generate(f"ray{c}{phase}", backend="ray")
            for phase in ("cold", "warm"):
                if "evaluate" not in args.skip:
                    result[f"eval_ray_{phase}"] = run_evaluate(
                        f"ray{c}{phase}", model, backend="ray"
                    )
        finally:
            ray.shutdown()
            pin(everything)
            torch.set_num_threads(len(everything))
        result["load_after"] = os.getloadavg()[0]
        rows.append(result)
        print({k: round(v, 3) for k, v in result.items()}, flush=True)

    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    print(
        "| cores | job | local cold / warm img/s | Ray cold img/s (ratio) | "
        "Ray warm img/s (ratio to local warm) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        for job, key in (("generate", "gen"), ("evaluate", "eval")):
            if f"{key}_local_warm" not in r:
                continue
            lc, lw = r[f"{key}_local_cold"], r[f"{key}_local_warm"]
            cold, warm = r[f"{key}_ray_cold"], r[f"{key}_ray_warm"]
            print(
                f"| {r['cores']} | {job} | {lc:.2f} / {lw:.2f} | {cold:.2f} (x{cold / lc:.2f}) "
                f"| {warm:.2f} (x{warm / lw:.2f}) |"
            )
    for r in rows:
        print(f"{r['cores']} core(s): load average {r['load_before']:.1f} -> {r['load_after']:.1f}")
    for r in rows:
        print(
            f"Ray start-up with {r['cores']} CPU(s): ray.init {r['init_s']:.1f} s, first "
            f"Ray Data pipeline {r['first_pipeline_s']:.1f} s, each later one "
            f"{r['next_pipeline_s']:.2f} s"
        )
    if len(rows) > 1:
        first, last = rows[0], rows[-1]
        for key, job in (("gen", "generate"), ("eval", "evaluate")):
            if f"{key}_ray_warm" in first:
                print(
                    f"{job}: {last['cores']} vs {first['cores']} cores, speed-up local warm "
                    f"x{last[f'{key}_local_warm'] / first[f'{key}_local_warm']:.2f}, Ray warm "
                    f"x{last[f'{key}_ray_warm'] / first[f'{key}_ray_warm']:.2f}"
                )
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
