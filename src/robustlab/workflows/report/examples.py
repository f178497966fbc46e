"""The report's example images: informative samples re-rendered under every stored cell,
with each model's prediction under each picture (the grids come from :mod:`.grid`)."""

from __future__ import annotations

from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.html import CORRECT_MARK, WRONG_MARK, data_uri, esc, notes_list
from robustlab.workflows.report.headline import RANDOM_MARK, RANDOM_NOTE
from robustlab.workflows.report.page import Page

INTRO = (
    "Informative samples of different classes (the cells where models disagree, a "
    "mask covering 10-60 % of the picture when the runs used masks), clean and under "
    "every stored cell, re-rendered from the run's data root and seed with the same "
    "pipeline the model saw. Under each image: each model's top-1 prediction, "
    f"{CORRECT_MARK} correct / {WRONG_MARK} wrong."
)


def grids_section(p: Page, d: ReportData, sample_id: str | None, notes: list[str]) -> int:
    """Add the example grids (the first open, the others folded); returns how many."""
    from robustlab.workflows.report.grid import PNG_LIMIT, build_grids

    grids, grid_notes = build_grids(d, sample_id=sample_id)
    notes.extend(grid_notes)
    p.section("examples", "Example images", INTRO)
    if not grids:
        p.add(notes_list(grid_notes or ["no image grid: no sample to show"]))
        return 0
    for gi, g in enumerate(grids):
        n_img = sum(len(c) for _, c in g.rows)
        lossless = n_img <= PNG_LIMIT
        head = f"<h3>{esc(g.sample_id)}: true class {esc(g.true_class)}</h3>"
        if gi == 1:
            # the first sample open, the others one click away (each is a screen or more)
            p.add(f'<details class="more"><summary>{len(grids) - 1} more sample(s)</summary>')
        p.add(
            head + f'<p class="note">Runs: {esc(", ".join(g.runs))}; data root {esc(g.data_root)}; '
            f"seed {g.seed}; pictures embedded as {'PNG (exact pixels)' if lossless else 'JPEG q90'}.</p>"
        )
        flagged = {d.labels[rid] for rid in p.flagged if rid in d.labels}
        marked = flagged & {pr.label for _, cells in g.rows for c in cells for pr in c.predictions}
        p.add(
            _grid_table(g, gi, lossless, marked)
            + notes_list([*g.notes, *([RANDOM_NOTE] if marked else [])])
        )
    if len(grids) > 1:
        p.add("</details>")
    return len(grids)


def _grid_table(g, gi: int, lossless: bool, flagged: set[str]) -> str:
    """One sample's grid: a row per shift, a picture per level with the predictions (a
    run in ``flagged`` marked as on random-weight images)."""
    width = max(len(c) for _, c in g.rows)
    out = [f'<div class="table-wrap"><table class="grid" id="grid-{gi}"><tbody>']
    for row_label, cells in g.rows:
        out.append(f'<tr><th scope="row">{esc(row_label)}</th>')
        for c in cells:
            out.append(_grid_cell(g.sample_id, c, lossless, flagged))
        out.append("<td></td>" * (width - len(cells)) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _grid_cell(sample_id: str, c, lossless: bool, flagged: set[str]) -> str:
    from robustlab.workflows.report.grid import encode_thumb

    cap = c.caption or ("clean" if c.shift == CLEAN_SHIFT else f"level {c.level}")
    if c.image is not None:
        data, mime = encode_thumb(c.image, lossless)
        img = (
            f'<img src="{data_uri(data, mime)}" alt="{esc(sample_id)} '
            f'{esc(c.shift)} level {esc(c.level)}">'
        )
    else:
        img = f'<p class="note">not rendered: {esc(c.error)}</p>'
    preds = "".join(
        f'<span class="pred {"ok" if pr.correct else "bad"}"><span class="mark" '
        f'aria-label="{"correct" if pr.correct else "wrong"}">'
        f"{CORRECT_MARK if pr.correct else WRONG_MARK}</span>{esc(pr.label)}"
        f"{' ' + esc(RANDOM_MARK) if pr.label in flagged else ''}: "
        f"{esc(pr.top1)} ({100 * pr.prob:.0f} %)</span>"
        for pr in c.predictions
    )
    return (
        f'<td><figure class="thumb">{img}<figcaption><strong>{esc(cap)}</strong>'
        f"{preds}</figcaption></figure></td>"
    )
