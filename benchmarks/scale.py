"""Local backend against the Ray backend: generate, evaluate, synth and mine, same cores.

Usage: python benchmarks/scale.py [--images 96] [--cores 2] [--runs 3] [--keep-actors]
       [--jobs generate,evaluate,synth,mine] [--models lite0,resnet50]
       [--surrogates lite0,lite1] [--synth-images 24] [--synth-size 128 --synth-steps 4]

For each core count C this process and everything it starts (worker pools, Ray's processes)
is pinned to C cores, and a Ray instance with C CPUs is started here (its own port and
temp dir: other Ray instances on the machine are left alone). Each job then runs once per
backend "cold" (Ray: its workers start and import robustlab; local: the first pool and JIT
compilation; not counted), then ``--runs`` times per backend "warm", **interleaved**
(local, Ray, then Ray, local, ...: the machine is shared, and a load that changes during
the run falls on both), each into a fresh folder or database. Prints each run's
throughput with the load average before it, the Ray / local ratio of each pair, and for
Ray the worker time per stage (where the time went, and the model's torch threads).

The jobs (local settings: what a user on C cores gets):

* ``generate``: ImageNet-C cells of ``--images`` photos; local: C worker processes (1 core:
  in this process). Source images/s.
* ``evaluate``: each model of ``--models`` (``lite0``: the bundled EfficientNet-Lite0;
  ``resnet50``: timm's ResNet-50 with random weights saved here, seed 0: a model whose
  forward pass dwarfs the decode and shift work, no download) on the clean photos and the
  cells; local: evaluate's default (the model on the CPU: the images prepared in this
  process between its batches, ``robustlab.execution.lifeline.default_workers``), the model
  loaded once (Ray loads it on its actor each job). Predictions/s.
* ``synth``: the tiny random-weight diffusers pipeline of the tests
  (``tests/conftest.py::save_tiny_text2image``) drawing ``--synth-images`` images; local:
  the pipeline loaded once in this process (Ray loads it on its actor each job). Images/s.
* ``mine``: the ``--surrogates`` on a generated folder of ``--images`` photos (one run per
  surrogate, then the mining query on the driver; local: evaluate's default, as above).
  Predictions/s over all surrogates.

Asserts nothing: the machine is shared and timings vary; read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import make_folder

import robustlab
from robustlab.workflows.generate import generate
from robustlab.execution.ray.actors import keep_model_actors
from robustlab.execution.ray.pipeline import stages_line
from robustlab.execution.ray.session import LOCAL_SYSTEM_CONFIG

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def load() -> float:
    return os.getloadavg()[0]


def _psutil():
    """psutil, which Ray ships in its ``thirdparty_files`` (on ``sys.path`` once Ray is
    imported): robustlab does not depend on it."""
    import ray  # noqa: F401

    import psutil

    return psutil


class CpuMeter:
    """CPU seconds of this process and of every descendant while a job runs.

    Less load-dependent than wall time, which on a shared machine flatters the backend with
    more processes. Each process's own CPU time is sampled every ``every`` seconds in a
    thread (a Ray worker that exits is reaped without its time reaching any parent's
    ``children_*`` times, so a before/after sum lost Ray's actors); a process that exits
    between two samples loses at most that interval.
    """

    def __init__(self, every: float = 0.2):
        import threading

        self.every, self.first, self.last = every, {}, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> dict:
        psutil = _psutil()

        me = psutil.Process()
        out = {}
        for p in [me, *me.children(recursive=True)]:
            try:
                t = p.cpu_times()
                out[(p.pid, p.create_time())] = t.user + t.system
            except psutil.Error:  # ended meanwhile
                pass
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.last.update(self._sample())

    def __enter__(self) -> CpuMeter:
        self.first = self._sample()
        self.last = dict(self.first)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.last.update(self._sample())

    @property
    def seconds(self) -> float:
        return sum(v - self.first.get(k, 0.0) for k, v in self.last.items())


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


def start_ray(ray, cpus: int, temp_dir: str) -> tuple[float, float, float]:
    """Start a Ray instance of ``cpus`` CPUs (a free port, ``temp_dir``: never the default
    port or /tmp/ray, which other Ray users of the machine may hold). Returns the seconds
    of ``ray.init``, of a first one-row Ray Data pipeline and of a second one (the fixed
    cost every job pays on a running instance)."""
    import ray.data

    t_init = _timed(
        lambda: ray.init(
            num_cpus=cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            _temp_dir=temp_dir,
            # what robustlab's own Ray instance gets (execution.ray.session.ray_session)
            _system_config=dict(LOCAL_SYSTEM_CONFIG),
        )
    )
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)
    ray.data.DataContext.get_current().enable_progress_bars = False

    def empty():
        return ray.data.from_items([{"x": 0}]).map_batches(lambda b: b).take_all()

    return t_init, _timed(empty), _timed(empty)


def random_resnet50(path: Path) -> Path:
    """timm's ResNet-50 with random weights (seed 0) saved as a weights file: a large model
    with nothing to download."""
    import timm
    import torch

    if not path.is_file():
        torch.manual_seed(0)
        torch.save(timm.create_model("resnet50", pretrained=False).state_dict(), path)
    return path


def tiny_checkpoint(path: Path) -> Path:
    """The tests' tiny random-weight Stable Diffusion folder (tests/conftest.py)."""
    if not (path / "model_index.json").is_file():
        spec = importlib.util.spec_from_file_location("_rl_conftest", ROOT / "tests/conftest.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.save_tiny_text2image(path)
    return path


class Job:
    """One job of the benchmark: ``run(backend, tag)`` does it once into fresh outputs and
    returns ``(items per second, Ray's stage summary or None)``."""

    def __init__(self, name: str, unit: str, run: Callable[[str, str], tuple[float, dict | None]]):
        self.name, self.unit, self.run = name, unit, run


def make_jobs(args, work: Path, data: Path, cores: int) -> list[Job]:
    shifts, levels = args.shifts.split(","), [int(x) for x in args.levels.split(",")]
    kw = {"shifts": shifts, "levels": levels, "progress": False}
    n_cells = len(shifts) * len(levels)
    jobs_wanted = args.jobs.split(",")
    jobs: list[Job] = []

    if "generate" in jobs_wanted:

        def run_generate(backend: str, tag: str):
            out = work / f"gen-{tag}"
            extra = (
                {"backend": "ray"} if backend == "ray" else {"workers": 0 if cores == 1 else cores}
            )
            seconds = _timed(lambda: generate("imagenet-c", data, out, **kw, **extra))
            shutil.rmtree(out)
            return args.images / seconds, None

        jobs.append(Job("generate", "images/s", run_generate))

    if "evaluate" in jobs_wanted:
        from robustlab.models import load_model

        for name in args.models.split(","):
            if name == "resnet50":
                weights = random_resnet50(work / "resnet50-random.pth")
                model = load_model("timm:resnet50", weights=weights, device="cpu")
            else:
                model = load_model(name, device="cpu")

            def run_evaluate(backend: str, tag: str, model=model):
                db = work / f"{tag}.duckdb"
                extra = {"backend": "ray"} if backend == "ray" else {}
                out: dict = {}
                seconds = _timed(
                    lambda: out.update(
                        run=robustlab.evaluate(
                            model, data, suite="imagenet-c", db=db, **kw, **extra
                        )
                    )
                )
                db.unlink()
                return args.images * (1 + n_cells) / seconds, out["run"].stages

            jobs.append(Job(f"evaluate {name}", "predictions/s", run_evaluate))

    if "synth" in jobs_wanted:
        from robustlab.workflows.imagenet_d.synth import synth
        from robustlab.shifts.generative.text2image import TextToImage

        checkpoint = tiny_checkpoint(work / "tiny-sd")
        pipeline = TextToImage(checkpoint, device="cpu")
        synth_kw = dict(
            classes=["backpack", "banana", "bucket"],
            nuisances=["texture"],
            limit=args.synth_images,
            steps=args.synth_steps,
            height=args.synth_size,
            width=args.synth_size,
            device="cpu",
        )

        def run_synth(backend: str, tag: str):
            out = work / f"synth-{tag}"
            extra = {"backend": "ray"} if backend == "ray" else {"pipeline": pipeline}
            res: dict = {}
            seconds = _timed(lambda: res.update(r=synth(out, checkpoint, **synth_kw, **extra)))
            shutil.rmtree(out)
            assert res["r"].written == args.synth_images, res["r"]
            return args.synth_images / seconds, res["r"].stages

        jobs.append(Job("synth", "images/s", run_synth))

    if "mine" in jobs_wanted:
        from robustlab.workflows.imagenet_d.mine import mine
        from robustlab.models import load_model

        cells = work / "mine-cells"
        if not cells.is_dir():
            generate("imagenet-c", data, cells, **kw, workers=cores)
        surrogates = [load_model(s, device="cpu") for s in args.surrogates.split(",")]

        def run_mine(backend: str, tag: str):
            db = work / f"mine-{tag}.duckdb"
            extra = {"backend": "ray"} if backend == "ray" else {}
            seconds = _timed(
                lambda: mine(cells, surrogates=surrogates, db=db, progress=False, **extra)
            )
            db.unlink()
            return len(surrogates) * args.images * n_cells / seconds, None

        jobs.append(Job(f"mine {args.surrogates}", "predictions/s", run_mine))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--cores", default="2", help="core counts, comma-separated ('all': every CPU)")
    ap.add_argument("--runs", type=int, default=3, help="warm runs per backend and job")
    ap.add_argument("--jobs", default="generate,evaluate,synth,mine")
    ap.add_argument("--models", default="lite0,resnet50", help="evaluate's models")
    ap.add_argument("--surrogates", default="lite0,lite1", help="mine's surrogates")
    ap.add_argument("--shifts", default="gaussian_noise,contrast,jpeg_compression")
    ap.add_argument("--levels", default="1,3,5")
    ap.add_argument("--synth-images", type=int, default=24)
    ap.add_argument("--synth-size", type=int, default=128)
    ap.add_argument("--synth-steps", type=int, default=4)
    ap.add_argument(
        "--keep-actors",
        action="store_true",
        help="Ray's model actors live across the runs (keep_model_actors), as the local "
        "backend keeps its loaded model",
    )
    args = ap.parse_args()
    import ray
    import torch

    cores = [os.cpu_count() if c == "all" else int(c) for c in args.cores.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rl-scale-"))
    data = make_folder(work / "photos", args.images)
    print(
        f"{args.images} images, cells {args.shifts} at {args.levels}; {os.cpu_count()} CPUs "
        f"here, load average {load():.1f}",
        flush=True,
    )
    table = []
    everything = sorted(os.sched_getaffinity(0))
    try:
        for c in cores:
            # C cores for this process and everything it starts (pools, Ray's processes).
            pin(everything[:c])
            # what a process started on C cores gets (OpenMP sizes its pool by the affinity
            # mask); the model was loaded on all cores, and two threads on one core thrash
            torch.set_num_threads(c)
            jobs = make_jobs(args, work, data, c)
            t_init, first, later = start_ray(ray, c, str(work / "ray"))
            print(
                f"{c} core(s): ray.init {t_init:.1f} s, first Ray Data pipeline {first:.1f} s, "
                f"each later one {later:.2f} s",
                flush=True,
            )
            # --keep-actors: Ray's model actors live across the jobs, as the local backend's
            # loaded model does (robustlab.execution.ray.keep_model_actors: the cold run builds
            # each model once, the warm runs reuse it); without it, every Ray job starts
            # its own model actors.
            kept = keep_model_actors() if args.keep_actors else contextlib.nullcontext()
            try:
                with kept:
                    for job in jobs:
                        table.append(measure(job, c, args.runs))
            finally:
                ray.shutdown()
    finally:
        pin(everything)
        torch.set_num_threads(len(everything))
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nload average at the end {load():.1f}")
    print(
        "| cores | job | local warm runs | Ray warm runs | Ray / local per pair | median | "
        "Ray / local CPU-s (median) | load average |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in table:
        print(
            f"| {r['cores']} | {r['job']} ({r['unit']}) | "
            f"{' / '.join(f'{v:.2f}' for v in r['local'])} | "
            f"{' / '.join(f'{v:.2f}' for v in r['ray'])} | "
            f"{' / '.join(f'x{v:.2f}' for v in r['ratios'])} | x{statistics.median(r['ratios']):.2f} | "
            f"x{r['cpu_ratio']:.2f} | "
            f"{min(r['loads']):.1f}-{max(r['loads']):.1f} |"
        )


def measure(job: Job, cores: int, runs: int) -> dict:
    """A job's cold run per backend, then ``runs`` warm pairs in alternating order."""
    print(f"\n{job.name} on {cores} core(s), {job.unit}:", flush=True)
    loads: list[float] = []
    cpu: dict[str, list[float]] = {"local": [], "ray": []}

    def once(backend: str, tag: str) -> float:
        before = load()
        loads.append(before)
        with CpuMeter() as meter:
            rate, stages = job.run(backend, f"{backend}{cores}-{tag}")
        used = meter.seconds
        if tag != "cold":
            cpu[backend].append(used)
        print(
            f"  {backend:5} {tag:5}: {rate:8.2f}  ({used:.1f} CPU-s, load average {before:.1f})",
            flush=True,
        )
        if stages:
            print(f"        {stages_line(stages)}", flush=True)
        return rate

    once("local", "cold")
    once("ray", "cold")
    local, on_ray = [], []
    for i in range(runs):
        order = ("local", "ray") if i % 2 == 0 else ("ray", "local")
        for backend in order:
            (local if backend == "local" else on_ray).append(once(backend, f"warm{i + 1}"))
        print(f"  pair {i + 1}: Ray / local x{on_ray[-1] / local[-1]:.2f}", flush=True)
    return {
        "cores": cores,
        "job": job.name,
        "unit": job.unit,
        "local": local,
        "ray": on_ray,
        "ratios": [r / lo for r, lo in zip(on_ray, local)],
        "loads": loads,
        "cpu_ratio": statistics.median(cpu["ray"]) / statistics.median(cpu["local"]),
    }


if __name__ == "__main__":
    main()
