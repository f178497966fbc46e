"""A selected run as the report shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class RunView:
    """One selected run: its ``runs`` row and the name the report shows for it.

    Attributes:
        run_id: Full run id.
        label: The model spec (``spec +defence`` for a defended run), or ``spec [run8]``
            when the selection holds the same label more than once (two seeds, two suites).
        record: The ``runs`` row (JSON columns decoded).
    """

    run_id: str
    label: str
    record: dict[str, Any]

    @property
    def short(self) -> str:
        return self.run_id[:8]
