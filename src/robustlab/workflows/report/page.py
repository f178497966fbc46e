"""The report page being built: its sections, tables and figures, in order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from robustlab.workflows.report.html import Table, esc, figure, render_table


@dataclass
class ReportResult:
    """What was written.

    Attributes:
        path: The HTML file.
        tables: Ids of the tables in the page.
        figures: Ids of the plot figures in the page.
        grids: Number of image grids.
        notes: Everything left out or partial, with the reason.
    """

    path: Path
    tables: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    grids: int = 0
    notes: list[str] = field(default_factory=list)


class Page:
    """Collects sections and remembers which tables and figures went in."""

    def __init__(self, flagged: dict[str, str] | None = None, labels: dict[str, str] | None = None):
        """``flagged``: run id -> why its numbers mean nothing (images drawn by random
        weights); ``labels``: run id -> the name tables show for it. A flagged run is marked
        in every table it appears in."""
        self.parts: list[str] = []
        self.toc: list[tuple[str, str]] = []
        self.tables: list[str] = []
        self.figures: list[str] = []
        self.flagged: dict[str, str] = dict(flagged or {})
        self._flag_names = {(labels or {}).get(rid, rid) for rid in self.flagged}
        self._flag_ids = set(self.flagged)

    def section(self, sid: str, title: str, intro: str = "") -> None:
        # "sec-": a section and its table often share a name (cells, leaderboard, ...),
        # and an id must be unique in the page
        self.toc.append((f"sec-{sid}", title))
        self.parts.append(f'<h2 id="sec-{esc(sid)}">{esc(title)}</h2>')
        if intro:
            self.parts.append(f'<p class="note">{esc(intro)}</p>')

    def add(self, html_text: str) -> None:
        self.parts.append(html_text)

    def table(self, t: Table) -> None:
        self.tables.append(t.id)
        self.parts.append(render_table(self._marked(t)))

    def _marked(self, t: Table) -> Table:
        """``t`` with each flagged run's model cell marked and the mark's note added (rows
        are matched by the run's shown name or its id, full or short)."""
        from robustlab.workflows.report.headline import RANDOM_MARK, RANDOM_NOTE

        if not self.flagged or not t.columns:
            return t
        first = t.columns[0].key
        rows, hit = [], False
        for r in t.rows:
            ids = {str(r.get(k)) for k in ("run_full", "run_id", "run") if r.get(k) is not None}
            if r.get("label") in self._flag_names or any(
                len(i) >= 8 and any(f.startswith(i) for f in self._flag_ids) for i in ids
            ):
                hit = True
                r = {**r, first: f"{r.get(first) or ''} {RANDOM_MARK}".strip()}
            rows.append(r)
        if not hit:
            return t
        return dataclasses.replace(t, rows=rows, notes=[*t.notes, RANDOM_NOTE + "."])

    def figure(self, fig_id: str, png: bytes, caption: str, alt: str) -> None:
        self.figures.append(fig_id)
        self.parts.append(figure(fig_id, png, caption, alt))
