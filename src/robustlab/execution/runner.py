"""The streaming runner: tasks -> workers -> batched forward pass -> a transaction every 2 s.

Memory stays flat as the dataset grows: the sample list is the only per-image state
(a path and a label each); images live only inside the bounded DataLoader prefetch queue
and the current batch; predictions go to the database as they come, in one transaction
every :data:`~robustlab.execution.writer.WRITE_INTERVAL_S` seconds at most
(:class:`~robustlab.execution.writer.PredictionWriter`). Ctrl-C stores
every predicted row; a crash loses at most the rows not yet written (the predictions of
the last interval, the current batch and the prefetched tasks), and a rerun skips every
(sample, shift, level) already stored for the same run id.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from robustlab.cells import Cell, as_cells
from robustlab.errors import InputError
from robustlab.execution.bookkeeping import RunSummary, after_failure, plan_tasks, throughput
from robustlab.execution.lanes import ForwardLanes, default_lanes, forward_lanes
from robustlab.execution.local_workers import surviving_worker_deaths
from robustlab.execution.progress import CellProgress, throughput_line
from robustlab.execution.tasks import NOTE, CellImages, Task, TaskDataset, model_input
from robustlab.execution.writer import PredictionWriter
from robustlab.store import RunRecord, Store

log = logging.getLogger(__name__)

TOPK = 5


@dataclass
class RunOptions:
    """How the work is executed (none of this changes a predicted class).

    Attributes:
        batch_size: Images per forward pass and per database transaction.
        workers: DataLoader worker processes (0: in the main process).
        prefetch: Tasks each worker prepares ahead, at least (the local backend raises
            it until the workers hold a batch ahead:
            :func:`robustlab.execution.local_workers.local_prefetch`).
        cells_per_task: Cells produced per decoded image in one task (0: all of a
            sample's cells in one task). One task per sample keeps task costs even, so
            in-order delivery never waits behind a slow task; a bound only matters for
            suites whose cells do not fit in a worker's memory at once.
        backend: ``local`` (a DataLoader over worker processes, the model in this
            process) or ``ray`` (:mod:`robustlab.execution.ray`).
        address: Ray cluster to use (``HOST:PORT``); None starts a Ray instance here with
            ``workers`` CPUs (0: all).
        device: The device asked for (Ray places the model on a GPU when it may).
        progress: Show per-cell progress bars.
        shift_device: A :class:`robustlab.execution.device_shifts.ShiftDevice`: workers only
            decode, and the corruptions run batched on that device (on Ray: in each model
            actor, on its device). Other pixels than the exact path, so the caller gives
            such a run its own identity. None: the exact path.
        lanes: Batches a CPU model computes at once, each on its share of torch's
            threads (:mod:`robustlab.execution.lanes`); None: two for a torch model on the
            CPU with two threads or more, else one. The same batches, so the same
            top-5 classes; probabilities equal up to float rounding, as with another
            torch thread count.
    """

    batch_size: int = 32
    workers: int = 1
    prefetch: int = 2
    cells_per_task: int = 0
    backend: str = "local"
    address: str | None = None
    device: str | None = None
    progress: bool = True
    shift_device: Any = None
    lanes: int | None = None

    def __post_init__(self):
        if isinstance(self.workers, bool) or int(self.workers) < 0:
            raise InputError(
                f"workers must be 0 (in the main process) or more, got {self.workers!r}"
            )
        if int(self.batch_size) < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")


def _to_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


class Runner:
    """Evaluates one model on the cells of a suite and streams predictions to a store.

    Args:
        model: A loaded :class:`robustlab.models.Model`.
        samples: Source samples (sorted by id); each needs a ``label`` in ``labels``.
        labels: Label index per sample (same order as ``samples``).
        cells: (shift, level) cells to evaluate, clean included as ("clean", 0).
        images: Makes the pixels of each cell (on the fly or from a generated folder).
        store: The results database.
        record: The run row (its ``run_id`` decides what counts as already done).
        options: Execution options.
        transform: Image -> tensor (default: the model's uint8 pixels as the protocol's
            view says, :func:`robustlab.execution.tasks.model_input`).
    """

    def __init__(
        self,
        model,
        samples: Sequence,
        labels: Sequence[int],
        cells: Sequence[Cell],
        images: CellImages,
        store: Store,
        record: RunRecord,
        options: RunOptions,
        transform: Callable | None = None,
    ):
        self.model = model
        self.samples = samples
        self.labels = np.asarray(labels, dtype=np.int64)
        self.cells = list(as_cells(cells))
        self.images = images
        self.store = store
        self.record = record
        self.options = options
        self.transform = transform or _ModelTransform(model, getattr(images, "protocol", None))
        self._attributes: list[dict] = []  # measured attributes not yet stored
        self._predict_s = 0.0  # wall seconds with a forward pass (predict_topk) running
        self._lanes: ForwardLanes | None = None  # the forward passes of a local run
        self._notes: dict[str, str] = {}  # sample id -> why it is degenerate (evaluated)

    def _write_attributes(self) -> None:
        if self._attributes:
            self.store.write_attributes(self.record.run_id, self._attributes)
            self._attributes = []

    def run(self) -> RunSummary:
        started = time.perf_counter()
        tasks, done_per_cell, skipped, summary = self._plan()
        totals = {cell.stored: len(self.samples) for cell in self.cells}
        progress = CellProgress(totals, enabled=self.options.progress, done=done_per_cell)
        status = "failed"
        writer = None
        failure: BaseException | None = None
        try:
            dataset, shifter = self._dataset(tasks)
            writer = PredictionWriter(
                self.store,
                summary.run_id,
                on_written=lambda out: (
                    setattr(summary, "n_written", summary.n_written + len(out["shift"])),
                    progress.update(zip(out["shift"], out["level"])),
                ),
            )
            self._predict(dataset, tasks, skipped, progress, writer, summary, shifter)
            writer.close()
            self._write_attributes()
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except BaseException as exc:
            failure = exc
            raise
        finally:
            self._finish(summary, status, failure, writer, progress, skipped, started)
        if summary.notes:
            first = next(iter(sorted(summary.notes.items())))
            log.warning(
                "%d evaluated image(s) are degenerate, their predictions counted; first: %s: %s "
                "(all listed in the run record's notes)",
                len(summary.notes),
                *first,
            )
        log.info("%s", throughput_line(summary.throughput))
        return summary

    def _plan(self) -> tuple[list[Task], dict, dict[tuple[str, str], None], RunSummary]:
        """Start (or resume) the run's row: the tasks left, the done count per cell, the
        skips so far (by ``(sample id, reason)``) and the summary to fill."""
        run_id = self.record.run_id
        resumed = not self.store.start_run(self.record)
        tasks, done_per_cell, already = plan_tasks(
            self.samples, self.cells, self.store, run_id, self.options.cells_per_task
        )
        # Files the folder scan left out count as skips of this run too.
        skipped: dict[tuple[str, str], None] = dict.fromkeys(
            (str(a), str(b)) for a, b in self.record.skipped
        )
        n_known = 0
        if resumed:
            tasks, n_known = self._drop_known_skips(tasks, done_per_cell, skipped)
        summary = RunSummary(run_id, resumed, len(self.samples), n_already_done=already)
        if resumed:
            log.info(
                "resuming run %s: %d predictions already stored, %d tasks to do%s",
                run_id,
                already,
                len(tasks),
                f" ({n_known} known skips not retried)" if n_known else "",
            )
        return tasks, done_per_cell, skipped, summary

    def _dataset(self, tasks: list[Task]):
        """The task dataset the workers draw from, and the run's
        :class:`~robustlab.execution.device_shifts.DeviceShifts` (None on the exact path)."""
        dataset = TaskDataset(self.samples, tasks, self.images, self.transform)
        shifter = None
        if self.options.shift_device is not None:
            from robustlab.execution.device_shifts import DeviceShifts

            shifter = DeviceShifts(
                self.model.preprocessing,
                self.samples,
                tasks,
                self.images.protocol,
                self.images.seed,
                self.options.shift_device,
            )
            dataset = shifter.dataset(self.images)
        return dataset, shifter

    def _predict(self, dataset, tasks, skipped, progress, writer, summary, shifter) -> None:
        """Predict every task on the chosen backend and hand the rows to ``writer``."""
        if self.options.backend == "ray":
            if tasks:  # nothing left: no cluster to start
                self._run_on_ray(dataset, tasks, skipped, progress, writer, summary, shifter)
            return
        pending: list[tuple[Task, Any, list[int]]] = []
        lanes = default_lanes(self.model, self.options.lanes)
        with forward_lanes(lambda batch: self.model.predict_topk(batch, TOPK), lanes) as pool:
            self._lanes = pool
            try:
                self._run_local(dataset, tasks, skipped, progress, writer, pending, shifter)
                while pending:
                    self._flush(pending, self.options.batch_size, writer)
                for (probs, ids), rows in pool.ready(drain=True):
                    writer.put(self._rows(rows, probs, ids))
            except BaseException:
                # Ctrl-C or an error: the batches already predicted are stored all the same.
                for (probs, ids), rows in pool.finished():
                    writer.put(self._rows(rows, probs, ids))
                raise
            finally:
                self._predict_s += pool.busy_s

    def _finish(self, summary, status, failure, writer, progress, skipped, started) -> None:
        """The end of a run, whatever ended it: store the rows already predicted, close the
        bars, fill the summary and record the run's status. A cleanup error after a failure
        is logged (:func:`~robustlab.execution.bookkeeping.after_failure`), never raised over it."""
        run_id = summary.run_id
        if writer is not None:
            # Rows already predicted are written even on Ctrl-C or an error elsewhere.
            try:
                writer.close()
            except Exception as exc:  # noqa: BLE001 - never mask the original error
                if status == "finished":
                    raise
                after_failure(exc, failure, f"could not store the last predictions of run {run_id}")
        progress.close()
        summary.skipped = [list(k) for k in skipped]
        on_ray = self.options.backend == "ray"
        summary.throughput = throughput(
            summary.n_written,
            time.perf_counter() - started,
            None if on_ray else self._predict_s,
            None if on_ray else self.model.input_device(),
        )
        try:
            summary.notes = self.store.finish_run(
                run_id,
                status=status,
                n_samples=len(self.samples),
                skipped=summary.skipped,
                notes=self._notes,
            )
        except Exception as exc:  # noqa: BLE001 - never mask the original error
            if status == "finished":
                raise
            after_failure(exc, failure, f"could not record the end of run {run_id}")

    def _drop_known_skips(self, tasks, done_per_cell, skipped) -> tuple[list[Task], int]:
        """Tasks without the cells this run already skipped, and how many were dropped.

        A cell skip (``"<shift>/<level>: <reason>"``, e.g. an object touching every border
        cannot move) is a property of the cell's inputs, and those are part of the run id:
        the same run id gives the same skip, so a resume records it again (``skipped``,
        counted done) instead of recomputing it and printing its warning once more. Whole-
        sample errors (unreadable files) and missing generated files are retried: the user
        may have fixed them.
        """
        stored = self.store.get_run(self.record.run_id) or {}
        known: dict[tuple[str, str], str] = {}
        for row in stored.get("skipped") or []:
            if not isinstance(row, (list, tuple)) or len(row) != 2:
                continue
            sid, reason = str(row[0]), str(row[1])
            cell, sep, why = reason.partition(": ")
            if sep and "/" in cell and why != "generated file missing":
                known[(sid, cell)] = reason
        if not known:
            return tasks, 0
        kept, dropped = [], 0
        for task in tasks:
            sid = str(self.samples[task.sample_index].id)
            todo = []
            for cell in task.cells:
                reason = known.get((sid, cell.folder))
                if reason is None:
                    todo.append(cell)
                    continue
                skipped[(sid, reason)] = None
                done_per_cell[cell.stored] += 1
                dropped += 1
            if todo:
                kept.append(Task(task.sample_index, tuple(todo)))
        return kept, dropped

    def _run_local(
        self,
        dataset: TaskDataset,
        tasks: list[Task],
        skipped: dict,
        progress,
        writer: PredictionWriter,
        pending: list,
        shifter=None,
    ) -> None:
        """Workers prepare the pixels, this process runs the model in ``batch_size`` batches
        (after ``shifter``, a :class:`~robustlab.execution.device_shifts.DeviceShifts`, applied
        the corruptions on its device, when the run uses torch shifts)."""
        device = self.model.input_device()
        on_gpu = device.startswith("cuda")
        # Nothing left (a rerun of a finished run): starting worker processes would
        # cost seconds per run for no item at all.
        items = surviving_worker_deaths(
            dataset, tasks, self.samples, self.options, pin_memory=on_gpu
        )
        if shifter is not None:
            items = shifter.wrap(items)
        n_pending = 0
        for index, tensor, errors, measured in items:
            task = tasks[index]
            ok = self._note_item(task, errors, measured, skipped, progress)
            if not ok or tensor is None:
                continue
            # One tensor per task, or one per cell when its cells differ in size (pack).
            pieces = (
                list(zip(tensor, ([j] for j in ok))) if isinstance(tensor, list) else [(tensor, ok)]
            )
            for piece, rows in pieces:
                if on_gpu:  # pinned by the DataLoader: the copy overlaps the forward pass
                    piece = piece.to(device, non_blocking=True)
                pending.append([task, piece, rows, 0])
            n_pending += len(ok)
            while n_pending >= self.options.batch_size:
                n_pending -= self._flush(pending, self.options.batch_size, writer)

    def _run_on_ray(
        self,
        dataset: TaskDataset,
        tasks: list[Task],
        skipped: dict,
        progress,
        writer: PredictionWriter,
        summary: RunSummary,
        shifter=None,
    ) -> None:
        """Ray workers prepare the pixels and run the model (the model actors apply
        ``shifter``'s batched shifts first, when the run uses torch shifts); this process
        stores the rows."""
        from robustlab.execution.ray.evaluate import predict_on_ray
        from robustlab.execution.ray.pipeline import StageTimes

        times = StageTimes()
        cells = sum(len(t.cells) for t in tasks) / max(1, len(tasks))
        items = predict_on_ray(
            dataset,
            self.model,
            batch_size=self.options.batch_size,
            topk=TOPK,
            cells_per_task=cells,
            address=self.options.address,
            cpus=int(self.options.workers) or None,
            device=self.options.device,
            times=times,
            shifter=shifter,
            lanes=self.options.lanes,
        )
        rows: list[tuple[Task, int]] = []
        probs_parts, ids_parts = [], []

        def put() -> None:
            self._write_attributes()  # as locally: attributes no later than predictions
            writer.put(self._rows(rows, np.concatenate(probs_parts), np.concatenate(ids_parts)))
            rows.clear(), probs_parts.clear(), ids_parts.clear()

        for index, errors, measured, probs, ids in items:
            task = tasks[index]
            ok = self._note_item(task, errors, measured, skipped, progress)
            if ok and probs is not None:
                rows.extend((task, j) for j in ok)
                probs_parts.append(probs)
                ids_parts.append(ids)
                if len(rows) >= self.options.batch_size:  # to the writer batch by batch
                    put()
        if rows:
            put()
        summary.stages = times.summary()
        log.info("%s", times.line())

    def _note_item(self, task: Task, errors, measured, skipped: dict, progress) -> list[int]:
        """Record a task's measured attributes and skipped cells; the cells that worked."""
        sample = self.samples[task.sample_index]
        for cell_index, attrs in measured:
            cell = task.cells[cell_index]
            self._attributes.append(
                {"sample_id": sample.id, "shift": cell.shift, "level": cell.key, **attrs}
            )
        failed = set()
        for cell_index, reason in errors:
            if cell_index == NOTE:  # evaluated, but degenerate: a note, not a skip
                self._notes[sample.id] = reason
                continue
            skipped[(sample.id, reason)] = None
            log.warning("skipping %s: %s", sample.id, reason)
            if cell_index < 0:
                failed = set(range(len(task.cells)))
            else:
                failed.add(cell_index)
        # A skipped cell is finished work: the bars and lines still reach 100 %.
        progress.update(task.cells[j].stored for j in sorted(failed))
        return [j for j in range(len(task.cells)) if j not in failed]

    def _flush(self, pending: list, limit: int, writer: PredictionWriter) -> int:
        """Forward up to ``limit`` pending images and queue their rows for the writer.

        ``pending`` holds ``[task, tensor, ok, start]``: row r of ``tensor`` is the image of
        cell ``task.cells[ok[r]]``, and rows before ``start`` were already used.

        One batch holds images of one size: those of the first pending entry's size, taken
        in order wherever they are in ``pending``. Images of other sizes (a folder made
        with ``generate --keep-size``) wait for a batch of their own; a model's prediction
        of an image does not depend on which images share its batch, so this changes no
        result.
        """
        import torch

        pieces, rows = [], []
        taken = 0
        size = tuple(pending[0][1].shape[1:])
        at = 0
        while at < len(pending) and taken < limit:
            task, tensor, ok, start = pending[at]
            if tuple(tensor.shape[1:]) != size:
                at += 1
                continue
            n = min(len(ok) - start, limit - taken)
            pieces.append(tensor[start : start + n])
            rows.extend((task, ok[r]) for r in range(start, start + n))
            taken += n
            if start + n == len(ok):
                pending.pop(at)
            else:
                pending[at][3] = start + n
        # A cell's measured attributes are stored no later than its prediction, so a
        # resumed run (which skips stored predictions) never lacks them.
        self._write_attributes()
        batch = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        # On the CPU predict_topk returns when the batch is done (a GPU's copy back waits).
        assert self._lanes is not None  # set by _predict for the local backend
        self._lanes.submit(batch, rows)
        for (probs, ids), done in self._lanes.ready():
            writer.put(self._rows(done, probs, ids))
        return taken

    def _rows(self, rows: list[tuple[Task, int]], probs, ids) -> dict:
        """The stored rows of ``(task, cell index)`` pairs and their top-k predictions (one
        code path for both backends, so their rows are the same)."""
        import torch

        sample_idx = [task.sample_index for task, _ in rows]
        labels = torch.as_tensor(self.labels[sample_idx])
        top1, topk = self.model.correct(ids, labels)
        cells = [task.cells[j] for task, j in rows]
        return {
            "sample_id": [self.samples[i].id for i in sample_idx],
            "shift": [c.shift for c in cells],
            "level": [c.key for c in cells],
            "label": self.labels[sample_idx].tolist(),
            "class_name": [self.samples[i].class_name for i in sample_idx],
            "top5_ids": _to_numpy(ids).astype(np.int32),
            "top5_probs": _to_numpy(probs).astype(np.float32),
            "correct": _to_numpy(top1).astype(bool).reshape(-1),
            "correct5": _to_numpy(topk).astype(bool).reshape(-1),
        }


class _ModelTransform:
    """Picklable ``img -> uint8 CxHxW tensor`` of what the model sees: the protocol's view
    (:func:`robustlab.execution.tasks.model_input`).

    Workers send uint8 pixels; :meth:`Model.predict` normalises them on the model's device
    (bit-identical to ``model.transform``), a quarter of the bytes of float32 to move
    between processes and to the GPU. Holds only the model's preprocessing record and the
    protocol, not the model: workers start from a clean process (forkserver) and would
    otherwise receive a pickled copy of the weights.
    """

    def __init__(self, model, protocol=None):
        self.preprocessing = model.preprocessing
        self.protocol = protocol

    def __call__(self, img):
        return model_input(self.preprocessing, img, self.protocol)
