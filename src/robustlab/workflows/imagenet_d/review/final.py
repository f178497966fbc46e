"""The final set: every image's verdict under the k-of-n rule, agreement, and the CSV.

The exported CSV is also a robustlab labels CSV (``file`` + ``class``), so the kept set, with
its agreed relabels, can be evaluated directly: ``robustlab evaluate MODEL --data DIR
--labels final.csv`` reads only the listed files, under their final classes.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from robustlab.workflows.imagenet_d.review.agreement import fleiss_kappa, rating_table, verdict
from robustlab.workflows.imagenet_d.review.items import ReviewSet
from robustlab.store.reviews import ReviewStore

CSV_COLUMNS = (
    "file",
    "class",
    "class_name",
    "wnids",
    "original_class",
    "relabelled",
    "support",
    "n_annotators",
    "n_accept",
    "n_reject",
    "n_not_single",
    "n_relabel",
)


@dataclass
class FinalSet:
    """The outcome of a review.

    Attributes:
        rows: One dict per kept image (the CSV's columns), in set order.
        k: Votes an image needed.
        n_images: Images in the set.
        n_reviewed: Images with at least one current decision.
        annotators: Who has current decisions in the set, sorted.
        kappa: Fleiss' kappa over the images every annotator reviewed (None: undefined).
        kappa_items: How many images that was.
        reasons: Count of not-kept images per reason (``unreviewed``, ``too few votes``, ``tie``).
        notes: Things the user should know (for example, k above the annotator count).
    """

    rows: list[dict]
    k: int
    n_images: int
    n_reviewed: int
    annotators: list[str]
    kappa: float | None
    kappa_items: int
    reasons: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def n_kept(self) -> int:
        return len(self.rows)

    @property
    def n_relabelled(self) -> int:
        return sum(1 for r in self.rows if r["relabelled"])

    def summary(self) -> str:
        kappa = "undefined" if self.kappa is None else f"{self.kappa:.3f}"
        return (
            f"{self.n_kept} of {self.n_images} images kept ({self.n_relabelled} relabelled; "
            f"rule: at least {self.k} agreeing vote(s)); {self.n_reviewed} reviewed by "
            f"{len(self.annotators)} annotator(s); Fleiss' kappa {kappa} over "
            f"{self.kappa_items} image(s) reviewed by all of them"
        )


def final_set(review_set: ReviewSet, store: ReviewStore, *, k: int = 2) -> FinalSet:
    """Apply the agreement rule to the current decisions of every annotator in the set."""
    per_image: dict[str, list] = defaultdict(list)
    annotators = set()
    for d in store.current(review_set.name):
        if review_set.item_by_id(d.image_id) is None:
            continue  # an image since removed from the folder: nothing to keep
        per_image[d.image_id].append(d)
        annotators.add(d.annotator)
    rows, reasons = [], defaultdict(int)
    for item in review_set.items:
        decisions = per_image.get(item.id, [])
        v = verdict(item.label, [(d.decision, d.target) for d in decisions], k)
        if not v.kept:
            reasons[v.reason] += 1
            continue
        info = review_set.class_info(v.label)
        rows.append(
            {
                "file": item.id,
                "class": v.label,
                "class_name": info.name if info else v.label,
                "wnids": " ".join(info.wnids) if info else "",
                "original_class": item.label,
                "relabelled": v.relabelled,
                "support": v.support,
                "n_annotators": len(decisions),
                "n_accept": v.votes["accept"],
                "n_reject": v.votes["reject"],
                "n_not_single": v.votes["not_single"],
                "n_relabel": v.votes["relabel"],
            }
        )
    names = sorted(annotators)
    table = rating_table(
        [
            [_category(d, item_label=review_set.item_by_id(i).label) for d in ds]
            for i, ds in per_image.items()
        ],
        len(names),
    )
    kappa = fleiss_kappa(table) if len(names) >= 2 else None
    notes = []
    if not per_image:
        others = [name for name in store.review_sets() if name != review_set.name]
        notes.append(
            f"no decisions are stored for set {review_set.name!r} in {store.path}"
            + (
                f"; it has decisions for {', '.join(map(repr, others))} (pass that "
                "name with --set if the folder moved)"
                if others
                else ""
            )
        )
    if names and k > len(names):
        notes.append(
            f"k = {k} but only {len(names)} annotator(s) reviewed this set: "
            "no image can be kept yet"
        )
    if len(names) < 2:
        notes.append("agreement needs at least 2 annotators")
    return FinalSet(
        rows=rows,
        k=k,
        n_images=len(review_set),
        n_reviewed=len(per_image),
        annotators=names,
        kappa=kappa,
        kappa_items=int(table.shape[0]),
        reasons=dict(reasons),
        notes=notes,
    )


def _category(decision, *, item_label: str) -> str:
    """The kappa category of a decision (a relabel to the image's own class is an accept)."""
    if decision.decision == "relabel" and decision.target == item_label:
        return "accept"
    return decision.decision


def write_csv(final: FinalSet, out, *, force: bool = False) -> Path:
    """Write the kept images (see :data:`CSV_COLUMNS`) and return the path.

    Through :func:`robustlab.files.safety.write_output`: never over a file that is not a CSV
    unless ``force``, and renamed into place (the CLI first checks ``out`` against the
    data folder, the predictions CSV and the database).
    """
    import io

    from robustlab.files.safety import write_output

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(final.rows)
    return write_output(out, buf.getvalue(), kind="csv", flag="--export", force=force)


__all__ = ["FinalSet", "final_set", "write_csv", "CSV_COLUMNS"]
