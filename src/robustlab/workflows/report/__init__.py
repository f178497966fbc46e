"""The self-contained HTML report: ``robustlab report --db FILE --out report.html``.

Example:
    >>> from robustlab.workflows.report import build_report
    >>> result = build_report("robustlab.duckdb", "report.html")  # doctest: +SKIP
    >>> result.figures  # doctest: +SKIP
    ['fig-severity-corruption', 'fig-severity-family', ...]
"""

from robustlab.workflows.report.build import ReportRequest, build_report
from robustlab.workflows.report.gather import ReportData, gather
from robustlab.workflows.report.page import ReportResult

__all__ = ["ReportData", "ReportRequest", "ReportResult", "build_report", "gather"]
