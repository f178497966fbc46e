"""The report's example images: informative samples re-rendered under every stored cell,
with each model's prediction under each picture (the grids come from :mod:`.grid`)."""

from __future__ import annotations

from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.html import CORRECT_MARK, WRONG_MARK, data_uri, notes_list
from robustlab.workflows.report.headline import RANDOM_MARK, RANDOM_NOTE
from robustlab.workflows.report.page import Page
from robustlab.workflows.report.render import render

INTRO = (
    "Informative samples of different classes (the cells where models disagree, a "
    "mask covering 10-60 % of the picture when the runs used masks), clean and under "
    "every stored cell, re-rendered from the run's data root and seed with the same "
    "pipeline the model saw. Under each image: each model's top-1 prediction, "
    f"{CORRECT_MARK} correct / {WRONG_MARK} wrong."
)


def grids_section(p: Page, d: ReportData, sample_id: str | None, notes: list[str]) -> int:
    """Add the example grids (the first open, the others folded); returns how many."""
    from robustlab.workflows.report.grid import build_grids

    grids, grid_notes = build_grids(d, sample_id=sample_id)
    notes.extend(grid_notes)
    p.section("examples", "Example images", INTRO)
    if not grids:
        p.add(notes_list(grid_notes or ["no image grid: no sample to show"]))
        return 0
    flagged = {d.labels[rid] for rid in p.flagged if rid in d.labels}
    p.add(
        render(
            "grids.html",
            grids=[_grid_view(g, flagged) for g in grids],
            correct_mark=CORRECT_MARK,
            wrong_mark=WRONG_MARK,
            random_mark=RANDOM_MARK,
        )
    )
    return len(grids)


def _grid_view(g, flagged: set[str]) -> dict:
    """One sample's grid as the template lays it out: a row per shift (its label, its
    pictures, the blank cells that square it), a run in ``flagged`` marked as on
    random-weight images."""
    from robustlab.workflows.report.grid import PNG_LIMIT

    lossless = sum(len(c) for _, c in g.rows) <= PNG_LIMIT
    marked = flagged & {pr.label for _, cells in g.rows for c in cells for pr in c.predictions}
    width = max(len(c) for _, c in g.rows)
    return {
        "sample_id": g.sample_id,
        "true_class": g.true_class,
        "runs": ", ".join(g.runs),
        "data_root": g.data_root,
        "seed": g.seed,
        "embedded": "PNG (exact pixels)" if lossless else "JPEG q90",
        "rows": [
            (
                label,
                [_cell_view(g.sample_id, c, lossless, marked) for c in cells],
                width - len(cells),
            )
            for label, cells in g.rows
        ],
        "notes": [*g.notes, *([RANDOM_NOTE] if marked else [])],
    }


def _cell_view(sample_id: str, c, lossless: bool, flagged: set[str]) -> dict:
    """One picture (a ``data:`` URI, or why it was not rendered) and its predictions."""
    from robustlab.workflows.report.grid import encode_thumb

    src = data_uri(*encode_thumb(c.image, lossless)) if c.image is not None else ""
    return {
        "src": src,
        "alt": f"{sample_id} {c.shift} level {c.level}",
        "error": c.error,
        "caption": c.caption or ("clean" if c.shift == CLEAN_SHIFT else f"level {c.level}"),
        "predictions": [
            {
                "correct": pr.correct,
                "label": pr.label,
                "flagged": pr.label in flagged,
                "top1": pr.top1,
                "percent": f"{100 * pr.prob:.0f}",
            }
            for pr in c.predictions
        ],
    }
