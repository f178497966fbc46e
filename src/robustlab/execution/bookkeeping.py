"""A run's bookkeeping: which tasks are left (resume), the summary it returns, its
throughput numbers, and how errors met while cleaning up after a failure are reported."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from robustlab.cells import Cell, as_cells
from robustlab.execution.tasks import Task
from robustlab.store import Store

log = logging.getLogger(__name__)


@dataclass
class RunSummary:
    run_id: str
    resumed: bool
    n_samples: int
    n_written: int = 0
    n_already_done: int = 0
    skipped: list[list[str]] = field(default_factory=list)
    stages: dict = field(default_factory=dict)  # the Ray backend's per-stage throughput
    throughput: dict = field(default_factory=dict)  # :func:`throughput` of this session
    # Sample id -> why it is degenerate (evaluated and counted), over every session of the run.
    notes: dict = field(default_factory=dict)


def throughput(n: int, wall_s: float, predict_s: float | None, device: str | None) -> dict:
    """The end-of-run numbers: predictions stored by this session, its wall time, their
    rate, and the share of the wall time the main process spent in the model's forward
    pass (softmax and top-k included; on a GPU, where the result is copied back, that is
    the time the GPU worked for us plus the copies: a proxy for how busy it was). None
    where the model ran elsewhere (the Ray backend's actors; see its stages line)."""
    return {
        "predictions": int(n),
        "wall_s": round(float(wall_s), 3),
        "per_s": round(n / wall_s, 1) if wall_s > 0 else None,
        "predict_s": None if predict_s is None else round(float(predict_s), 3),
        "busy": (
            round(min(1.0, predict_s / wall_s), 3) if predict_s is not None and wall_s > 0 else None
        ),
        "device": device,
    }


def plan_tasks(
    samples: Sequence, cells: Sequence[Cell], store: Store, run_id: str, cells_per_task: int
) -> tuple[list[Task], dict[tuple[str, str], int], int]:
    """Tasks for every (sample, cell) not yet stored for ``run_id``.

    Returns:
        (tasks, done per cell key, rows already stored). Only samples with some but not
        all requested cells stored are looked up key by key, so resuming a large run reads
        one count per sample, not every stored key.
    """
    cells = as_cells(cells)
    keys = [cell.stored for cell in cells]
    counts = store.done_counts(run_id, keys)
    partial = [s.id for s in samples if 0 < counts.get(s.id, 0) < len(keys)]
    done_keys = store.done_keys(run_id, partial, keys) if partial else set()
    step = int(cells_per_task) if int(cells_per_task) > 0 else max(1, len(cells))
    full_groups = [tuple(cells[i : i + step]) for i in range(0, len(cells), step)]
    tasks: list[Task] = []
    done_per_cell: dict[tuple[str, str], int] = dict.fromkeys(keys, 0)
    already = 0
    for i, s in enumerate(samples):
        n_done = counts.get(s.id, 0)
        if n_done == 0:
            tasks.extend(Task(i, g) for g in full_groups)
            continue
        if n_done >= len(keys):
            for key in keys:
                done_per_cell[key] += 1
            already += len(keys)
            continue
        todo = []
        for cell, key in zip(cells, keys):
            if (s.id, *key) in done_keys:
                done_per_cell[key] += 1
                already += 1
            else:
                todo.append(cell)
        tasks.extend(Task(i, tuple(todo[j : j + step])) for j in range(0, len(todo), step))
    return tasks, done_per_cell, already


def after_failure(exc: BaseException, failure: BaseException | None, doing: str) -> None:
    """Log an error met while cleaning up after ``failure`` (the error that ends the run).

    The same error again (the writer re-raising its full disk) or another user-facing one
    (the disk still full when the run's end is recorded) is one debug line: the CLI already
    prints the problem on one line, and a traceback would bury it. Anything else is a bug
    in the cleanup and keeps its traceback.
    """
    from robustlab.errors import RobustlabError, environment_problem

    if exc is failure or isinstance(exc, RobustlabError):
        log.debug("%s: %s", doing, one_line(exc))
    elif isinstance(exc, OSError) and environment_problem(exc, "") is not exc:
        log.debug("%s: %s", doing, one_line(exc))
    else:
        log.exception("%s", doing)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
