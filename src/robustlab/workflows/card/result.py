"""What :func:`robustlab.workflows.card.card` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class CardResult:
    """What a card wrote and computed.

    Attributes:
        out: The card's folder.
        files: Name -> path of card.md, card.json, model-index.yaml (and report.html).
        csvs: The per-cell CSVs, relative to ``out``.
        run_ids: Benchmark (``imagenet-c:baseline`` for the CE baseline) -> run id.
        n_computed: Predictions this call computed (0: everything was already stored).
        skipped: Benchmark -> why it was not run.
        numbers: The card's numbers (dicts of :class:`~.numbers.Number`).
    """

    out: Path
    files: dict[str, Path]
    csvs: list[str]
    run_ids: dict[str, str]
    n_computed: int
    skipped: dict[str, str] = field(default_factory=dict)
    numbers: list[dict] = field(default_factory=list)
