"""The model actor of ``evaluate`` on Ray: it rebuilds the driver's model where it runs,
applies the shift device's batched shifts when the run has one, and predicts."""

from __future__ import annotations

import socket
import time

import numpy as np

from robustlab.errors import EnvironmentProblem, InputError, RobustlabError
from robustlab.execution.lanes import LaneThreads, release_free_memory
from robustlab.execution.ray.pipeline import StartReport, model_threads, objects


class Predictor:
    """Model stage of ``evaluate``: one model per actor, loaded from its spec and weights.

    The actor rebuilds the model where it runs (a pickled model would carry its weights
    through the object store, and a CUDA model cannot move between processes) and checks
    its weights hash against the driver's, so every node scores with the same weights.

    With ``shifter`` (the driver's :class:`~robustlab.execution.device_shifts.DeviceShifts`) the
    CPU stage shipped clean photos: the actor applies the batched shifts, the JPEG round
    trip and the model's resize on its device first, after checking that its machine
    makes the pixels the run was named for (``shift_path``, the driver's
    :meth:`~robustlab.execution.device_shifts.ShiftDevice.describe`).
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
        lanes: int = 1,
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
            computes_on = "cpu" if on_cpu else self.model.input_device()
            model_threads(threads, computes_on)
            # Batches side by side (Ray's max_concurrency), each on its share of the threads.
            self.lanes = LaneThreads(threads if computes_on.startswith("cpu") else 0, lanes)
            self.batch_size = int(batch_size)
            self.topk = int(topk)
        except RobustlabError as exc:
            self.failure = exc
        self.start = StartReport(time.perf_counter() - started)

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
        lanes = 1
        if self.failure is None:
            self.lanes.apply()
            lanes = self.lanes.lanes
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
        if lanes > 1:  # each lane thread has a malloc arena of its own
            release_free_memory()
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
            "errors": objects(errors),
            "measured": batch["measured"],
            "prepare_s": batch["prepare_s"],
            "probs": objects(row_probs),
            "ids": objects(row_ids),
            "n_images": n_images,
            # The actor's threads: each lane's, times the lanes (robustlab.execution.lanes).
            "threads": np.full(n_tasks, torch.get_num_threads() * lanes),
            "lanes": np.full(n_tasks, lanes),
            "start_s": self.start.column(n_tasks),
            "model_s": share * seconds,
            "shift_s": share * shift_s,
            "failure": objects([self.failure or ""] * n_tasks),
        }


def prepare_tasks(batch: dict, dataset) -> dict:
    """Decode, prepare, shift and preprocess each task of ``batch["index"]`` (the local
    backend's :meth:`TaskDataset.__getitem__`); with a shift device only decode and prepare
    (:class:`~robustlab.execution.device_shifts.CleanTaskDataset`, whose payload dict travels as
    it is). The model stage's input: pixels, errors, measured attributes, seconds per task."""
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
    return _task_columns(batch["index"], pixels, errors, measured, seconds)


def prepared(batch: dict, dataset, failure) -> dict:
    """``batch`` of task indices with its tasks prepared; nothing prepared (empty columns)
    when the actor could not start (the driver raises its failure)."""
    if failure is None:
        return prepare_tasks(batch, dataset)
    n = len(batch["index"])
    errors: list = [[] for _ in range(n)]
    measured: list = [[] for _ in range(n)]
    return _task_columns(batch["index"], [None] * n, errors, measured, [0.0] * n)


def _task_columns(index, pixels: list, errors: list, measured: list, seconds: list) -> dict:
    """The model stage's input columns, one row per task."""
    return {
        "index": np.asarray(index),
        "pixels": objects(pixels),
        "errors": objects(errors),
        "measured": objects(measured),
        "prepare_s": np.asarray(seconds, dtype=np.float64),
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
