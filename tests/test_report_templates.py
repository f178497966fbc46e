"""The report's HTML comes from Jinja2 templates (issue 38, item 7): they ship as package
data, they escape what a user controls the way the page always did, and only rendered
fragments pass through unescaped. The page's bytes are guarded by test_report_same_html."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

from robustlab.workflows.report.html import Column, Table, figure, notes_list, page, render_table
from robustlab.workflows.report.page import Page

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "robustlab"
TEMPLATES = PACKAGE / "workflows" / "report" / "templates"
HOSTILE = "<script>alert('x')</script> & \"quoted\""
# html.escape's entities, as the string-built page wrote them (not MarkupSafe's &#39; &#34;)
ESCAPED = "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;"


def test_every_report_template_is_package_data():
    """A wheel carries the templates: each file of the folder matches pyproject's
    package-data, so an installed robustlab can write a report."""
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["robustlab"]
    files = sorted(p for p in TEMPLATES.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"page.html", "table.html", "report.css", "sorter.js"}
    for p in files:
        rel = p.relative_to(PACKAGE).as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), f"{rel} is not package data"


def test_user_text_is_escaped_in_every_fragment():
    """A model spec, a file name, a label or a note with markup in it is shown as text in
    tables, headers, notes, figures and the page title; nothing of it becomes markup."""
    t = Table(
        "t",
        [Column("model", HOSTILE, note=HOSTILE, tip=HOSTILE)],
        [{"model": HOSTILE}, {"model": None}],
        caption=HOSTILE,
        row_class=lambda r: "summary" if r["model"] is None else HOSTILE,
        notes=[HOSTILE],
    )
    p = Page()
    p.section("s", HOSTILE, HOSTILE)
    p.table(t)
    p.add(notes_list([HOSTILE]))
    p.figure("f", b"\x89PNG", HOSTILE, HOSTILE)
    doc = page(HOSTILE, p.body())
    assert "<script>alert" not in doc and "'x'" not in doc and '"quoted"' not in doc
    # title, h2 and intro, th title/text/colnote, tr class, td text and data-sort,
    # caption, table note, notes list, figure alt and caption
    assert doc.count(ESCAPED) == 14
    # the page's own script and the empty cell of a None are still there
    assert doc.count("<script>") == 1 and '<td class="nw" data-sort=""></td>' in doc


def test_a_plain_string_added_to_the_page_is_escaped_not_passed_through():
    """Only fragments rendered by a template are markup: a string built by hand in Python
    and added to the page shows as text."""
    p = Page()
    p.add(HOSTILE)  # type: ignore[arg-type]
    p.add(figure("f", b"png", "caption", "alt"))
    body = p.body()
    assert body.startswith(ESCAPED) and '<figure class="plot" id="f">' in body


def test_templates_write_no_line_break_between_elements():
    """Templates are written one element a line; the page has none between elements (the
    golden page's layout), and a table renders on one line."""
    t = Table("t", [Column("a", "A", numeric=True), Column("b", "B")], [{"a": 1, "b": "x"}] * 2)
    html = render_table(t)
    assert "\n" not in html and "> <" not in html
    assert html.startswith('<div class="table-wrap"><table class="data sortable" id="t"><thead>')
    doc = page("p", html)
    assert doc.startswith('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">')
    assert doc.endswith("</script></body></html>\n") and "<style>\n:root {" in doc
