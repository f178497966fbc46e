"""The Ray backend (``--backend ray``) against the local backend, on a real Ray instance.

The claim under test: the same files byte for byte and the same prediction rows, under the
same run identity, so a job started on one backend finishes on the other. A few real photos
x two shifts (one random, so the seed rule matters) x two levels keep it to seconds; the
Ray instance is the session's ``ray_cluster`` fixture (conftest.py). The kills of a worker
and of the driver, and the two-node cluster, are slow tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import kill_after_first_file

import robustlab
from robustlab.errors import EnvironmentProblem, InputError, MissingResourceError
from robustlab.workflows.generate import TEMP_SUFFIX, generate
from robustlab.execution.ray.placement import plan_placement
from robustlab.execution.ray.session import check_address
from robustlab.store import Store

SHIFTS = ["gaussian_noise", "brightness"]  # random and deterministic; neither compiles numba
LEVELS = [1, 3]
N_PHOTOS = 3


def _photos(samples_dir: Path, dest: Path, n: int) -> Path:
    """A flat folder of ``n`` real photos (hard links) and their labels.csv rows."""
    dest.mkdir(parents=True)
    lines = (samples_dir / "labels.csv").read_text().splitlines()
    rows = lines[1 : 1 + n]
    (dest / "labels.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    for r in rows:
        name = r.split(",")[0]
        os.link(samples_dir / name, dest / name)
    return dest


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*.JPEG"))}


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory) -> Path:
    return _photos(samples_dir, tmp_path_factory.mktemp("ray") / "photos", N_PHOTOS)


@pytest.fixture(scope="module")
def local_files(photos, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("local") / "out"
    generate("imagenet-c", photos, out, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    return _files(out)


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


@pytest.fixture(scope="module")
def local_run(photos, lite0, tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "local.duckdb"
    res = robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=SHIFTS,
        levels=LEVELS,
        db=db,
        workers=0,
        batch_size=4,
        progress=False,
    )
    return res.run_id, db, Store(db).predictions()


def test_generate_on_ray_writes_the_local_bytes_and_resumes_across_backends(
    ray_cluster, photos, local_files, tmp_path
):
    out = tmp_path / "ray"
    res = generate(
        "imagenet-c", photos, out, shifts=SHIFTS, levels=LEVELS, progress=False, backend="ray"
    )
    assert res.written == len(local_files) == N_PHOTOS * len(SHIFTS) * len(LEVELS)
    assert _files(out) == local_files
    assert res.stages["write"]["items"] == N_PHOTOS and res.stages["wall_s"] > 0
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runs"][-1]["backend"] == "ray" and manifest["runs"][-1]["status"] == "complete"
    # The backend is not part of the folder's identity: the local backend finishes a folder
    # Ray started, rewriting only what is missing (the other way: the driver-kill test).
    lost = sorted(out.rglob("*.JPEG"))[::3]
    for p in lost:
        p.unlink()
    again = generate(
        "imagenet-c", photos, out, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False
    )
    assert (again.written, again.skipped_existing) == (len(lost), len(local_files) - len(lost))
    assert _files(out) == local_files


# The default run keeps one placement of each of the two Ray evaluate tests (10-15 s each):
# here the declared GPU's (a CPU stage beside the model actor), in the kept-actor test the
# CPU's (the actor prepares its own tasks, in two lanes). The other two are `slow`.
@pytest.mark.parametrize(
    "device",
    [None, pytest.param("cpu", marks=pytest.mark.slow)],
    ids=["gpu-placement", "cpu-placement"],
)
def test_evaluate_on_ray_stores_the_local_rows_and_finishes_a_local_run(
    ray_cluster, photos, local_run, tmp_path, device
):
    """Ray finishes a run the local backend started (same run id) with the local rows,
    with the model actor on the declared GPU and with ``device="cpu"``."""
    import shutil

    run_id, db_local, local_rows = local_run
    db = tmp_path / "ray.duckdb"
    shutil.copy(db_local, db)
    keep = local_rows["sample_id"].iloc[0]
    with Store(db).connect() as con:  # all but one image's clean row: what a crash left
        con.execute("DELETE FROM predictions WHERE NOT (shift = 'clean' AND sample_id = ?)", [keep])
    res = robustlab.evaluate(
        "lite0",
        photos,
        suite="imagenet-c",
        shifts=SHIFTS,
        levels=LEVELS,
        db=db,
        batch_size=4,
        progress=False,
        backend="ray",
        device=device,
    )
    assert res.run_id == run_id and res.resumed
    assert res.n_written == len(local_rows) - 1
    pd.testing.assert_frame_equal(Store(db).predictions(), local_rows)
    stages = res.stages
    assert stages["prepare"]["items"] == N_PHOTOS
    assert stages["model"]["items"] == len(local_rows) - 1
    # The actor's model runs on the CPU (the declared GPU is not a CUDA device): it gets the
    # node's 2 CPUs as torch threads, as the local backend's model, not Ray's one.
    assert stages["model"]["threads"] == 2
    # ... computing two batches at once, one thread each (robustlab.execution.lanes), when the
    # driver knew the model was on the CPU (the declared GPU looks like one to the driver).
    assert stages["model"]["lanes"] == (2 if device == "cpu" else 1)
    # The one model actor's start-up (building lite0), a fixed cost of every Ray job.
    assert stages["actor start"]["items"] == 1 and stages["actor start"]["worker_s"] > 0
    assert Store(db).get_run(run_id)["status"] == "finished"


def test_mine_on_ray_keeps_what_mine_keeps_locally(ray_cluster, photos, tmp_path):
    """mine's surrogate evaluations run on Ray: the same runs, rows and kept images."""
    from robustlab.workflows.imagenet_d.mine import mine

    kw = dict(surrogates=["lite0"], include_clean=True, workers=0, progress=False)
    local = mine(photos, db=tmp_path / "local.duckdb", **kw)
    on_ray = mine(photos, db=tmp_path / "ray.duckdb", backend="ray", **kw)
    assert on_ray.run_ids == local.run_ids and on_ray.mining_id == local.mining_id
    cols = ["sample_id", "shift", "level", "lite0", "kept"]
    pd.testing.assert_frame_equal(on_ray.table[cols], local.table[cols])
    pd.testing.assert_frame_equal(
        Store(tmp_path / "ray.duckdb").predictions(), Store(tmp_path / "local.duckdb").predictions()
    )


@pytest.mark.parametrize(
    "device",
    [pytest.param(None, marks=pytest.mark.slow), "cpu"],
    ids=["gpu-placement", "cpu-placement"],
)
def test_kept_model_actors_serve_later_jobs_without_starting_again(
    ray_cluster, photos, lite0, local_run, tmp_path, device
):
    """Inside keep_model_actors (what mine uses), a second job with the same model pays no
    actor start: its actor and model were kept. Both store the local rows; the actors end
    with the block. With ``device="cpu"`` the kept actor prepares its own tasks (no CPU
    stage: ``prepare`` is still counted per task, by the actor)."""
    import ray

    from robustlab.execution.ray import actors

    _, _, local_rows = local_run
    kw = dict(
        suite="imagenet-c",
        shifts=SHIFTS,
        levels=LEVELS,
        batch_size=4,
        progress=False,
        device=device,
    )
    with actors.keep_model_actors():
        first = robustlab.evaluate(lite0, photos, db=tmp_path / "a.duckdb", backend="ray", **kw)
        second = robustlab.evaluate(lite0, photos, db=tmp_path / "b.duckdb", backend="ray", **kw)
        assert actors._KEPT is not None
        (hosts,) = actors._KEPT.values()
    assert actors._KEPT is None
    assert first.stages["actor start"]["items"] == 1
    assert "actor start" not in second.stages
    assert second.stages["model"]["items"] == len(local_rows)
    assert second.stages["prepare"]["items"] == N_PHOTOS
    # On the node's 2 CPUs the kept actor computes two batches at once, one thread each.
    assert second.stages["model"]["threads"] == 2
    assert second.stages["model"]["lanes"] == (2 if device == "cpu" else 1)
    for db in ("a.duckdb", "b.duckdb"):
        pd.testing.assert_frame_equal(Store(tmp_path / db).predictions(), local_rows)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(hosts[0].__ray_ready__.remote(), timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "robustlab.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_unreachable_address_is_one_line(photos, tmp_path, capsys):
    port = _free_port()
    with pytest.raises(EnvironmentProblem, match=f"cannot reach a Ray cluster at 127.0.0.1:{port}"):
        check_address(f"127.0.0.1:{port}")
    with pytest.raises(InputError, match="is not HOST:PORT"):
        check_address("my-head-node")
    proc = _cli(
        "generate",
        "imagenet-c",
        "--data",
        str(photos),
        "--out",
        str(tmp_path / "o"),
        "--shift",
        "brightness",
        "--backend",
        "ray",
        "--address",
        f"127.0.0.1:{port}",
    )
    assert proc.returncode == 3, proc.stderr
    assert "cannot reach a Ray cluster" in proc.stderr and "Traceback" not in proc.stderr
    assert "ray start --head" in proc.stderr  # the hint
    assert not (tmp_path / "o").exists()  # refused before anything was written
    from robustlab.cli import main

    code = main(
        [
            "evaluate",
            "lite0",
            "--data",
            str(photos),
            "--db",
            str(tmp_path / "r.duckdb"),
            "--address",
            "127.0.0.1:6379",
        ]
    )
    assert code == 2 and "add --backend ray" in capsys.readouterr().err


def test_missing_ray_install_names_the_extra(photos, tmp_path):
    """A Python without Ray (an import hook refuses it): one line naming the extra."""
    block = (
        "import sys\n"
        "class NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoRay())\n"
        "from robustlab.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            block,
            "generate",
            "imagenet-c",
            "--data",
            str(photos),
            "--out",
            str(tmp_path / "o"),
            "--backend",
            "ray",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "needs Ray" in proc.stderr and "pip install 'robustlab[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_placement_follows_the_cluster_resources():
    """What each stage asks Ray for, from ``ray.cluster_resources()``; what Ray cannot
    give is refused, never waited for."""
    gpu = plan_placement({"CPU": 16.0, "GPU": 4.0})
    assert (gpu.model_gpus, gpu.actors, gpu.model_cpus) == (1, 4, 1)
    # A CPU model: one actor per node (Ray Data spreads them), holding one CPU of it and
    # the smallest node's CPUs as torch threads, as the local backend's model has.
    cpu = plan_placement({"CPU": 8.0})
    assert (cpu.model_gpus, cpu.actors, cpu.model_cpus, cpu.model_threads) == (0, 1, 1, 8)
    two = plan_placement({"CPU": 12.0}, node_cpus=[4.0, 8.0])
    assert (two.actors, two.model_cpus, two.model_threads) == (2, 1, 4)
    assert plan_placement({"CPU": 8.0, "GPU": 2.0}, "cpu").model_gpus == 0
    # One CPU: an actor holding it would starve the decode tasks, so it takes none.
    assert plan_placement({"CPU": 1.0}).model_cpus == 0
    # synth has no CPU stage: a CPU actor takes its whole node, a GPU actor one CPU.
    synth = plan_placement({"CPU": 12.0}, cpu_stage=False, node_cpus=[4.0, 8.0])
    assert (synth.actors, synth.model_cpus, synth.model_threads, synth.model_gpus) == (2, 4, 4, 0)
    synth_gpu = plan_placement({"CPU": 2.0, "GPU": 2.0}, cpu_stage=False)
    assert (synth_gpu.actors, synth_gpu.model_cpus, synth_gpu.model_gpus) == (2, 1, 1)
    for cpu_stage in (True, False):
        with pytest.raises(MissingResourceError, match="asks for a GPU, but the Ray cluster"):
            plan_placement({"CPU": 8.0}, "cuda", cpu_stage=cpu_stage)
    with pytest.raises(MissingResourceError, match="no CPU for the decode and shift tasks"):
        plan_placement({"GPU": 1.0, "memory": 1e9})
    with pytest.raises(MissingResourceError, match="the Ray cluster has no CPU"):
        plan_placement({"GPU": 1.0}, cpu_stage=False)


@pytest.mark.slow
def test_cuda_on_a_cluster_without_gpus_fails_before_any_work(photos, tmp_path):
    """End to end on a Ray instance this machine starts (no GPU here): refused from the
    cluster's resources before the model loads, instead of Ray waiting forever."""
    db = tmp_path / "r.duckdb"
    proc = _cli(
        "evaluate",
        "lite0",
        "--data",
        str(photos),
        "--db",
        str(db),
        "--backend",
        "ray",
        "--device",
        "cuda",
        "--workers",
        "1",
        "--no-progress",
    )
    assert proc.returncode == 2, proc.stderr
    assert "asks for a GPU, but the Ray cluster has none" in proc.stderr
    assert "Traceback" not in proc.stderr and not db.exists()


# ----------------------------------------------------------------------------- slow: kills
def _ray_task_pids(name: str) -> list[int]:
    """Pids of this test run's Ray worker processes running a task named ``name``
    (Ray titles them ``ray::<task>``; idle ones ``ray::IDLE``)."""
    mine = _descendants(os.getpid())
    out = []
    for pid in mine:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("ray::") and name in cmd:
            out.append(pid)
    return out


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = set(), [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in found:
                found.add(c)
                todo.append(c)
    return found


def _kill_first_worker(name: str, stop: threading.Event, killed: list[int]) -> None:
    while not stop.is_set() and not killed:
        for pid in _ray_task_pids(name):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.01)


@pytest.mark.slow
def test_a_killed_worker_loses_nothing(ray_cluster, samples_dir, tmp_path, lite0):
    """SIGKILL of a Ray worker in the middle of a task: Ray retries it, the files and the
    rows are complete and identical to the local backend's, nothing duplicated."""
    photos = _photos(samples_dir, tmp_path / "p", 6)
    local = tmp_path / "local"
    generate("imagenet-c", photos, local, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    for stage, run in (
        (
            "_write_cells",
            lambda: generate(
                "imagenet-c",
                photos,
                tmp_path / "ray",
                shifts=SHIFTS,
                levels=LEVELS,
                progress=False,
                backend="ray",
            ),
        ),
        (
            "_prepare_cells",
            lambda: robustlab.evaluate(
                lite0,
                photos,
                suite="imagenet-c",
                shifts=SHIFTS,
                levels=LEVELS,
                db=tmp_path / "ray.duckdb",
                batch_size=4,
                progress=False,
                backend="ray",
            ),
        ),
    ):
        stop, killed = threading.Event(), []
        killer = threading.Thread(target=_kill_first_worker, args=(stage, stop, killed))
        killer.start()
        try:
            run()
        finally:
            stop.set()
            killer.join()
        assert killed, f"no {stage} worker was running to kill"
    assert _files(tmp_path / "ray") == _files(local)
    assert not list((tmp_path / "ray").rglob(f"*{TEMP_SUFFIX}"))
    rows = Store(tmp_path / "ray.duckdb").predictions()
    reference = tmp_path / "local.duckdb"
    robustlab.evaluate(
        lite0,
        photos,
        suite="imagenet-c",
        shifts=SHIFTS,
        levels=LEVELS,
        db=reference,
        workers=0,
        batch_size=4,
        progress=False,
    )
    pd.testing.assert_frame_equal(rows, Store(reference).predictions())


@pytest.mark.slow
def test_a_killed_driver_resumes_with_nothing_lost_or_duplicated(
    ray_cluster, samples_dir, tmp_path
):
    """SIGKILL of ``robustlab generate/evaluate --backend ray --address`` mid-run, then the
    same command: complete, identical to the local backend, no duplicate row."""
    photos = _photos(samples_dir, tmp_path / "p", 8)
    common = [
        "--shift",
        ",".join(SHIFTS),
        "--level",
        ",".join(map(str, LEVELS)),
        "--quiet",
        "--backend",
        "ray",
        "--address",
        ray_cluster,
    ]
    out = tmp_path / "ray"
    gen = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "generate",
        "imagenet-c",
        "--data",
        str(photos),
        "--out",
        str(out),
        *common,
    ]
    kill_after_first_file(gen, out, "*.JPEG")
    partial = len(list(out.rglob("*.JPEG")))
    assert 0 < partial < 8 * len(SHIFTS) * len(LEVELS)
    assert subprocess.run(gen, capture_output=True, timeout=300, check=False).returncode == 0
    local = tmp_path / "local"
    generate("imagenet-c", photos, local, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    assert _files(out) == _files(local) and not list(out.rglob(f"*{TEMP_SUFFIX}"))

    db = tmp_path / "ray.duckdb"
    ev = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "evaluate",
        "lite0",
        "--data",
        str(photos),
        "--suite",
        "imagenet-c",
        "--db",
        str(db),
        "--batch-size",
        "2",
        *common,
    ]
    total = 8 * (1 + len(SHIFTS) * len(LEVELS))
    proc = subprocess.Popen(ev, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = Store(db)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if store.exists() and 0 < store.count() < total - 4:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert 0 < store.count() < total
    done = subprocess.run(ev, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    keys = store.predictions(columns=["sample_id", "shift", "level"])
    assert len(keys) == total and not keys.duplicated().any()
    assert store.runs()["status"].tolist() == ["finished"]


# ----------------------------------------------------------------------------- slow: two nodes
def _using(folder: str) -> list[int]:
    """Pids of processes that name ``folder`` on their command line or hold a file in it
    (Ray's processes retitle themselves, but keep their session files open)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if folder in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                out.append(int(entry))
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}").startswith(folder):
                    out.append(int(entry))
                    break
        except OSError:
            continue
    return out


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ray start --head exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the Ray head did not open port {port}")


def _wait_for_cpus(address: str, cpus: int, env: dict, timeout: float = 120) -> None:
    probe = (
        f"import ray, time\nray.init(address={address!r}, logging_level='ERROR')\n"
        f"t = time.time()\nwhile ray.cluster_resources().get('CPU', 0) < {cpus} "
        f"and time.time() - t < {timeout}:\n    time.sleep(0.5)\n"
        "print(len(ray.nodes()), ray.cluster_resources().get('CPU', 0))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=timeout + 60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", f"{float(cpus)}"], done.stdout


@pytest.mark.slow
def test_two_nodes_started_with_ray_start(samples_dir, tmp_path, lite0):
    """The README's cluster recipe on one machine: ``ray start --head`` (no CPU of its own,
    as a head node often is) and a second ``ray start --address`` with 2 CPUs; robustlab
    on that cluster first refuses the CPU-less head in one line, then, with the worker
    node joined, writes the local backend's files and stores its rows."""
    import tempfile

    ray_bin = str(Path(sys.executable).with_name("ray"))
    if not Path(ray_bin).exists():
        pytest.skip(f"no `ray` command next to {sys.executable}")
    photos = _photos(samples_dir, tmp_path / "p", 4)
    # Unix socket paths must stay short: Ray's session folder lives under /tmp.
    temp = tempfile.mkdtemp(prefix="rl-ray-", dir="/tmp")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # No token authentication between these processes, whatever ~/.ray holds.
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    common = ["--block", "--temp-dir", temp, "--num-gpus", "0", "--disable-usage-stats"]
    nodes = [
        subprocess.Popen(
            [
                ray_bin,
                "start",
                "--head",
                "--port",
                str(port),
                "--num-cpus",
                "0",
                "--include-dashboard",
                "false",
                *common,
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        _wait_for_port(port, nodes[0])
        cells = [
            "--shift",
            ",".join(SHIFTS),
            "--level",
            ",".join(map(str, LEVELS)),
            "--quiet",
            "--backend",
            "ray",
            "--address",
            address,
        ]
        out = tmp_path / "ray"
        gen = [
            sys.executable,
            "-m",
            "robustlab.cli",
            "generate",
            "imagenet-c",
            "--data",
            str(photos),
            "--out",
            str(out),
            *cells,
        ]
        refused = subprocess.run(
            gen, capture_output=True, text=True, env=env, timeout=300, check=False
        )
        assert refused.returncode == 2, refused.stderr
        assert "the Ray cluster has no CPU for the decode and shift tasks" in refused.stderr
        assert "Traceback" not in refused.stderr

        nodes.append(
            subprocess.Popen(
                [ray_bin, "start", "--address", address, "--num-cpus", "2", *common],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        _wait_for_cpus(address, 2, env)
        done = subprocess.run(
            gen, capture_output=True, text=True, env=env, timeout=600, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "ray stages: write 4" in done.stdout
        local = tmp_path / "local"
        generate(
            "imagenet-c", photos, local, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False
        )
        assert _files(out) == _files(local)

        db = tmp_path / "ray.duckdb"
        ev = [
            sys.executable,
            "-m",
            "robustlab.cli",
            "evaluate",
            "lite0",
            "--data",
            str(photos),
            "--suite",
            "imagenet-c",
            "--db",
            str(db),
            "--batch-size",
            "4",
            *cells,
        ]
        done = subprocess.run(ev, capture_output=True, text=True, env=env, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        reference = tmp_path / "local.duckdb"
        robustlab.evaluate(
            lite0,
            photos,
            suite="imagenet-c",
            shifts=SHIFTS,
            levels=LEVELS,
            db=reference,
            workers=0,
            batch_size=4,
            progress=False,
        )
        pd.testing.assert_frame_equal(Store(db).predictions(), Store(reference).predictions())
    finally:
        # ``ray start --block`` stops the processes it started when it is terminated.
        for node in reversed(nodes):
            node.terminate()
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
        deadline = time.monotonic() + 30
        while _using(temp) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in _using(temp):  # stragglers of these two nodes only, by their id
            os.kill(pid, signal.SIGKILL)
        import shutil

        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow  # starts a Ray instance of its own (seconds) in a fresh interpreter
def test_own_ray_instance_runs_its_workers_at_the_callers_priority():
    """Ray demotes its workers by 15 niceness steps; in the instance robustlab starts, the
    workers (the CPU stage and the model actors: the job itself) keep the driver's
    priority, as the local backend's worker processes do."""
    pytest.importorskip("ray.data")
    code = (
        "import os, ray\n"
        "from robustlab.execution.ray.session import ray_session\n"
        "with ray_session(cpus=1):\n"
        "    task = ray.remote(lambda: os.nice(0))\n"
        "    print(os.nice(0), ray.get(task.remote()))\n"
    )
    # Its own temp dir, not /tmp/ray, which other Ray instances on the machine may use; a
    # short one: Ray's socket paths under it must fit in 107 bytes (pytest's tmp_path won't).
    temp = tempfile.mkdtemp(prefix="rlray-", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": temp, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    driver, worker = proc.stdout.split()
    assert worker == driver
