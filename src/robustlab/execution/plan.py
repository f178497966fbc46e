"""``RunPlan``: what an evaluation run needs, decided before the database is touched.

Every evaluation plan is one: each planner of :mod:`robustlab.workflows.evaluate` (source
folders on the fly, generated folders, the ImageNet-E archive, published layouts, mined
subsets, exports) returns what it decided as data, and ``make_plan`` turns that and the
loaded model into a ``RunPlan``; every consumer reads the same fields: ``evaluate`` hands it to the runner (local or Ray), the training
protocols (:mod:`robustlab.workflows.train.protocols`) take its samples, cells and images for their
splits. A typed, frozen value instead of a dict with the same keys: a misspelt field is
an ``AttributeError`` at the line that misspells it (and a mypy error before that), and a
new field is added here once rather than in four dict literals.

The run's identity and stored description live in ``record`` (built by
:func:`robustlab.records.identity.make_record`); the plan adds what executing it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robustlab.cells import Cell
    from robustlab.data.labels import LabelSpace
    from robustlab.data.sources import Sample
    from robustlab.execution.tasks import CellImages
    from robustlab.store import RunRecord
    from robustlab.suites import Protocol, Suite


@dataclass(frozen=True)
class RunPlan:
    """A planned evaluation run.

    Attributes:
        model: The loaded model, wrapped in its defences when the run has any.
        samples: The images, sorted by id (a source folder's sample list keeps its
            ``skipped`` and ``labels_csv`` attributes).
        labels: Label index per sample, in ``label_space``.
        cells: Its cells, the clean cell first where the run has one.
        protocol: How the images are framed and how the model sees them.
        suite: The suite of a run on source images or a generated folder; None for the
            published layouts and the archive (their folders are the cells).
        record: The run's identity and description (:class:`robustlab.store.RunRecord`),
            stored when the run starts.
        images: Where each cell's pixels come from (computed, generated files, archive
            or published files): the runner's work units read them through it.
        label_space: The label space of ``labels``.
    """

    model: Any
    samples: list[Sample]
    labels: list[int]
    cells: list[Cell]
    protocol: Protocol
    suite: Suite | None
    record: RunRecord
    images: CellImages
    label_space: LabelSpace

    @property
    def run_id(self) -> str:
        return self.record.run_id
