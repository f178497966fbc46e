"""What :func:`robustlab.evaluate` returns: the run's per-cell table and what this call did.

Like the other workflows' ``*Result`` dataclasses, so a caller reads ``result.run_id`` or
``result.throughput`` as fields (they used to ride in the table's ``DataFrame.attrs``,
which pandas drops on most operations).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from robustlab.errors import StoreError
from robustlab.store import Store


@dataclass
class EvaluateResult:
    """One evaluation: the stored run's cells, and this call's share of the work.

    Attributes:
        table: One row per cell of the run: run_id, model, suite, shift, level, n, top1,
            top5, error, as fractions in [0, 1] (``robustlab evaluate`` and ``robustlab
            results`` print them as percentages).
        run_id: The stored run (its identity's hash: the same request resumes it).
        db: The results database it is stored in.
        skipped: ``[sample or cell, reason]`` of every input left out, over the whole run.
        n_written: Predictions this call stored.
        resumed: The run was in the database before this call.
        stages: With the Ray backend, worker time and rate per pipeline stage.
        throughput: This call's predictions, wall and predict seconds, rate and the share
            of the wall time the model was busy
            (:func:`robustlab.execution.progress.throughput_line` prints it).
        protocol: The label of the suite's protocol, where it has one.
    """

    table: pd.DataFrame
    run_id: str
    db: str
    skipped: list = field(default_factory=list)
    n_written: int = 0
    resumed: bool = False
    stages: dict = field(default_factory=dict)
    throughput: dict = field(default_factory=dict)
    protocol: str | None = None

    @classmethod
    def of_run(cls, store: Store, summary, protocol: str | None = None) -> EvaluateResult:
        """The result of a run the runner just executed (its
        :class:`~robustlab.execution.bookkeeping.RunSummary`), its table read back from ``store``."""
        return cls(
            table=run_table(store, summary.run_id),
            run_id=summary.run_id,
            db=str(store.path),
            skipped=summary.skipped,
            n_written=summary.n_written,
            resumed=summary.resumed,
            stages=summary.stages,
            throughput=summary.throughput,
            protocol=protocol,
        )


def run_table(store: Store, run_id: str) -> pd.DataFrame:
    """Per-cell results of one stored run (:attr:`EvaluateResult.table`)."""
    run = store.get_run(run_id)
    if run is None:
        raise StoreError(f"run {run_id} is not in {store.path}")
    cells = store.cell_table([run_id])
    from robustlab.store.naming import model_label

    cells.insert(1, "model", model_label(run["model_spec"], run.get("config")))
    cells.insert(2, "suite", run["suite"])
    return cells
