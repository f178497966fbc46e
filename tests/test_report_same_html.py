"""The report's page does not change when its code is reorganised (issue 23, item 8).

``tests/fixtures/report_html/replay.html.gz`` is the report of the replay database as the
code before the split of ``report/build.py`` wrote it (``make.py`` beside it says how).
The current code must write the same page: the same sections, tables, headers, cells,
captions and notes, character for character, once the time, the version, the temporary
path and the embedded pictures are normalised.
"""

from __future__ import annotations

import difflib
import gzip
import importlib.util
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "report_html"


def _make():
    spec = importlib.util.spec_from_file_location("report_html_make", FIXTURE / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lines(text: str) -> list[str]:
    # one element per line so that a difference is shown where it is, not as one huge line
    return text.replace("><", ">\n<").splitlines()


def test_the_report_page_is_the_one_the_old_code_wrote(tmp_path):
    expected = gzip.open(FIXTURE / "replay.html.gz", "rt", encoding="utf-8").read()
    got = _make().build(tmp_path)
    if got != expected:
        diff = "\n".join(
            list(difflib.unified_diff(_lines(expected), _lines(got), "old", "new", n=2))[:80]
        )
        raise AssertionError(f"the report page changed:\n{diff}")
    assert 'id="ce-table"' in got and 'id="edit-drop"' in got and 'id="regression"' in got
