"""``evaluate`` on Ray: CPU tasks prepare each task's pixels, model actors predict, the
driver stores the rows with the local runner's code."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from robustlab.execution.lanes import default_lanes
from robustlab.execution.ray import actors
from robustlab.execution.ray.pipeline import (
    StageTimes,
    data_context,
    index_blocks,
    map_tasks,
    one_thread,
    task_size,
    worker_errors_as_ours,
)
from robustlab.execution.ray.placement import plan_placement
from robustlab.execution.ray.predictor import Predictor, prepare_tasks
from robustlab.execution.ray.session import node_cpus, ray_session


log = logging.getLogger(__name__)


def _prepare_cells(batch: dict, *, dataset) -> dict:
    """CPU stage of ``evaluate`` (a model on a GPU, or a shift device): decode, prepare,
    shift and preprocess each task's cells on one thread (:func:`prepare_tasks`)."""
    one_thread(torch=True)
    return prepare_tasks(batch, dataset)


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
    lanes: int | None = None,
) -> Iterator:
    """Run a task dataset through the CPU stage and the model on a Ray cluster.

    Args:
        dataset: :class:`~robustlab.execution.tasks.TaskDataset` of the tasks still to do
            (with ``shifter``: its :meth:`~robustlab.execution.device_shifts.DeviceShifts.dataset`).
        model: The driver's loaded model (its spec, weights and label space are rebuilt
            on each actor).
        batch_size: Images per forward pass.
        cells_per_task: Average cells per task, to size the batches of tasks sent to
            the model actors.
        topk: Classes stored per prediction.
        address, cpus: See :func:`ray_session`.
        device: The device asked for (None: a GPU when the cluster has one).
        times: Filled with each stage's worker time.
        shifter: :class:`~robustlab.execution.device_shifts.DeviceShifts` for ``--shift-device``
            (the model actors apply the shifts), None for the exact path.
        lanes: Batches a model actor on the CPU computes at once
            (:mod:`robustlab.execution.lanes`; None: as the local backend decides, with the
            actor's threads).

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
        # A kept model actor on the CPU prepares its own tasks between its forward passes,
        # as the local backend's main process does (robustlab.execution.lifeline.default_workers):
        # CPU tasks beside a forward pass on every core of the node cost about twice their
        # CPU time (mine on 2 cores: x0.63 of local with them, x0.93 without). A fresh actor
        # pool keeps the CPU stage: it prepares the first tasks while the actor builds its
        # model (3-4 s), which hid more than it cost (lite0: x0.84 with it, x0.74 without).
        kept = actors.keeping() and shifter is None
        fused = kept and placement.model_gpus == 0
        # A model on the CPU computes two batches at once, as locally (robustlab.execution.lanes).
        on_cpu = placement.model_gpus == 0 and shifter is None
        lanes = default_lanes(model, lanes, threads=placement.model_threads) if on_cpu else 1
        with data_context(), worker_errors_as_ours():
            if fused:
                ds = index_blocks(len(dataset), tasks_per_batch)
            else:
                size = task_size(len(dataset), placement.cpus)
                ds = map_tasks(
                    index_blocks(len(dataset), size),
                    functools.partial(_prepare_cells, dataset=dataset),
                    size,
                )
            predictor_args = _predictor_args(
                model, device, batch_size, topk, placement, shifter, lanes
            )
            if kept:
                ds = actors.kept_model_stage(
                    ds,
                    placement,
                    predictor_args,
                    tasks_per_batch,
                    dataset if fused else None,
                    lanes,
                )
            else:
                ds = ds.map_batches(
                    Predictor,
                    batch_size=tasks_per_batch,
                    fn_constructor_args=predictor_args,
                    compute=ray.data.ActorPoolStrategy(
                        size=placement.actors,
                        max_concurrent_calls_per_actor=lanes,
                        enable_true_multi_threading=lanes > 1,
                    ),
                    num_gpus=placement.model_gpus,
                    num_cpus=placement.model_cpus,
                )
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                yield from _items(batch, times, shifted=shifter is not None)
    times.wall = time.perf_counter() - started


def _predictor_args(
    model, device, batch_size: int, topk: int, placement, shifter, lanes: int = 1
) -> tuple:
    """The arguments each model actor (:class:`~robustlab.execution.ray.predictor.Predictor`)
    is built from: what rebuilds the driver's model where the actor runs, not the model."""
    settings = None if shifter is None else shifter.settings
    return (
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
        int(lanes),
    )


def _items(batch: dict, times: StageTimes, *, shifted: bool) -> Iterator:
    """The driver's items of one batch from the model stage (see :func:`predict_on_ray`),
    each stage's worker time added to ``times``; an actor that could not start raises its
    error here."""
    failure = batch["failure"][0] if len(batch["index"]) else ""
    if isinstance(failure, BaseException):  # an actor that could not start
        raise failure
    for j in range(len(batch["index"])):
        times.add("prepare", 1, batch["prepare_s"][j])
        if shifted:
            times.add("shift", int(batch["n_images"][j]), batch["shift_s"][j])
        times.add(
            "model",
            int(batch["n_images"][j]),
            batch["model_s"][j],
            int(batch["threads"][j]),
            int(batch["lanes"][j]),
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
