"""The report's card section (``robustlab card``) and its published-numbers table
(``robustlab report --reference``).

The card section reads the card's record (the dict ``card.json`` stores under
``robustlab``) as plain data, so the report draws the same rows as ``card.md``; a report
without a card or ``--reference`` is byte for byte what it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from robustlab.workflows.report.columns import column
from robustlab.workflows.report.headline import BENCHMARKS
from robustlab.workflows.report.html import Table, note
from robustlab.workflows.report.page import Page


def _value(x: Any, unit: str) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4f}" if unit == "score" else f"{x:.1f}"


def _interval(n: Mapping) -> str:
    if n.get("lo") is None or n.get("hi") is None:
        return ""
    return f"{_value(n['lo'], n['unit'])}\u2013{_value(n['hi'], n['unit'])}"


def card_section(p: Page, card: Mapping) -> None:
    """Headline rows per benchmark, the skipped benchmarks, and the published rows."""
    p.section(
        "card",
        f"Robustness card: {card['model']}",
        str(card["footnote"]) + " Interval: 95 % percentile bootstrap over images.",
    )
    rows = [
        {
            "benchmark": BENCHMARKS.get(n["benchmark"], n["benchmark"]),
            "metric": n["label"],
            "value": f"{_value(n['value'], n['unit'])} {n['unit']}",
            "ci": _interval(n),
            "n": n["n_images"],
            "note": n["note"],
        }
        for n in card["numbers"]
        if n["headline"]
    ]
    cols = [
        column("text", "benchmark", "Benchmark"),
        column("text", "metric", "Metric"),
        column("text", "value", "Value"),
        column("text", "ci", "95 % CI"),
        column("count", "n", "Images"),
        column("text", "note", "Note", css="wide"),
    ]
    p.table(Table("card-headline", cols, rows, caption="The card's headline numbers"))
    skipped = [
        f"{BENCHMARKS.get(b, b)}: {why}" for b, why in dict(card.get("skipped") or {}).items()
    ]
    if skipped:
        p.add(note("Skipped: " + "; ".join(skipped) + "."))
    reference_table(p, list(BENCHMARKS), card["numbers"])


def reference_table(p: Page, benchmarks: list[str], numbers: list[Mapping] | None = None) -> None:
    """The published rows of ``benchmarks`` with their sources and what they were
    measured on, each beside the card's own number of that metric when there is one."""
    from robustlab.metrics.reference import reference_rows

    ref = reference_rows(benchmarks)
    if ref.empty:
        return
    mine = {(n["benchmark"], n["metric"]): n for n in numbers or []}
    rows = []
    for r in ref.itertuples(index=False):
        n = mine.get((r.benchmark, r.metric))
        yours = (
            ""
            if n is None or n["value"] is None
            else f"{_value(n['value'], n['unit'])} (CI {_interval(n)}, {n['n_images']} images)"
        )
        if numbers is not None and not yours:
            ran = any(m["benchmark"] == r.benchmark for m in numbers)
            yours = "not measured here" if ran else "benchmark skipped"
        rows.append(
            {
                "benchmark": BENCHMARKS.get(r.benchmark, r.benchmark),
                "model": r.model,
                "metric": r.metric,
                "published": r.value,
                "yours": yours,
                "measured_on": r.measured_on,
                "source": r.source,
            }
        )
    cols = [
        column("text", "benchmark", "Benchmark"),
        column("text", "model", "Model"),
        column("text", "metric", "Metric"),
        column("score", "published", "Published", digits=2),
        *([column("text", "yours", "Yours")] if numbers is not None else []),
        column("text", "measured_on", "Measured on", css="wide"),
        column("text", "source", "Source", css="wide"),
    ]
    p.table(
        Table(
            "published",
            cols,
            rows,
            caption="Published numbers (package data, a source per value); comparable with "
            "a run only when measured on the same images",
        )
    )
