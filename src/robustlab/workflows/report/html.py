"""HTML building blocks: sortable tables, embedded figures, notes, the page shell.

The markup lives in the templates beside this package (``templates/``, rendered by
:mod:`.render`); this module shapes the data they lay out: a table's cells formatted and
classed, a figure's picture as a ``data:`` URI. The report must open from disk with no
server and no network, so everything lives in one file (``page.html`` says how).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from markupsafe import Markup

from robustlab.workflows.report.render import render

# Okabe & Ito (2008) colour-blind-safe palette, black first dropped (used for text).
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CORRECT_MARK = "\u2713"  # check mark: correctness is never told by colour alone
WRONG_MARK = "\u2717"  # ballot x


def is_missing(value: Any) -> bool:
    """None, NaN, pandas NA/NaT: shown as an empty cell and sorted last."""
    if value is None:
        return True
    import pandas as pd

    try:
        result = pd.isna(value)
    except (TypeError, ValueError):
        return False
    return bool(result) if isinstance(result, (bool, np.bool_)) else False


def pct(value: Any, digits: int = 2) -> str:
    """A fraction as a percentage with ``digits`` decimals, the way ``robustlab results``
    prints it (so the two outputs can be compared cell by cell)."""
    if is_missing(value):
        return ""
    return f"{100 * float(value):.{digits}f}"


def num(value: Any, digits: int = 4) -> str:
    if is_missing(value):
        return ""
    v = float(value)
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e5):
        return f"{v:.{max(1, digits - 1)}e}"
    return f"{v:.{digits}f}"


def integer(value: Any) -> str:
    return "" if is_missing(value) else str(int(value))


def text(value: Any) -> str:
    return "" if is_missing(value) else str(value)


@dataclass
class Column:
    """One table column.

    Attributes:
        key: Row dict key.
        title: Header text.
        fmt: Value -> display text.
        numeric: Right-aligned and sorted as a number (by the raw value).
        note: Small second header line (e.g. the corruption family).
        tip: Header tooltip explaining the column.
        css: Extra class of its cells: ``wide`` for a sentence that must not shrink to a
            word a line, ``path`` for a long name that may break anywhere, ``date`` for a
            date that must stay on one line.
    """

    key: str
    title: str
    fmt: Callable[[Any], str] = text
    numeric: bool = False
    note: str = ""
    tip: str = ""
    css: str = ""


@dataclass
class Table:
    """A sortable table: columns plus row dicts; rendered by :func:`render_table`."""

    id: str
    columns: list[Column]
    rows: list[dict[str, Any]]
    caption: str = ""
    row_class: Callable[[dict], str] | None = None
    sortable: bool = True
    notes: list[str] = field(default_factory=list)


def _sort_value(value: Any, numeric: bool) -> str:
    if is_missing(value):
        return ""
    if numeric:
        try:
            return repr(float(value))
        except (TypeError, ValueError):
            return ""
    return str(value)


# Rows beyond which a table scrolls vertically inside its own box.
TALL_ROWS = 16


def render_table(t: Table) -> Markup:
    """The table as HTML (``table.html``); headers are buttons (keyboard-usable) when
    sortable.

    Every data cell carries ``data-sort`` with the raw value, so sorting never depends on
    formatting (``9.50`` vs ``10.25`` sorts numerically; blanks go last).
    """
    sortable = t.sortable and len(t.rows) > 1
    rows = []
    for r in t.rows:
        cells = []
        for c in t.columns:
            v = r.get(c.key)
            shown = c.fmt(v)
            # numbers and short one-word texts ("imagenet-c", a date) never break at a hyphen
            nowrap = c.numeric or (len(shown) <= 24 and " " not in shown and not c.css)
            cls = "num" if c.numeric else "nw" if nowrap else c.css
            cells.append((cls, _sort_value(v, c.numeric), shown))
        rows.append((t.row_class(r) if t.row_class else "", cells))
    return render(
        "table.html",
        t=t,
        rows=rows,
        sortable=sortable,
        cls="data sortable" if sortable else "data",
        # a long table scrolls inside its own box (header kept in view) instead of making
        # the page thousands of pixels tall
        wrap="table-wrap tall" if len(t.rows) > TALL_ROWS else "table-wrap",
    )


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def figure(fig_id: str, png: bytes, caption: str, alt: str, mime: str = "image/png") -> Markup:
    """An embedded plot: ``<figure id=...>`` with a data-URI ``<img>`` and a caption."""
    return render("figure.html", id=fig_id, src=data_uri(png, mime), caption=caption, alt=alt)


def notes_list(notes: Sequence[str]) -> Markup:
    """A bulleted list of notes; nothing when there is none."""
    return render("notes.html", notes=notes)


def note(text: str) -> Markup:
    """One ``<p class="note">`` paragraph."""
    return render("note.html", text=text)


def page(title: str, body: Markup) -> str:
    """The complete HTML document around ``body`` (rendered fragments)."""
    return str(render("page.html", title=title, body=body))
