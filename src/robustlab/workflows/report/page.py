"""The report page being built: its sections, tables and figures, in order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from markupsafe import Markup

from robustlab.workflows.report.html import Table, figure, render_table
from robustlab.workflows.report.render import escape, render

# A plot of the page: id, picture (PNG bytes), caption, alt text.
Plot = tuple[str, bytes, str, str]


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
    """Collects sections and remembers which tables and figures went in.

    Its parts are rendered fragments (``Markup``, from the templates): a plain string
    handed to :meth:`add` is a type error, and would be escaped, never passed through.
    """

    def __init__(self, flagged: dict[str, str] | None = None, labels: dict[str, str] | None = None):
        """``flagged``: run id -> why its numbers mean nothing (images drawn by random
        weights); ``labels``: run id -> the name tables show for it. A flagged run is marked
        in every table it appears in."""
        self.parts: list[Markup] = []
        self.toc: list[tuple[str, str]] = []
        self.tables: list[str] = []
        self.figures: list[str] = []
        self.flagged: dict[str, str] = dict(flagged or {})
        self._flag_names = {(labels or {}).get(rid, rid) for rid in self.flagged}
        self._flag_ids = set(self.flagged)

    def section(self, sid: str, title: str, intro: str = "") -> None:
        self.toc.append((f"sec-{sid}", title))
        self.parts.append(render("section.html", sid=sid, title=title, intro=intro))

    def add(self, fragment: Markup) -> None:
        self.parts.append(fragment)

    def body(self) -> Markup:
        """The sections, in order (a part that is no ``Markup`` escaped)."""
        return Markup("").join(escape(part) for part in self.parts)

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

    def plots(self, plots: list[Plot]) -> None:
        """Figures side by side where the window is wide enough."""
        self.figures.extend(fig_id for fig_id, *_ in plots)
        self.parts.append(render("plots.html", figures=[figure(*f) for f in plots]))
