"""Table columns as data: a few kinds of value, and the columns every table shares.

The report's tables repeat the same columns (Model, Run, Clean top-1 %, mCE %, BG-gap %,
...). Each is defined once here, so a header, its tooltip and how its values are printed
cannot drift from one table to the next: a table names the columns it shows
(``col("clean_top1", key="clean")``) and builds its one-off columns from a kind
(``column("accuracy", "e:fog", "fog")``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from robustlab.workflows.report.html import Column, integer, num, pct, text


@dataclass(frozen=True)
class ColumnKind:
    """How one kind of value is printed, and whether it sorts and aligns as a number."""

    fmt: Callable[[Any], str]
    numeric: bool


# Fractions are printed as percentages with 2 decimals, as ``robustlab results`` prints them.
KINDS: dict[str, ColumnKind] = {
    "text": ColumnKind(text, False),
    "count": ColumnKind(integer, True),
    "accuracy": ColumnKind(pct, True),  # top-1 and its interval bounds
    "error": ColumnKind(pct, True),  # 1 - top-1
    "ce": ColumnKind(pct, True),  # CE, mCE and their relative forms
    "drop": ColumnKind(pct, True),  # accuracy lost, in points
    "share": ColumnKind(pct, True),  # any other fraction (kept, pointing game)
    "score": ColumnKind(num, True),  # S_robust, variances, estimates, p-values
}


@dataclass(frozen=True)
class ColumnSpec:
    """A shared column: its usual row key, header, kind and header tooltip."""

    key: str
    title: str
    kind: str = "text"
    tip: str = ""


# The one definition of "Shifted top-1 %" wherever the report shows it (summary, leaderboard).
SHIFTED_TOP1 = (
    "the mean over the run's shifted cells (shift x level) of each cell's top-1, every "
    "cell weighing the same, as `robustlab results --summary` computes it"
)

COLUMNS: dict[str, ColumnSpec] = {
    "model": ColumnSpec("label", "Model"),
    "run": ColumnSpec("run", "Run"),
    "suite": ColumnSpec("suite", "Suite"),
    "baseline": ColumnSpec("baseline", "Baseline"),
    "seed": ColumnSpec("seed", "Seed", "count"),
    "images": ColumnSpec("n", "Images", "count"),
    "clean_top1": ColumnSpec("clean_top1", "Clean top-1 %", "accuracy"),
    "shifted_top1": ColumnSpec("shifted_top1", "Shifted top-1 %", "accuracy", SHIFTED_TOP1),
    "clean_error": ColumnSpec("clean", "Clean error %", "error"),
    "mce": ColumnSpec("mce", "mCE %", "ce"),
    "rel_mce": ColumnSpec("relative_mce", "Rel. mCE %", "ce"),
    "s_partial": ColumnSpec("s_partial", "S partial (EX1)", "score"),
    "s_robust": ColumnSpec("s_robust", "S_robust", "score"),
    "bg_gap": ColumnSpec("bg_gap", "BG-gap %", "drop"),
    "term": ColumnSpec("term", "Term"),
    "ci_low": ColumnSpec("ci_low", "95 % CI low", "score"),
    "ci_high": ColumnSpec("ci_high", "95 % CI high", "score"),
    "stars": ColumnSpec("stars", "Signif."),
}


def column(
    kind: str,
    key: str,
    title: str,
    *,
    note: str = "",
    tip: str = "",
    digits: int | None = None,
    css: str = "",
) -> Column:
    """A column of ``kind`` (a key of :data:`KINDS`); ``digits`` overrides the kind's
    default number of decimals; ``css`` is :class:`Column`'s."""
    k = KINDS[kind]
    fmt = k.fmt if digits is None else functools.partial(k.fmt, digits=digits)
    return Column(key, title, fmt, k.numeric, note=note, tip=tip, css=css)


def col(
    name: str,
    *,
    key: str | None = None,
    title: str | None = None,
    tip: str | None = None,
    note: str = "",
) -> Column:
    """The shared column ``name`` (a key of :data:`COLUMNS`), reading ``key`` from the rows
    when the table's rows name it otherwise; ``title``/``tip`` replace the shared ones only
    where a table means something narrower."""
    s = COLUMNS[name]
    return column(
        s.kind,
        s.key if key is None else key,
        s.title if title is None else title,
        note=note,
        tip=s.tip if tip is None else tip,
    )


def model_run(run: bool = True) -> list[Column]:
    """The two columns most tables start with: who (Model) and which run (Run)."""
    return [col("model"), col("run")] if run else [col("model")]


__all__ = [
    "COLUMNS",
    "KINDS",
    "SHIFTED_TOP1",
    "ColumnKind",
    "ColumnSpec",
    "col",
    "column",
    "model_run",
]
