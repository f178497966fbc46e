"""Plain-text, Markdown, CSV and JSON rendering of the tables every command prints."""

from __future__ import annotations

PERCENT = (
    "top1",
    "top5",
    "error",
    "ce",
    "relative_ce",
    "clean_top1",
    "shifted_top1",
    "mce",
    "relative_mce",
    "bg_gap",
    "diff",
    "diff_lo",
    "diff_hi",
    "top1_a",
    "top1_b",
)
SCORES = ("s_robust", "s_partial")
COUNTS = ("n", "images", "n_a", "n_b", "n_shared", "seed")


def format_table(df, fmt: str) -> str:
    """Render a results table; fractions as percentages for the human formats."""
    import math

    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return df.to_json(orient="records", indent=1) + "\n"

    def cell(col, v):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        if col in PERCENT:
            return f"{100 * float(v):.2f}"
        if col in SCORES:
            return f"{float(v):.4f}"
        if col in COUNTS:
            return str(int(v))
        return str(v)

    cols = list(df.columns)
    numeric = set(PERCENT) | set(SCORES) | set(COUNTS)
    heads = [c + (" %" if c in PERCENT else "") for c in cols]
    rows = [[cell(c, v) for c, v in zip(cols, rec)] for rec in df.itertuples(index=False)]
    if fmt == "markdown":
        lines = [
            "| " + " | ".join(heads) + " |",
            "|" + "|".join("---:" if c in numeric else "---" for c in cols) + "|",
        ]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(heads)
    ]

    def line(vals):
        return "  ".join(
            v.rjust(w) if c in numeric else v.ljust(w) for v, w, c in zip(vals, widths, cols)
        ).rstrip()

    return "\n".join([line(heads), *(line(r) for r in rows)]) + "\n"
