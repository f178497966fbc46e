"""HTML building blocks: sortable tables, embedded figures, the page shell (CSS + JS inline).

The report must open from disk with no server and no network, so everything lives in one
file: styles and the table sorter are inline, images are ``data:`` URIs, and a Content
Security Policy forbids the page from loading anything else (a stray external reference
fails loudly in the browser console instead of silently phoning home).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Okabe & Ito (2008) colour-blind-safe palette, black first dropped (used for text).
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
CORRECT_MARK = "\u2713"  # check mark: correctness is never told by colour alone
WRONG_MARK = "\u2717"  # ballot x

CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "script-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
)


def esc(value: Any) -> str:
    """HTML-escape any value (None -> empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


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


def render_table(t: Table) -> str:
    """The table as HTML; headers are buttons (keyboard-usable) when sortable.

    Every data cell carries ``data-sort`` with the raw value, so sorting never depends on
    formatting (``9.50`` vs ``10.25`` sorts numerically; blanks go last).
    """
    cls = "data sortable" if t.sortable and len(t.rows) > 1 else "data"
    # A long table scrolls inside its own box (header kept in view) instead of making the
    # page thousands of pixels tall.
    wrap = "table-wrap tall" if len(t.rows) > TALL_ROWS else "table-wrap"
    # The caption goes above the box, as wide as the page: inside the table (<caption>) a
    # long one was squeezed into the width of a narrow table.
    out = []
    described = ""
    if t.caption:
        out.append(f'<p class="caption" id="{esc(t.id)}-caption">{esc(t.caption)}</p>')
        described = f' aria-describedby="{esc(t.id)}-caption"'
    out.append(f'<div class="{wrap}"><table class="{cls}" id="{esc(t.id)}"{described}>')
    out.append("<thead><tr>")
    for c in t.columns:
        label = esc(c.title) + (f'<span class="colnote">{esc(c.note)}</span>' if c.note else "")
        tip = f' title="{esc(c.tip)}"' if c.tip else ""
        num_cls = ' class="num"' if c.numeric else ""
        if "sortable" in cls:
            out.append(
                f'<th scope="col"{num_cls}{tip}><button type="button">{label}'
                '<span class="arrow" aria-hidden="true"></span></button></th>'
            )
        else:
            out.append(f'<th scope="col"{num_cls}{tip}>{label}</th>')
    out.append("</tr></thead><tbody>")
    for r in t.rows:
        rc = t.row_class(r) if t.row_class else ""
        out.append(f'<tr class="{esc(rc)}">' if rc else "<tr>")
        for c in t.columns:
            v = r.get(c.key)
            shown = c.fmt(v)
            # numbers and short one-word texts ("imagenet-c", a date) never break at a hyphen
            nowrap = c.numeric or (len(shown) <= 24 and " " not in shown and not c.css)
            num_cls = (
                ' class="num"'
                if c.numeric
                else ' class="nw"'
                if nowrap
                else f' class="{esc(c.css)}"'
                if c.css
                else ""
            )
            out.append(
                f'<td{num_cls} data-sort="{esc(_sort_value(v, c.numeric))}">{esc(shown)}</td>'
            )
        out.append("</tr>")
    out.append("</tbody></table></div>")
    for n in t.notes:
        out.append(f'<p class="note">{esc(n)}</p>')
    return "".join(out)


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def figure(fig_id: str, png: bytes, caption: str, alt: str, mime: str = "image/png") -> str:
    """An embedded plot: ``<figure id=...>`` with a data-URI ``<img>`` and a caption."""
    return (
        f'<figure class="plot" id="{esc(fig_id)}"><img src="{data_uri(png, mime)}" '
        f'alt="{esc(alt)}"><figcaption>{esc(caption)}</figcaption></figure>'
    )


def notes_list(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"


STYLE = """
:root { --fg:#1a1a1a; --muted:#555; --line:#d0d0d0; --head:#f2f2f2; --accent:#0072B2;
        --ok:#009E73; --bad:#D55E00; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); margin: 0; background: #fff; }
main { max-width: 1880px; margin: 0 auto; padding: 1rem 1.25rem 3rem; }
header.top { border-bottom: 3px solid var(--accent); margin-bottom: 1rem; }
h1 { font-size: 1.6rem; margin: .6rem 0 .2rem; }
h2 { font-size: 1.25rem; margin: 2rem 0 .5rem; padding-top: .3rem; border-top: 1px solid var(--line); }
h3 { font-size: 1.05rem; margin: 1.2rem 0 .4rem; }
nav.toc ul { display: flex; flex-wrap: wrap; gap: .3rem 1rem; list-style: none; padding: 0; margin: .4rem 0; }
nav.toc a { color: var(--accent); }
p.meta, p.note, p.caption, .notes li, figcaption { color: var(--muted); font-size: .9rem; }
p.caption { margin: .8rem 0 .2rem; }
.table-wrap { overflow-x: auto; max-width: 100%; margin: .4rem 0 .8rem; }
.table-wrap.tall { max-height: 34rem; overflow-y: auto; border-bottom: 1px solid var(--line); }
table.data { border-collapse: collapse; font-variant-numeric: tabular-nums; }
table.data th, table.data td { border-bottom: 1px solid var(--line); padding: .25rem .4rem;
                               text-align: left; vertical-align: top; }
/* Headers and text wrap at spaces, numbers never: wide tables fit the window instead of
   scrolling sideways (a table that still does not fit scrolls inside its own box). */
table.data { font-size: .84rem; }
table.data th, table.data td { white-space: normal; overflow-wrap: break-word; }
table.data td.num, table.data td.nw { white-space: nowrap; }
table.data td.wide { min-width: 9rem; }
table.data td.date { min-width: 6.4rem; }
table.data td.path { min-width: 7rem; overflow-wrap: anywhere; }
table.data th { background: var(--head); position: sticky; top: 0; z-index: 1; font-weight: 600; }
table.data td:first-child { position: sticky; left: 0; background: #fff; z-index: 1; }
table.data th:first-child { left: 0; z-index: 2; }
table.data th.num, table.data td.num { text-align: right; }
table.data th button { all: unset; cursor: pointer; display: inline-block; }
table.data th button:focus-visible { outline: 2px solid var(--accent); outline-offset: 2px; }
table.data th .colnote { display: block; font-weight: 400; font-size: .75rem; color: var(--muted); }
table.data th[aria-sort="ascending"] .arrow::after { content: " \\25B2"; }
table.data th[aria-sort="descending"] .arrow::after { content: " \\25BC"; }
table.data tr.summary td { font-weight: 600; background: #f7f7f7; }
table.data tbody tr:hover td { background: #eef5fb; }
figure.plot { margin: .6rem 0 1.2rem; max-width: 100%; overflow-x: auto; }
.plots { display: flex; flex-wrap: wrap; gap: 0 1.5rem; align-items: flex-start; }
details.more > summary { cursor: pointer; color: var(--accent); margin: .6rem 0; }
figure.plot img { max-width: none; height: auto; border: 1px solid var(--line); }
.grid { border-collapse: collapse; }
.grid th { font-weight: 600; font-size: .85rem; text-align: left; padding: .2rem .4rem; vertical-align: middle; }
.grid td { padding: .25rem; vertical-align: top; }
.thumb { margin: 0; width: 170px; }
.thumb img { width: 160px; height: 160px; object-fit: contain; display: block; border: 1px solid var(--line); }
.thumb figcaption { font-size: .75rem; line-height: 1.25; margin-top: .15rem; white-space: normal; }
.hard-examples { display: flex; flex-wrap: wrap; gap: .5rem; margin: .5rem 0 1rem; }
.pred { display: block; }
.pred.ok { color: #006b4f; }
.pred.bad { color: #a63c00; }
.pred .mark { font-weight: 700; display: inline-block; width: 1.1em; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; font-size: .9rem; }
.kv dt { font-weight: 600; }
.kv dd { margin: 0; word-break: break-all; }
details { margin: .3rem 0; }
details pre { font-size: .78rem; background: #f7f7f7; padding: .5rem; overflow-x: auto; max-height: 20rem; }
code { font-size: .85em; }
@media (max-width: 700px) { .thumb { width: 120px; } .thumb img { width: 112px; height: 112px; } }
"""

SORTER_JS = """
(function () {
  function key(cell, numeric) {
    var v = cell.getAttribute('data-sort');
    if (v === null) { v = cell.textContent.trim(); }
    if (v === '') { return null; }
    if (numeric) { var n = parseFloat(v); return isNaN(n) ? null : n; }
    return v.toLowerCase();
  }
  function sortBy(table, col, th) {
    var dir = th.getAttribute('aria-sort') === 'ascending' ? 'descending' : 'ascending';
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute('aria-sort'); }
    th.setAttribute('aria-sort', dir);
    var numeric = th.classList.contains('num');
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var sign = dir === 'ascending' ? 1 : -1;
    rows.forEach(function (r, i) { r._pos = i; });
    rows.sort(function (a, b) {
      var x = key(a.cells[col], numeric), y = key(b.cells[col], numeric);
      if (x === null && y === null) { return a._pos - b._pos; }
      if (x === null) { return 1; }          /* blanks last either way */
      if (y === null) { return -1; }
      if (x < y) { return -sign; }
      if (x > y) { return sign; }
      return a._pos - b._pos;                /* stable */
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      var b = th.querySelector('button');
      if (b) { b.addEventListener('click', function () { sortBy(table, col, th); }); }
    });
  });
})();
"""


def page(title: str, body: str) -> str:
    """The complete HTML document around ``body``."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head><body><main>"
        f"{body}</main><script>{SORTER_JS}</script></body></html>\n"
    )
