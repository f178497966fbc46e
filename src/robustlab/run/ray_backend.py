"""The Ray backend: ``generate``, ``evaluate`` and ``synth`` spread over a Ray cluster.

Why it can give exactly the local backend's output: every cell draws from
``derive_seed(seed, sample_id, shift, level)``, so where and in which order a cell is made
does not matter, and this module runs the local backend's own functions on the workers
(:func:`robustlab.workflows.generate.process_sample` for a generated image, the runner's
:class:`~robustlab.run.tasks.TaskDataset` for the pixels the model sees, the model's
``predict_topk`` for the forward pass). Only the driver writes: the DuckDB store has one
writer, and the manifest one author.

The work is a Ray Data pipeline (Ray's streaming engine, no scheduler of our own):

* ``generate``: sample indices -> CPU tasks that decode, prepare, shift, encode and write
  each image's cells with the atomic write of the local backend -> outcomes streamed to
  the driver, which keeps the manifest. A task whose worker process dies is retried once,
  then its images are skipped as "a worker process crashed on it", as locally (a task
  holds a few images, :func:`task_size`; a rerun retries them).
* ``evaluate``: task indices -> CPU tasks that decode, prepare, shift and preprocess
  (uint8 pixels) -> an actor pool that holds the model (one actor per GPU, ``num_gpus=1``,
  when the cluster has GPUs; else one CPU actor per node, with the node's CPUs as torch
  threads, :class:`Placement`) -> predictions streamed to the driver, which builds and
  stores the rows with the local runner's code. With ``--shift-device`` the CPU tasks only
  decode and prepare (:class:`~robustlab.run.device_shifts.CleanTaskDataset`), and each
  actor applies the batched shifts, the JPEG round trip and the model's resize on its own
  device with the local runner's :class:`~robustlab.run.device_shifts.DeviceShifts`
  before predicting: per-image seed-rule generators make the pixels independent of which
  tasks share an actor's batch, so the rows are the local ``--shift-device`` run's.
* ``synth``: chunks of prompts (the local backend's batches) -> an actor pool of diffusion
  pipelines (one per GPU, else one per node with all its CPUs) that draw and write each
  chunk with the local backend's work unit -> outcomes streamed to the driver, which keeps
  the manifest.

Resuming is the local backend's: a rerun skips files that exist and rows that are stored,
so a killed driver or a lost worker costs only the work in flight. Which backend ran a
job is not part of its identity: a run started locally may be finished on Ray and back.

Resources are checked from ``ray.cluster_resources()`` before anything is submitted, since
Ray waits forever (with a warning) for a GPU or CPU the cluster does not have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robustlab.errors import EnvironmentProblem, InputError, MissingResourceError, RobustlabError

log = logging.getLogger(__name__)

RAY_HINT = "install it with: pip install 'robustlab[ray]'"
CONNECT_TIMEOUT_S = 5.0
# A worker process that dies is retried this many times before its image is given up.
TASK_RETRIES = 1
# Settings of a Ray instance robustlab starts on this machine. Ray raises its workers'
# niceness by 15 (``worker_niceness``) to keep its own daemons responsive; the workers are the
# job here (the local backend's processes run at the user's priority), and on a machine
# shared with other work the demoted workers lost most of their CPU to it: evaluate with a
# ResNet-50 at x0.41-0.72 of the local backend (benchmarks/README.md). A cluster started
# with ``ray start`` keeps its own setting (``RAY_worker_niceness=0 ray start ...``).
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0}


def require_ray():
    """The ``ray`` module with Ray Data, or a one-line error naming the extra to install."""
    try:
        import ray
        import ray.data  # the backend is built on Ray Data
    except ImportError as exc:
        raise MissingResourceError(
            f"--backend ray needs Ray (ray[data]), which is not installed ({exc.name or exc})",
            hint=RAY_HINT,
        ) from None
    return ray


def check_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Fail in seconds, in one line, when ``address`` does not answer.

    ``ray.init`` would retry an unreachable cluster for a long time before giving up with
    a traceback; a TCP connect to the head's port says the same at once. ``auto`` (the
    cluster this machine's ``ray start`` left a record of) is checked by Ray itself.
    """
    if address in ("auto", "local"):
        return
    text = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InputError(
            f"--address {address!r} is not HOST:PORT",
            hint="pass the address `ray start --head` printed, e.g. 10.0.0.5:6379",
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if isinstance(exc, socket.timeout):
            reason = f"no answer in {timeout:.0f} s"
        raise EnvironmentProblem(
            f"cannot reach a Ray cluster at {address}: {reason}",
            hint="start one with `ray start --head` and pass the address it prints, or leave "
            "out --address to run on a Ray instance on this machine",
        ) from None


def ray_running() -> bool:
    """Whether this process is already connected to Ray (a session of its own is open)."""
    import ray

    return ray.is_initialized()


@contextlib.contextmanager
def ray_session(address: str | None = None, cpus: int | None = None) -> Iterator[dict]:
    """Connect to a cluster (or start a Ray instance on this machine) for one job.

    Yields ``ray.cluster_resources()``. A Ray already initialised in this process (a user's
    own ``ray.init``, a test fixture) is used as it is and left running; an instance
    started here is shut down at the end, so a library call leaves no processes behind,
    and runs its workers at this process's priority (:data:`LOCAL_SYSTEM_CONFIG`).

    Args:
        address: ``HOST:PORT`` of a running cluster's head (``ray start --head``), ``auto``,
            or None for a new Ray instance on this machine.
        cpus: CPUs of that new instance (None: all); ignored for an existing cluster,
            whose own resources decide.
    """
    ray = require_ray()
    _quiet_ray()
    started = False
    if not ray.is_initialized():
        if address:
            check_address(address)
        kwargs: dict[str, Any] = {
            "address": address,
            "log_to_driver": False,
            "logging_level": logging.WARNING,
        }
        if not address:
            kwargs.update(
                num_cpus=cpus or None,
                include_dashboard=False,
                _system_config=dict(LOCAL_SYSTEM_CONFIG),
            )
        # Ray's C++ core would print a warning line per connection retry before the error.
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "error")
        try:
            ray.init(**kwargs)
        except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
            token = "token" in str(exc).lower()
            raise EnvironmentProblem(
                f"cannot connect to a Ray cluster at {address}: "
                + ("it asks for an authentication token" if token else _first_line(exc)),
                hint="export RAY_AUTH_MODE=token, with the head's ~/.ray/auth_token on this machine"
                if token
                else "check the address `ray start --head` printed",
            ) from None
        started = True
    try:
        yield dict(ray.cluster_resources())
    finally:
        if started:
            ray.shutdown()


def _quiet_ray() -> None:
    """Ray Data's per-dataset INFO lines and bars would bury robustlab's own progress."""
    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass(frozen=True)
class Placement:
    """Resources each stage asks Ray for, decided from what the cluster has.

    Attributes:
        model_gpus: GPUs per model actor (1 when the cluster has a GPU and the device
            allows it, else 0).
        model_cpus: CPUs per model actor. With a CPU stage beside it, 1 (0 on a node of one
            CPU: an actor holding the only CPU would starve the decode tasks forever);
            without one (``synth``), all of the smallest node's CPUs.
        actors: Size of the model actor pool: one per GPU, else one per node (Ray Data
            spreads the actors over the nodes).
        cpus: CPUs in the cluster (each decode/shift task takes one).
        model_threads: torch threads of a model actor whose model runs on the CPU: the
            CPUs of the smallest node, as the local backend's model has in its main
            process (Ray would give it one thread, ``OMP_NUM_THREADS=1``). While the
            decode tasks keep up, the model is the bottleneck and its threads use the cores
            the tasks leave idle. It also keeps the arithmetic the local backend's: a CPU
            forward pass's float sums, hence a diffusion pipeline's pixels, can change with
            the thread count. A model on a GPU keeps Ray's setting.
    """

    model_gpus: int
    model_cpus: int
    actors: int
    cpus: float
    model_threads: int = 0


def plan_placement(
    resources: dict,
    device: str | None = None,
    *,
    model: bool = True,
    cpu_stage: bool = True,
    node_cpus: Sequence[float] | None = None,
    shift_device: str | None = None,
) -> Placement:
    """Check the cluster can run the job and decide each stage's resources.

    Args:
        resources: ``ray.cluster_resources()``.
        device: The device asked for (None: a GPU when the cluster has one).
        model: Whether the job has a model stage (``generate`` has not).
        cpu_stage: Whether CPU map tasks run beside the model actors (``evaluate``; not
            ``synth``, whose actors may take every CPU of their node).
        node_cpus: CPUs of each live node (:func:`node_cpus`; None: one node holding all).
        shift_device: ``evaluate --shift-device`` (None: the exact path): the model actors
            apply the shifts, so ``cuda`` needs them on GPUs.

    Raises:
        MissingResourceError: no CPU for the map tasks, or a CUDA device (model or shift)
            asked for on a cluster without GPUs (Ray would wait forever for either).
        InputError: ``--shift-device cuda`` with ``--device cpu`` (the actors get no GPU),
            or a GPU index (each actor has one GPU of its own).
    """
    cpus = float(resources.get("CPU", 0))
    gpus = int(resources.get("GPU", 0))
    if cpus < 1:
        raise MissingResourceError(
            f"the Ray cluster has no CPU for the decode and shift tasks (it offers "
            f"{_describe(resources)})"
            if cpu_stage
            else f"the Ray cluster has no CPU (it offers {_describe(resources)})",
            hint="add a node with `ray start --address HEAD:PORT --num-cpus N`",
        )
    want = str(device or "auto")
    if not model:
        return Placement(0, 0, 0, cpus)
    if want.startswith("cuda") and gpus < 1:
        raise MissingResourceError(
            f"--device {want} asks for a GPU, but the Ray cluster has none (it offers "
            f"{_describe(resources)})",
            hint="leave out --device to run the model on a CPU, or add a GPU node",
        )
    _check_shift_device(str(shift_device or "cpu"), want, resources)
    nodes = [c for c in (node_cpus or [cpus]) if c >= 1] or [cpus]
    smallest = int(min(nodes))
    if gpus >= 1 and want != "cpu":
        return Placement(
            model_gpus=1,
            model_cpus=1 if cpus >= (2 if cpu_stage else gpus) else 0,
            actors=gpus,
            cpus=cpus,
            model_threads=smallest,
        )
    return Placement(
        model_gpus=0,
        model_cpus=(1 if smallest >= 2 else 0) if cpu_stage else smallest,
        actors=len(nodes),
        cpus=cpus,
        model_threads=smallest,
    )


def _check_shift_device(shift: str, device: str, resources: dict) -> None:
    """``--shift-device cuda`` runs on the model actors' GPUs: refuse it, before any work,
    where they get none (see :func:`plan_placement`)."""
    if not shift.startswith("cuda"):
        return
    if shift not in ("cuda", "cuda:0"):
        raise InputError(
            f"--shift-device {shift}: on Ray each model actor shifts on the one GPU it is given",
            hint="use --shift-device cuda",
        )
    if int(resources.get("GPU", 0)) < 1:
        raise MissingResourceError(
            f"--shift-device {shift} shifts on the model actors' GPUs, but the Ray cluster "
            f"has none (it offers {_describe(resources)})",
            hint="use --shift-device cpu, or add a GPU node",
        )
    if device == "cpu":
        raise InputError(
            f"--shift-device {shift} shifts on the model actors' GPUs, but --device cpu "
            "gives them none",
            hint="leave out --device, or use --shift-device cpu",
        )


def node_cpus() -> list[float]:
    """CPUs of each live node of the connected cluster (Ray's ``CPU`` resource)."""
    import ray

    return [
        float(n["Resources"].get("CPU", 0))
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
    ]


def _describe(resources: dict) -> str:
    keys = [k for k in ("CPU", "GPU") if k in resources] or ["nothing"]
    return ", ".join(f"{resources[k]:g} {k}" if k in resources else k for k in keys)


def _objects(values: Sequence) -> np.ndarray:
    """A 1-D object array (``np.array`` would try to stack equal-shaped arrays)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


_THREADS_SET: set[bool] = set()


def _one_thread(torch: bool) -> None:
    """One OpenCV (and torch) thread per task, once per worker process: Ray already runs
    one task per CPU. ``generate`` never needs torch, so its tasks do not import it."""
    if torch in _THREADS_SET:
        return
    _THREADS_SET.add(torch)
    if torch:
        from robustlab.run.tasks import worker_init

        worker_init(0)
        return
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover - OpenCV is a dependency
        pass


def _model_threads(threads: int, device: str) -> None:
    """torch threads of a model actor whose model runs on the CPU (see
    :attr:`Placement.model_threads`); a GPU model's actor keeps Ray's one thread."""
    if threads > 0 and str(device).startswith("cpu"):
        import torch

        torch.set_num_threads(int(threads))


def _ray_cause(exc: BaseException) -> BaseException | None:
    """The robustlab error a Ray exception carries from a worker, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RobustlabError):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__
    return None


@contextlib.contextmanager
def _worker_errors_as_ours():
    """Re-raise a worker's robustlab error (a full disk, weights a node lacks) as itself,
    so the CLI prints its one line instead of Ray's wrapped traceback."""
    try:
        yield
    except RobustlabError:
        raise
    except Exception as exc:
        cause = _ray_cause(exc)
        if cause is not None:
            raise cause from None
        raise


@dataclass
class StageTimes:
    """Worker time per pipeline stage, for the throughput summary (and the torch threads
    of a model stage's actors, which decide its speed on a CPU)."""

    items: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    threads: dict[str, int] = field(default_factory=dict)
    wall: float = 0.0

    def add(self, stage: str, n: int, seconds: float, threads: int | None = None) -> None:
        self.items[stage] = self.items.get(stage, 0) + int(n)
        self.seconds[stage] = self.seconds.get(stage, 0.0) + float(seconds)
        if threads is not None:
            self.threads[stage] = int(threads)

    def summary(self) -> dict[str, Any]:
        """``{stage: {items, worker_s, items_per_worker_s[, threads]}, wall_s}`` (rates per
        second)."""
        out: dict[str, Any] = {}
        for stage, n in self.items.items():
            s = self.seconds.get(stage, 0.0)
            out[stage] = {
                "items": n,
                "worker_s": round(s, 3),
                "items_per_worker_s": round(n / s, 2) if s > 0 else None,
            }
            if stage in self.threads:
                out[stage]["threads"] = self.threads[stage]
        out["wall_s"] = round(self.wall, 3)
        return out

    def line(self) -> str:
        return stages_line(self.summary())


def stages_line(summary: dict) -> str:
    """One line from :meth:`StageTimes.summary`: items and rate per stage, the model actors'
    start-up time, and the wall time."""
    parts = [
        f"{d['items']} actor start(s) in {d['worker_s']:.1f} s"
        if stage == "actor start"
        else f"{stage} {d['items']} in {d['worker_s']:.1f} worker-s"
        + (f" ({d['items_per_worker_s']:.1f}/s per worker)" if d["items_per_worker_s"] else "")
        + (f" [{d['threads']} torch threads]" if d.get("threads") else "")
        for stage, d in summary.items()
        if isinstance(d, dict)
    ]
    return f"ray stages: {'; '.join(parts)}; wall {summary.get('wall_s', 0):.1f} s"


def task_size(n_items: int, cpus: float) -> int:
    """Items per map task: about four tasks per CPU, at most 16 items each.

    One item per task would pay Ray's per-task cost (scheduling, an object per result:
    tens of ms) on every image, more than a small image's work; a few tasks per CPU still
    balance the load, and a task lost with its worker only redoes what it had not written.
    """
    return max(1, min(16, int(n_items // max(1.0, 4 * cpus))))


def _index_blocks(n: int, size: int):
    """A dataset of the indices ``0..n-1`` in blocks of ``size``: one map task each.

    Ray Data sizes blocks by bytes, so a few hundred small index rows became a single block,
    and every batch of it ran in one task after the other: the CPU stage used one core
    whatever the cluster had (generate on 2 cores: x0.53 of the local backend; one block per
    task: see benchmarks/README.md).
    """
    import ray.data

    return ray.data.from_items(
        [{"index": i} for i in range(n)], override_num_blocks=max(1, -(-n // size))
    )


def _map_tasks(ds, fn, size: int = 1, **kwargs):
    """``ds.map_batches(fn)`` as CPU tasks that a dead worker process retries only
    ``TASK_RETRIES`` times (Ray Data's default retries forever: an image that kills its
    worker every time would hang the run; locally it is skipped after two tries).

    ``max_retries`` has no named parameter in Ray Data 2.60 yet and goes through the
    deprecated ``**ray_remote_args`` (hence the upper bound on ray in pyproject.toml). Its
    remote arguments differ from the model actors', which also keeps Ray from fusing this
    stage into the actor stage, where decoding would run on the model's single actor.
    """
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return ds.map_batches(fn, batch_size=size, num_cpus=1, max_retries=TASK_RETRIES, **kwargs)


@contextlib.contextmanager
def _data_context(*, max_errored_blocks: int = 0, reserve: bool = True):
    """Ray Data settings for one pipeline, restored afterwards (the context is global).

    ``reserve=False`` turns off Ray Data's per-operator resource reservation, for a
    pipeline of one map stage: with it, a 2-CPU cluster ran that stage's tasks one at a
    time (8 tasks of 0.3 s: 2.14 s; without: 1.27 s). Pipelines with a model actor keep it,
    so the map tasks can never take the CPUs the actors need.
    """
    import ray.data

    ctx = ray.data.DataContext.get_current()
    keys = {
        "enable_progress_bars": False,
        "max_errored_blocks": max_errored_blocks,
        "op_resource_reservation_enabled": reserve,
    }
    old = {k: getattr(ctx, k) for k in keys}
    ctx.execution_options.preserve_order = False
    for k, v in keys.items():
        setattr(ctx, k, v)
    try:
        yield ctx
    finally:
        for k, v in old.items():
            setattr(ctx, k, v)


# --------------------------------------------------------------------------- generate
def _write_cells(batch: dict, *, samples: Sequence, job, process_sample: Callable) -> dict:
    """Map stage of ``generate``: the local backend's work unit on each sample."""
    _one_thread(torch=False)
    outcomes, seconds = [], []
    for i in batch["index"]:
        t0 = time.perf_counter()
        try:
            outcome: Any = process_sample(samples[int(i)], job)
        except RobustlabError as exc:  # a full disk: the driver stops the run
            outcome = exc
        outcomes.append(outcome)
        seconds.append(time.perf_counter() - t0)
    return {
        "index": np.asarray(batch["index"]),
        "outcome": _objects(outcomes),
        "seconds": np.asarray(seconds, dtype=np.float64),
    }


def generate_on_ray(
    samples: Sequence,
    job,
    collect: Callable,
    *,
    process: Callable,
    crashed: Callable,
    address: str | None = None,
    cpus: int | None = None,
) -> StageTimes:
    """Write every missing cell of ``samples`` on a Ray cluster.

    Args:
        samples: Sources to generate (the local backend's list).
        job: :class:`robustlab.workflows.generate._Job` (output folder, cells, protocol, seed...). The
            output folder must be a path every node sees (the same local disk or a shared
            file system) or an fsspec URL (:mod:`robustlab.outputs`: its filesystem and
            options travel with the job).
        collect: Called on the driver with each :class:`~robustlab.workflows.generate.SampleOutcome`.
        process: ``process(sample, job)``, the local backend's work unit (run on workers).
        crashed: ``crashed(sample)``, the outcome recorded for a sample whose worker died
            twice. Both come from :mod:`robustlab.workflows.generate`, which calls this function.
        address, cpus: See :func:`ray_session`.

    Returns:
        Worker time of the stage, for the throughput summary.
    """
    import functools

    times = StageTimes()
    started = time.perf_counter()
    with ray_session(address, cpus) as resources:
        placement = plan_placement(resources, model=False)
        seen: set[int] = set()
        # A block whose worker died twice is dropped, not fatal: its image is recorded as
        # skipped below, as the local pool does with an image that keeps killing workers.
        with _data_context(max_errored_blocks=-1, reserve=False), _worker_errors_as_ours():
            size = task_size(len(samples), placement.cpus)
            ds = _map_tasks(
                _index_blocks(len(samples), size),
                functools.partial(
                    _write_cells, samples=list(samples), job=job, process_sample=process
                ),
                size,
            )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                for i, outcome, sec in zip(batch["index"], batch["outcome"], batch["seconds"]):
                    if isinstance(outcome, BaseException):
                        raise outcome
                    seen.add(int(i))
                    times.add("write", 1, sec)
                    collect(outcome)
        for i, s in enumerate(samples):
            if i not in seen:
                collect(crashed(s))
    times.wall = time.perf_counter() - started
    return times


# --------------------------------------------------------------------------- evaluate
class _StartReport:
    """An actor's start-up seconds (building its model or pipeline), sent to the driver
    once, with the actor's first rows: a fixed cost every Ray job pays per actor, which the
    local backend, holding the model already, does not (benchmarks/README.md)."""

    def __init__(self, seconds: float):
        self.seconds, self.sent = float(seconds), False

    def column(self, n: int) -> np.ndarray:
        out = np.zeros(n, dtype=np.float64)
        if n and not self.sent:
            out[0], self.sent = self.seconds, True
        return out


def _prepare_cells(batch: dict, *, dataset) -> dict:
    """CPU stage of ``evaluate``: decode, prepare, shift and preprocess each task's cells
    (the local DataLoader workers' :meth:`TaskDataset.__getitem__`); with a shift device
    only decode and prepare (:class:`~robustlab.run.device_shifts.CleanTaskDataset`, whose
    payload dict travels as it is)."""
    _one_thread(torch=True)
    pixels, errors, measured, seconds = [], [], [], []
    for i in batch["index"]:
        t0 = time.perf_counter()
        _, item, errs, meas = dataset[int(i)]
        if isinstance(item, list):  # cells of different sizes (tasks.pack): one array each
            item = [t.numpy() for t in item]
        pixels.append(item.numpy() if hasattr(item, "numpy") else item)
        errors.append(list(errs))
        measured.append(list(meas))
        seconds.append(time.perf_counter() - t0)
    return {
        "index": np.asarray(batch["index"]),
        "pixels": _objects(pixels),
        "errors": _objects(errors),
        "measured": _objects(measured),
        "prepare_s": np.asarray(seconds, dtype=np.float64),
    }


class _Predictor:
    """Model stage of ``evaluate``: one model per actor, loaded from its spec and weights.

    The actor rebuilds the model where it runs (a pickled model would carry its weights
    through the object store, and a CUDA model cannot move between processes) and checks
    its weights hash against the driver's, so every node scores with the same weights.

    With ``shifter`` (the driver's :class:`~robustlab.run.device_shifts.DeviceShifts`) the
    CPU stage shipped clean photos: the actor applies the batched shifts, the JPEG round
    trip and the model's resize on its device first, after checking that its machine
    makes the pixels the run was named for (``shift_path``, the driver's
    :meth:`~robustlab.run.device_shifts.ShiftDevice.describe`).
    """

    def __init__(
        self,
        spec: str,
        weights: str | None,
        label_space,
        device: str | None,
        batch_size: int,
        weights_hash: str | None,
        topk: int,
        defences: dict,
        threads: int,
        inference=None,
        shifter=None,
        shift_path: dict | None = None,
    ):
        started = time.perf_counter()
        from robustlab.defences import defend
        from robustlab.models import load_model

        # Ray Data reports an exception in an actor's __init__ as the actor's death, and one
        # in a batch as its own error, both with only the error's text: kept and returned
        # with every batch instead, it reaches the driver as itself (a one-line error).
        self.failure: RobustlabError | None = None
        try:
            model = load_model(
                spec, weights=weights, device=device, label_space=label_space, batch_size=batch_size
            )
            if inference is not None:  # the driver's precision and compile (part of the run id)
                model.set_inference(inference)
            # The driver's test-time defences wrap the actor's model too (ten-crop averages its
            # views here; pixel defences already ran in the CPU stage, as in local workers).
            self.model = defend(model, **defences)
            if weights_hash is not None and self.model.weights_hash != weights_hash:
                raise InputError(
                    f"a Ray worker loaded {spec} with weights {self.model.weights_hash}, the "
                    f"driver with {weights_hash}",
                    hint="give every node the same weights file (a shared path)",
                )
            if shifter is not None:
                _check_shift_path(shifter.settings, shift_path)
            self.shifter = shifter
            # CPU shifts are tensor work on this actor's CPUs, as a CPU model's forward pass.
            on_cpu = shifter is not None and shifter.settings.type == "cpu"
            _model_threads(threads, "cpu" if on_cpu else self.model.input_device())
            self.batch_size = int(batch_size)
            self.topk = int(topk)
        except RobustlabError as exc:
            self.failure = exc
        self.start = _StartReport(time.perf_counter() - started)

    def _shift(self, batch: dict) -> tuple[list, list]:
        """Each task's cell images and errors: the CPU stage's, or (with a shift device)
        the batched shifts' of its clean photo, in the tasks' order."""
        pixels, errors = list(batch["pixels"]), [list(e) for e in batch["errors"]]
        if self.shifter is None:
            return pixels, errors
        items = zip((int(i) for i in batch["index"]), pixels, errors, batch["measured"])
        done = list(self.shifter.wrap(items))
        return [t for _, t, _, _ in done], [list(e) for _, _, e, _ in done]

    def _predict_sizes(self, arrays: list) -> tuple[np.ndarray, np.ndarray]:
        """Top-k probabilities and ids of every image of ``arrays`` (N x C x H x W pieces),
        in order; pieces of one size are batched together, each size on its own (images of
        different sizes cannot share a tensor, and a prediction does not depend on its
        batch)."""
        import torch

        rows = np.cumsum([0, *(len(a) for a in arrays)])
        probs_all = np.zeros((rows[-1], self.topk), dtype=np.float32)
        ids_all = np.zeros((rows[-1], self.topk), dtype=np.int32)
        by_size: dict[tuple, list[int]] = {}
        for k, a in enumerate(arrays):
            by_size.setdefault(tuple(a.shape[1:]), []).append(k)
        for members in by_size.values():
            parts = [arrays[k] for k in members]
            # Ray hands out read-only buffers: copy before torch takes them.
            images = (
                torch.cat(parts)
                if isinstance(parts[0], torch.Tensor)
                else torch.from_numpy(np.concatenate(parts))
            )
            at = np.concatenate([np.arange(rows[k], rows[k + 1]) for k in members])
            for start in range(0, len(images), self.batch_size):
                probs, ids = self.model.predict_topk(
                    images[start : start + self.batch_size], self.topk
                )
                where = at[start : start + self.batch_size]
                probs_all[where] = probs.numpy().astype(np.float32)
                ids_all[where] = ids.numpy().astype(np.int32)
        return probs_all, ids_all

    def __call__(self, batch: dict) -> dict:
        import torch

        n_tasks = len(batch["index"])
        if self.failure is None:
            t0 = time.perf_counter()
            pixels, errors = self._shift(batch)
            shift_s = time.perf_counter() - t0
        else:  # nothing to predict: the driver raises the failure
            pixels, errors, shift_s = [None] * n_tasks, [[] for _ in range(n_tasks)], 0.0
        # Every image in task order; a task whose cells differ in size (tasks.pack) sent a
        # list of single-image arrays.
        arrays = [a for p in pixels if p is not None for a in (p if isinstance(p, list) else [p])]
        t0 = time.perf_counter()
        probs_all = ids_all = None
        if arrays:
            probs_all, ids_all = self._predict_sizes(arrays)
        seconds = time.perf_counter() - t0
        n_images = np.asarray(
            [
                0 if p is None else sum(len(a) for a in p) if isinstance(p, list) else len(p)
                for p in pixels
            ]
        )
        row_probs, row_ids, at = [], [], 0
        for n in n_images:
            row_probs.append(None if n == 0 else probs_all[at : at + n])
            row_ids.append(None if n == 0 else ids_all[at : at + n])
            at += n
        share = n_images / max(1, at)  # each task's part of the batch's seconds
        return {
            "index": batch["index"],
            "errors": _objects(errors),
            "measured": batch["measured"],
            "prepare_s": batch["prepare_s"],
            "probs": _objects(row_probs),
            "ids": _objects(row_ids),
            "n_images": n_images,
            "threads": np.full(n_tasks, torch.get_num_threads()),
            "start_s": self.start.column(n_tasks),
            "model_s": share * seconds,
            "shift_s": share * shift_s,
            "failure": _objects([self.failure or ""] * n_tasks),
        }


def _check_shift_path(settings, shift_path: dict | None) -> None:
    """Refuse, in one line, an actor whose machine cannot shift as the run was named: no
    CUDA for ``--shift-device cuda`` (a node whose GPU torch cannot use), or another torch
    (the pixels would differ from those the run id stands for)."""
    import torch

    if settings.type == "cuda" and not torch.cuda.is_available():
        raise EnvironmentProblem(
            f"--shift-device {settings.device}: a Ray model actor on {socket.gethostname()} "
            f"was given a GPU, but its torch {torch.__version__} finds no CUDA device",
            hint="install a CUDA build of torch on the GPU nodes, or use --shift-device cpu",
        )
    here = settings.describe()
    if here != shift_path:
        raise InputError(
            f"a Ray worker would shift with {here}, the driver named the run for {shift_path}",
            hint="give every node the same torch version",
        )


def _defences_arg(model) -> dict:
    """The pixel defence and test-time augmentation objects of a defended model ({} for a
    plain one), for :func:`robustlab.defences.defend` on each actor."""
    pre = model.preprocessing
    return {"preprocess": getattr(pre, "pixels", None), "tta": getattr(pre, "tta", None)}


def _label_space_arg(model):
    """The model's label space by name when the registry knows it (a few bytes to each
    actor), else the object itself."""
    from robustlab.data.labels import get_label_space

    space = model.label_space
    try:
        return space.name if get_label_space(space.name) == space else space
    except (KeyError, ValueError, TypeError):
        return space


def predict_on_ray(
    dataset,
    model,
    *,
    batch_size: int,
    cells_per_task: float,
    topk: int,
    address: str | None = None,
    cpus: int | None = None,
    device: str | None = None,
    times: StageTimes | None = None,
    shifter=None,
) -> Iterator:
    """Run a task dataset through the CPU stage and the model on a Ray cluster.

    Args:
        dataset: :class:`~robustlab.run.tasks.TaskDataset` of the tasks still to do
            (with ``shifter``: its :meth:`~robustlab.run.device_shifts.DeviceShifts.dataset`).
        model: The driver's loaded model (its spec, weights and label space are rebuilt
            on each actor).
        batch_size: Images per forward pass.
        cells_per_task: Average cells per task, to size the batches of tasks sent to
            the model actors.
        topk: Classes stored per prediction.
        address, cpus: See :func:`ray_session`.
        device: The device asked for (None: a GPU when the cluster has one).
        times: Filled with each stage's worker time.
        shifter: :class:`~robustlab.run.device_shifts.DeviceShifts` for ``--shift-device``
            (the model actors apply the shifts), None for the exact path.

    Yields:
        ``(task index, errors, measured, probs (k, 5) or None, ids (k, 5) or None)``;
        row r of probs/ids belongs to the r-th cell of the task that worked.
    """
    import functools

    times = times if times is not None else StageTimes()
    started = time.perf_counter()
    with ray_session(address, cpus) as resources:
        settings = None if shifter is None else shifter.settings
        placement = plan_placement(
            resources,
            device,
            node_cpus=node_cpus(),
            shift_device=None if settings is None else settings.device,
        )
        import ray.data

        log.info(
            "ray: %g CPU(s), model on %s (%d actor(s))",
            placement.cpus,
            "a GPU each" if placement.model_gpus else f"{placement.model_threads} CPU threads",
            placement.actors,
        )
        tasks_per_batch = max(1, round(batch_size / max(1.0, cells_per_task)))
        with _data_context(), _worker_errors_as_ours():
            size = task_size(len(dataset), placement.cpus)
            ds = _map_tasks(
                _index_blocks(len(dataset), size),
                functools.partial(_prepare_cells, dataset=dataset),
                size,
            )
            predictor_args = (
                model.spec,
                model.weights_path,
                _label_space_arg(model),
                device,
                int(batch_size),
                model.weights_hash,
                int(topk),
                _defences_arg(model),
                placement.model_threads,
                getattr(model, "inference", None),
                shifter,
                None if settings is None else settings.describe(),
            )
            if _KEPT is not None and shifter is None:
                ds = _kept_model_stage(ds, placement, predictor_args, tasks_per_batch)
            else:
                ds = ds.map_batches(
                    _Predictor,
                    batch_size=tasks_per_batch,
                    fn_constructor_args=predictor_args,
                    compute=ray.data.ActorPoolStrategy(size=placement.actors),
                    num_gpus=placement.model_gpus,
                    num_cpus=placement.model_cpus,
                )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                failure = batch["failure"][0] if len(batch["index"]) else ""
                if isinstance(failure, BaseException):  # an actor that could not start
                    raise failure
                for j in range(len(batch["index"])):
                    times.add("prepare", 1, batch["prepare_s"][j])
                    if shifter is not None:
                        times.add("shift", int(batch["n_images"][j]), batch["shift_s"][j])
                    times.add(
                        "model",
                        int(batch["n_images"][j]),
                        batch["model_s"][j],
                        int(batch["threads"][j]),
                    )
                    if batch["start_s"][j] > 0:  # after the stages: the line leads with them
                        times.add("actor start", 1, batch["start_s"][j])
                    yield (
                        int(batch["index"][j]),
                        batch["errors"][j],
                        batch["measured"][j],
                        batch["probs"][j],
                        batch["ids"][j],
                    )
    times.wall = time.perf_counter() - started


# ------------------------------------------------------- model actors kept across jobs
# Placement -> the model actors of the open :func:`keep_model_actors` block (None: no block).
_KEPT: dict[tuple, list] | None = None


@contextlib.contextmanager
def keep_model_actors(address: str | None = None, cpus: int | None = None) -> Iterator[None]:
    """Inside the block, the ``evaluate`` jobs this process runs on Ray share their model
    actors, and one Ray session (:func:`ray_session`, same arguments).

    A Ray Data actor pool lives for one dataset, so each job started its model actor
    afresh: a new process importing torch, timm and robustlab, then building the model,
    4-5 s per job on 2 cores (benchmarks/README.md), paid again by every surrogate of a
    ``mine``. Here the actors (:class:`_ModelHost`) are plain Ray actors owned by this
    process: started once, they keep every model they built, so a later job with the same
    model and settings pays nothing and one with another model pays its build only. They
    end with the block (or with this process). Jobs with a shift device keep their own
    pools (their actors hold the job's shifter, whose tasks differ per job). Nested
    blocks are one block.
    """
    global _KEPT
    if _KEPT is not None:
        yield
        return
    with ray_session(address, cpus):
        _KEPT = {}
        try:
            yield
        finally:
            import ray

            pools, _KEPT = _KEPT, None
            for hosts in pools.values():
                for host in hosts:
                    with contextlib.suppress(Exception):
                        ray.kill(host)


class _ModelHost:
    """A model actor kept across jobs (:func:`keep_model_actors`): one :class:`_Predictor`
    per distinct set of its arguments, built by the first batch that needs it and kept."""

    def __init__(self):
        self.predictors: dict[str, _Predictor] = {}

    def predict(self, key: str, args: list, batch: dict) -> dict:
        """``batch`` through the predictor of ``key``; ``args`` holds the object reference
        of its arguments (in a list, so Ray fetches them only when the predictor is new)."""
        predictor = self.predictors.get(key)
        if predictor is None:
            import ray

            predictor = self.predictors[key] = _Predictor(*ray.get(args[0]))
        return predictor(batch)


def _to_host(batch: dict, *, hosts: list, key: str, args: list) -> dict:
    """Model stage of a job inside :func:`keep_model_actors`: hand the batch to a kept
    model actor (by its first task, so the actors share the batches) and wait for it."""
    import ray

    host = hosts[int(batch["index"][0]) % len(hosts)]
    return ray.get(host.predict.remote(key, args, batch))


def _kept_model_stage(ds, placement: Placement, predictor_args: tuple, tasks_per_batch: int):
    """``ds`` through the kept model actors of ``placement`` (started now if this is the
    first job that needs them), with the resources :class:`_Predictor`'s pool would take.

    The stage's own tasks only wait for an actor: they take no CPU of the cluster."""
    import hashlib

    import ray
    import ray.data
    from ray import cloudpickle

    assert _KEPT is not None
    shape = (placement.model_cpus, placement.model_gpus, placement.actors)
    hosts = _KEPT.get(shape)
    if hosts is None:
        host = ray.remote(_ModelHost).options(
            num_cpus=placement.model_cpus,
            num_gpus=placement.model_gpus,
            scheduling_strategy="SPREAD",
        )
        hosts = _KEPT[shape] = [host.remote() for _ in range(placement.actors)]
    key = hashlib.sha256(cloudpickle.dumps(predictor_args)).hexdigest()
    # Two tasks per actor: one batch waits at the actor while the other runs. Without a
    # bound, tasks that take no CPU are all started at once, each in a Ray worker process
    # of its own that first imports Ray Data.
    return ds.map_batches(
        _to_host,
        batch_size=tasks_per_batch,
        fn_kwargs={"hosts": hosts, "key": key, "args": [ray.put(predictor_args)]},
        num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=2 * len(hosts)),
    )


# --------------------------------------------------------------------------- synth
class _Synthesizer:
    """Model stage of ``synth``: one diffusion pipeline per actor, loaded from the
    checkpoint folder where the actor runs (a pipeline is gigabytes: paths travel, weights
    do not), checked against the driver's fingerprint of that folder. Each batch is drawn
    and written by the local backend's work unit (``draw``) on the chunk the local backend
    would draw in one pipeline call (a diffusion pipeline's pixels depend on which prompts
    share its batch, by a unit here and there), so the files are the same bytes."""

    def __init__(
        self,
        checkpoint: str,
        fingerprint: str,
        pipeline_args: dict,
        threads: int,
        chunks: Sequence[Sequence],
        out_root: str,
        settings: dict,
        draw: Callable,
    ):
        started = time.perf_counter()
        from pathlib import Path

        from robustlab.shifts.generative.text2image import TextToImage

        self.pipeline = TextToImage(checkpoint, **pipeline_args)
        _model_threads(threads, self.pipeline.device)
        if self.pipeline.fingerprint != fingerprint:
            raise InputError(
                f"a Ray worker found another checkpoint at {checkpoint} (fingerprint "
                f"{self.pipeline.fingerprint}, the driver's {fingerprint})",
                hint="give every node the same checkpoint folder (a shared path)",
            )
        self.chunks, self.out_root = chunks, Path(out_root)
        self.settings, self.draw = dict(settings), draw
        self.record = self.pipeline.describe()
        self.start = _StartReport(time.perf_counter() - started)

    def __call__(self, batch: dict) -> dict:
        import json

        import torch

        t0 = time.perf_counter()
        done = [
            pair
            for i in batch["index"]
            for pair in self.draw(self.pipeline, self.chunks[int(i)], self.out_root, self.settings)
        ]
        share = (time.perf_counter() - t0) / max(1, len(done))
        return {
            "file": _objects([f for f, _ in done]),
            # "" for an image written: Ray Data turns None in an object column into NaN
            "reason": _objects([r or "" for _, r in done]),
            "seconds": np.full(len(done), share, dtype=np.float64),
            "pipeline": _objects([json.dumps(self.record, default=str)] * len(done)),
            "threads": np.full(len(done), torch.get_num_threads()),
            "start_s": self.start.column(len(done)),
        }


def synth_on_ray(
    items: Sequence,
    checkpoint: str,
    fingerprint: str,
    out_root: str,
    settings: dict,
    *,
    draw: Callable,
    collect: Callable,
    placement: Placement,
    batch_size: int,
    pipeline_args: dict,
) -> tuple[StageTimes, dict | None]:
    """Draw ``items`` with one pipeline per actor on the connected Ray cluster.

    The actors write the images (``out_root`` must be a path every node sees) with the
    local backend's atomic write; the driver only counts, so the caller's manifest and
    resume work as locally: a rerun skips the files that exist.

    Args:
        items: :class:`~robustlab.workflows.imagenet_d.synth.prompts.PromptItem` of the images still missing.
        checkpoint: The checkpoint folder, the same path on every node.
        fingerprint: The driver's fingerprint of it (a node with other weights is refused).
        out_root: The output folder.
        settings: Diffusion settings (steps, guidance, size, negative prompt).
        draw: ``draw(pipeline, chunk, out_root, settings) -> [(file, reason or None)]``,
            the local backend's work unit (:func:`robustlab.workflows.imagenet_d.synth.run.draw_chunk`).
        collect: Called on the driver with ``(file, reason or None)`` per image.
        placement: From :func:`plan_placement` on this cluster (``model=True``).
        batch_size: Prompts per pipeline call: ``items`` are cut into chunks of that many
            as the local backend cuts them, and each chunk is one call on one actor.
        pipeline_args: ``device``, ``dtype``, ``scheduler`` of
            :class:`~robustlab.shifts.generative.text2image.TextToImage`.

    Returns:
        The stage's worker time, and the pipeline's record (None when nothing ran).
    """
    import json

    import ray.data

    times = StageTimes()
    started = time.perf_counter()
    described = None
    log.info(
        "ray: %d pipeline actor(s), %s",
        placement.actors,
        "a GPU each" if placement.model_gpus else f"{placement.model_threads} CPU thread(s) each",
    )
    # One stage of actors and nothing to reserve for: as generate, no per-operator reservation.
    chunks = [list(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
    with _data_context(reserve=False), _worker_errors_as_ours():
        ds = _index_blocks(len(chunks), 1).map_batches(
            _Synthesizer,
            batch_size=1,
            fn_constructor_args=(
                checkpoint,
                fingerprint,
                dict(pipeline_args),
                placement.model_threads,
                chunks,
                out_root,
                dict(settings),
                draw,
            ),
            compute=ray.data.ActorPoolStrategy(size=placement.actors),
            num_gpus=placement.model_gpus,
            num_cpus=placement.model_cpus,
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for file, reason, sec, record, threads, start in zip(
                batch["file"],
                batch["reason"],
                batch["seconds"],
                batch["pipeline"],
                batch["threads"],
                batch["start_s"],
            ):
                if described is None:
                    described = json.loads(record)
                times.add("synth", 1, sec, int(threads))
                if start > 0:
                    times.add("actor start", 1, start)
                collect(str(file), str(reason) or None)
    times.wall = time.perf_counter() - started
    return times, described


__all__ = [
    "Placement",
    "StageTimes",
    "check_address",
    "generate_on_ray",
    "plan_placement",
    "predict_on_ray",
    "ray_running",
    "ray_session",
    "require_ray",
    "stages_line",
    "synth_on_ray",
]
