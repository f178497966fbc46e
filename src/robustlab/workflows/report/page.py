"""The report page being built: its sections, tables and figures, in order."""

from __future__ import annotations

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

    def __init__(self):
        self.parts: list[str] = []
        self.toc: list[tuple[str, str]] = []
        self.tables: list[str] = []
        self.figures: list[str] = []

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
        self.parts.append(render_table(t))

    def figure(self, fig_id: str, png: bytes, caption: str, alt: str) -> None:
        self.figures.append(fig_id)
        self.parts.append(figure(fig_id, png, caption, alt))
