"""The report's page does not change when its code is reorganised (issue 23, item 8).

``tests/fixtures/report_html/replay.html.gz`` is the report of the replay database as the
code before the split of ``report/build.py`` wrote it (``make.py`` beside it says how).
The current code must write the same page: the same sections, tables, headers, cells,
captions and notes, character for character, once the time, the version, the temporary
path and the embedded pictures are normalised, and the full-precision sort keys of the
cells (``data-sort``) compared to 10 significant digits: the regression's coefficients come
from LAPACK through numpy's CPU-dispatched kernels, and their last bits differ between CPUs
(AVX2 against AVX-512: -0.45609234949771865 against -0.45609234949772), while every
number the page shows keeps its 4 decimals.
"""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import importlib.util
import re
from pathlib import Path

from robustlab.workflows.report import build_report

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "report_html"


def _make():
    spec = importlib.util.spec_from_file_location("report_html_make", FIXTURE / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sort_keys(text: str) -> str:
    """Every numeric ``data-sort`` key to 10 significant digits (see the module's note)."""
    number = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
    return re.sub(rf'data-sort="({number})"', lambda m: f'data-sort="{float(m[1]):.10g}"', text)


def _lines(text: str) -> list[str]:
    # one element per line so that a difference is shown where it is, not as one huge line
    return text.replace("><", ">\n<").splitlines()


def test_the_report_page_is_the_one_the_old_code_wrote(tmp_path):
    expected = _sort_keys(gzip.open(FIXTURE / "replay.html.gz", "rt", encoding="utf-8").read())
    got = _sort_keys(_make().build(tmp_path))
    if got != expected:
        diff = "\n".join(
            list(difflib.unified_diff(_lines(expected), _lines(got), "old", "new", n=2))[:80]
        )
        raise AssertionError(f"the report page changed:\n{diff}")
    assert 'id="ce-table"' in got and 'id="edit-drop"' in got and 'id="regression"' in got


def test_keywords_go_to_the_request_by_name_and_a_misspelt_one_is_a_type_error(tmp_path):
    """``build_report(db, out, **kw)`` is ``build_report(ReportRequest(db, out, **kw))``;
    a keyword that is no field is the caller's TypeError, naming the closest field."""
    import pytest

    from robustlab.workflows.report import ReportRequest
    from robustlab.workflows.report.build import report_request

    req = report_request("r.duckdb", "r.html", run_ids=["ab12"], n_resamples=20, grid=False)
    assert req == ReportRequest("r.duckdb", "r.html", run_ids=("ab12",), n_resamples=20, grid=False)
    with pytest.raises(TypeError, match="'n_resample'; did you mean n_resamples"):
        build_report(tmp_path / "r.duckdb", tmp_path / "r.html", n_resample=20)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'$"):
        build_report(tmp_path / "r.duckdb", tmp_path / "r.html", colour="red")
    with pytest.raises(TypeError, match="ReportRequest alone"):
        build_report(req, tmp_path / "r.html")
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.title = "changed"  # type: ignore[misc]
    assert not (tmp_path / "r.html").exists()
