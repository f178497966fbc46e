"""The report's one Jinja2 environment: the templates beside this module lay out the page,
Python hands them data (numbers already formatted, tables already shaped).

Three choices keep the page what the string-built code wrote, byte for byte (the golden
page of ``tests/test_report_same_html.py``):

- Escaping is on for every ``{{ value }}`` and is :func:`html.escape`'s (``&quot;``,
  ``&#x27;``), not MarkupSafe's (``&#34;``, ``&#39;``): ``finalize`` escapes each value
  into :class:`~markupsafe.Markup` before autoescape sees it, and ``None`` prints as
  nothing. Only a fragment rendered by a template is ``Markup`` and passes through.
- A line break in a template's text, with the indentation after it, is layout only and
  is dropped (:class:`JoinLines`): templates are written one element a line, while the
  page has no line break between its elements. A line break the page needs is written
  ``{{ "\\n" }}``. Included ``.css`` and ``.js`` files keep theirs.
- ``keep_trailing_newline``: an included file ends where its text ends.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from markupsafe import Markup

if TYPE_CHECKING:
    from jinja2 import Environment
    from jinja2.lexer import Token, TokenStream

_LAYOUT_BREAK = re.compile(r"\n[ \t]*")


def escape(value: Any) -> Markup:
    """A value as the page has always escaped it (``html.escape``, quotes included)."""
    if type(value) is str:  # most values: a table's cells
        return Markup(html.escape(value))
    if hasattr(value, "__html__"):
        return Markup(value)
    return Markup("" if value is None else html.escape(str(value)))


@functools.cache
def environment() -> Environment:
    """The environment, built once: templates from the package data, autoescape on."""
    from jinja2 import Environment, PackageLoader, StrictUndefined
    from jinja2.ext import Extension

    class JoinLines(Extension):
        """Drops each line break of an HTML template's text and the indentation after it."""

        def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
            from jinja2.lexer import Token

            join = (stream.name or "").endswith(".html")
            for token in stream:
                if join and token.type == "data":
                    token = Token(token.lineno, token.type, _LAYOUT_BREAK.sub("", token.value))
                yield token

    return Environment(
        loader=PackageLoader("robustlab.workflows.report", "templates"),
        autoescape=True,
        finalize=escape,
        keep_trailing_newline=True,
        undefined=StrictUndefined,
        auto_reload=False,
        extensions=[JoinLines],
    )


def render(name: str, **data: Any) -> Markup:
    """The template ``name`` filled with ``data``: a fragment of the page (``Markup``)."""
    return Markup(environment().get_template(name).render(**data))
