"""What each stage of a Ray job asks the cluster for, checked against what it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from robustlab.errors import InputError, MissingResourceError


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


def _describe(resources: dict) -> str:
    keys = [k for k in ("CPU", "GPU") if k in resources] or ["nothing"]
    return ", ".join(f"{resources[k]:g} {k}" if k in resources else k for k in keys)
