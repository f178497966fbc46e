"""The report's ImageNet-D workflow section: what mining kept (records, the surrogate curve,
transfer to held-out models, hard examples) and what people decided in review."""

from __future__ import annotations

from markupsafe import Markup

from robustlab.workflows.report.columns import column
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.html import WRONG_MARK, Table, data_uri, notes_list
from robustlab.workflows.report.page import Page
from robustlab.workflows.report.render import render

MINING_COLUMNS = [
    column("text", "mining_id", "Mining"),
    column("text", "data_root", "Candidates from"),
    column("text", "surrogates", "Surrogates"),
    column("text", "rule", "Rule"),
    column("count", "n_candidates", "Candidates"),
    column("count", "n_kept", "Kept"),
    column("share", "kept", "Kept %"),
]
TRANSFER_COLUMNS = [
    column("text", "heldout", "Held-out model"),
    column("count", "n_mined", "Kept"),
    column("accuracy", "mined_acc", "Top-1 on kept %"),
    column("accuracy", "random_mean", "Random same-size %"),
    column("accuracy", "random_lo", "2.5 %"),
    column("accuracy", "random_hi", "97.5 %"),
    column("score", "p_value", "p (one-sided)"),
]
REVIEW_COLUMNS = [
    column("text", "review_set", "Review set"),
    column("count", "images", "Images decided"),
    column("count", "annotators", "Annotators"),
    *(
        column("count", c, c.replace("_", " "))
        for c in ("accept", "reject", "not_single", "relabel")
    ),
    column("count", "kept", "Kept (2 of n)"),
    column("score", "kappa", "Fleiss' kappa"),
]


def mining_and_review(p: Page, d: ReportData, seed: int = 0) -> None:
    """ImageNet-D's workflow: what mining kept and what people decided."""
    if d.mining.empty and d.reviews.empty:
        return
    p.section(
        "hard-images",
        "Hard-image mining and human verification",
        "Mining keeps the candidates that k of n surrogate models get wrong; review "
        "decisions are each annotator's current one; an image is kept when at least 2 "
        "annotators accept it (or relabel it to the same class); Fleiss' kappa is over "
        "the images every annotator decided.",
    )
    if not d.mining.empty:
        p.table(
            Table(
                "mining",
                MINING_COLUMNS,
                d.mining.to_dict("records"),
                caption="robustlab mine records",
            )
        )
        _mining_analysis(p, d, seed)
    if not d.reviews.empty:
        p.table(
            Table(
                "reviews",
                REVIEW_COLUMNS,
                d.reviews.to_dict("records"),
                caption="robustlab review decisions",
            )
        )


def _mining_analysis(p: Page, d: ReportData, seed: int) -> None:
    """Per mining: the surrogate curve, transfer to held-out models, hard examples."""
    from robustlab.workflows.report.mining import curve_plot, mining_views

    for v in mining_views(d, seed=seed):
        i = v.mining_id
        p.add(
            render("mining_heading.html", mining_id=v.mining_id, surrogates=", ".join(v.surrogates))
        )
        p.figure(
            f"fig-mining-curve-{i}",
            curve_plot(v),
            "ImageNet-D's first claim: with more surrogates that must all be wrong, fewer "
            "candidates are kept, and the kept ones are harder for models that were not "
            "used to mine them (each point averages every subset of that many surrogates).",
            "line plots of the kept fraction and held-out accuracy against the number of "
            "surrogates",
        )
        if v.transfer:
            p.table(
                Table(
                    f"mining-transfer-{i}",
                    TRANSFER_COLUMNS,
                    v.transfer,
                    caption="Transfer (the second claim): a held-out model's top-1 on "
                    "the mined set against random subsets of the same candidates and size; p is "
                    "the share of random subsets at or below the mined accuracy",
                )
            )
        elif len(v.curve.columns) == 4:
            v.notes.append(
                "no held-out model: evaluate another model on the same candidates "
                "(robustlab evaluate ... --data <the candidates>) to measure transfer"
            )
        if v.examples:
            p.add(_hard_examples(v.examples, i))
        if v.notes:
            p.add(notes_list(v.notes))


def _hard_examples(examples: list[dict], i: str) -> Markup:
    """The kept images as thumbnails, each with every surrogate's wrong guess."""
    from robustlab.workflows.report.mining import thumbnail

    shown = []
    for ex in examples:
        thumb = thumbnail(ex["path"]) if ex["readable"] else None
        shown.append({**ex, "src": data_uri(*thumb) if thumb else ""})
    return render("hard_examples.html", id=i, examples=shown, wrong_mark=WRONG_MARK)
