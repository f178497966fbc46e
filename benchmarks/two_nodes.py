"""Ray backend on one node and on two: generate and evaluate throughput, scaling efficiency.

Usage: python benchmarks/two_nodes.py [--images 48] [--runs 2] [--model lite0]

Both "nodes" run on THIS machine (two raylets, ``ray start --head --num-cpus 1`` and
``ray start --address HEAD --num-cpus 1``), so they share its cores: the numbers measure
what distributing a job over two Ray nodes costs (scheduling across raylets, objects
moved between two object stores, one model actor per node), not a real scale-out, which
needs two machines. Three set-ups, each with a cold job (not counted) then ``--runs`` warm
ones per job:

1. one node of 1 CPU (the head alone);
2. two nodes of 1 CPU each (the head and a second node);
3. one node of 2 CPUs (a fresh head): what the same two CPUs give without the split.

Scaling efficiency = throughput at two nodes / (2 x throughput at one node); "vs one node of
2 CPUs" = two nodes / set-up 3, the cost of the split itself.

The cluster gets a free port and its own temp dir (never Ray's default port 6379 or
/tmp/ray: other Ray instances on the machine are left alone), and at the end only the
processes of that cluster are stopped, by their ids (``ray stop`` would stop every Ray
process on the machine). Asserts nothing: the machine is shared and timings vary.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import make_folder

import robustlab
from robustlab.workflows.generate import generate
from robustlab.execution.ray.pipeline import stages_line
from robustlab.store import Store

# Ray's `ray start --head` turns on token authentication (~/.ray/auth_token); the second node
# and the driver must then use it too.
ENV = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0"}
STORE_BYTES = 500_000_000  # per node: both object stores share this machine's memory


def _psutil():
    """psutil, which Ray ships in its ``thirdparty_files`` (on ``sys.path`` once Ray is
    imported): robustlab does not depend on it."""
    import ray  # noqa: F401

    import psutil

    return psutil


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load() -> float:
    return os.getloadavg()[0]


class Cluster:
    """Ray nodes started with ``ray start`` on this machine, stopped by their process ids."""

    def __init__(self, temp_dir: Path):
        self.temp_dir, self.address = temp_dir, ""

    def _start(self, *args: str) -> None:
        common = ["--node-ip-address", "127.0.0.1", "--temp-dir", str(self.temp_dir)]
        cmd = ["ray", "start", *args, *common, "--object-store-memory", str(STORE_BYTES)]
        proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")

    def head(self, cpus: int) -> None:
        """A new head node on a free port (a stopped head's port may still be held)."""
        port = free_port()
        self.address = f"127.0.0.1:{port}"
        self._start(
            "--head",
            "--port",
            str(port),
            "--num-cpus",
            str(cpus),
            "--include-dashboard",
            "false",
            "--disable-usage-stats",
        )

    def add_node(self, cpus: int) -> None:
        self._start("--address", self.address, "--num-cpus", str(cpus))

    def processes(self) -> list:
        """Every process of this cluster: those naming its temp dir, and their children
        (workers, agents)."""
        psutil = _psutil()

        mine = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if str(self.temp_dir) in " ".join(proc.info["cmdline"] or []):
                    mine.append(proc)
            except psutil.Error:
                pass
        found = {p.pid: p for p in mine}
        for p in mine:
            try:
                found.update({c.pid: c for c in p.children(recursive=True)})
            except psutil.Error:
                pass
        return list(found.values())

    def stop(self, grace: float = 20.0) -> None:
        """SIGTERM to this cluster's processes, SIGKILL to those left after ``grace`` s."""
        psutil = _psutil()

        procs = self.processes()
        for p in procs:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=5)
        left = self.processes()
        if left:
            raise RuntimeError(f"Ray processes left running: {[p.pid for p in left]}")


def wait_nodes(ray, n: int, timeout: float = 120) -> None:
    t0 = time.time()
    while sum(1 for node in ray.nodes() if node.get("Alive")) < n:
        if time.time() - t0 > timeout:
            raise RuntimeError(f"fewer than {n} Ray nodes alive after {timeout:.0f} s")
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=48)
    ap.add_argument("--runs", type=int, default=2, help="warm runs per job and set-up")
    ap.add_argument("--model", default="lite0")
    ap.add_argument("--shifts", default="gaussian_noise,contrast,jpeg_compression")
    ap.add_argument("--levels", default="1,3,5")
    args = ap.parse_args()
    os.environ.update(RAY_AUTH_MODE="token", RAY_USAGE_STATS_ENABLED="0")
    import ray

    from robustlab.models import load_model

    shifts, levels = args.shifts.split(","), [int(x) for x in args.levels.split(",")]
    kw = {"shifts": shifts, "levels": levels, "progress": False}
    n_cells = len(shifts) * len(levels)
    work = Path(tempfile.mkdtemp(prefix="rl-2n-"))
    # a short path: Ray's socket paths under it must stay within the 107-byte limit
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="rl2n-", dir="/tmp")))
    data = make_folder(work / "photos", args.images)
    model = load_model(args.model, device="cpu")
    print(
        f"{args.images} images, cells {args.shifts} at {args.levels}, model {args.model}; "
        f"{os.cpu_count()} CPUs on this machine, all nodes on it; load average {load():.1f}",
        flush=True,
    )

    def run_generate(tag: str) -> tuple[float, dict | None]:
        out = work / f"gen-{tag}"
        seconds = _timed(lambda: generate("imagenet-c", data, out, backend="ray", **kw))
        shutil.rmtree(out)
        return args.images / seconds, None

    def run_evaluate(tag: str) -> tuple[float, dict | None]:
        db = work / f"{tag}.duckdb"
        res: dict = {}
        seconds = _timed(
            lambda: res.update(
                run=robustlab.evaluate(model, data, suite="imagenet-c", db=db, backend="ray", **kw)
            )
        )
        rows.setdefault(tag[0], Store(db).predictions())  # each set-up's first rows
        db.unlink()
        return args.images * (1 + n_cells) / seconds, res["run"].stages

    jobs = {"generate": (run_generate, "images/s"), "evaluate": (run_evaluate, "predictions/s")}
    results: dict[tuple[str, str], list[float]] = {}
    rows: dict[str, object] = {}
    loads: list[float] = []

    def measure(setup: str) -> None:
        print(f"\n{setup} ({ray.cluster_resources().get('CPU', 0):g} CPUs):", flush=True)
        for job, (fn, unit) in jobs.items():
            for i in range(args.runs + 1):
                tag = "cold" if i == 0 else f"warm{i}"
                before = load()
                loads.append(before)
                rate, stages = fn(f"{setups.index(setup)}{job}{tag}")
                print(f"  {job:8} {tag:5}: {rate:7.2f} {unit} (load average {before:.1f})")
                if stages:
                    print(f"           {stages_line(stages)}", flush=True)
                if i:
                    results.setdefault((setup, job), []).append(rate)

    logging.getLogger("ray").setLevel(logging.ERROR)
    setups = ("1 node x 1 CPU", "2 nodes x 1 CPU", "1 node x 2 CPUs")
    try:
        cluster.head(1)
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        measure(setups[0])
        cluster.add_node(1)
        wait_nodes(ray, 2)
        measure(setups[1])
        ray.shutdown()
        cluster.stop()
        cluster.head(2)
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        measure(setups[2])
    finally:
        ray.shutdown()
        cluster.stop()
        shutil.rmtree(cluster.temp_dir, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    # Where a cell runs must not change its row: every set-up stores the same predictions.
    same = [_equal(rows["0"], rows[k]) for k in ("1", "2")]
    print(f"\nevaluate's rows on 2 nodes, on 1 node x 2 CPUs = on 1 node x 1 CPU: {same}")
    print(
        f"load average {min(loads):.1f}-{max(loads):.1f} before the jobs, {load():.1f} at the end"
    )
    print(
        "| job | 1 node x 1 CPU | 2 nodes x 1 CPU | 1 node x 2 CPUs | scaling efficiency "
        "(2 nodes / 2 x 1 node) | 2 nodes / 1 node x 2 CPUs |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for job, (_, unit) in jobs.items():
        one, two, ref = (statistics.median(results[(s, job)]) for s in setups)
        runs = [" / ".join(f"{v:.2f}" for v in results[(s, job)]) for s in setups]
        print(
            f"| {job} ({unit}, median of {args.runs}) | {one:.2f} ({runs[0]}) | {two:.2f} "
            f"({runs[1]}) | {ref:.2f} ({runs[2]}) | {two / (2 * one):.0%} | x{two / ref:.2f} |"
        )


def _equal(a, b) -> bool:
    import pandas as pd

    try:
        pd.testing.assert_frame_equal(a, b)
    except AssertionError:
        return False
    return True


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
