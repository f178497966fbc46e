"""Human verification of image sets: a local web app, decisions in the results database,
an agreement rule for the final set and Fleiss' kappa (``robustlab review``)."""

from robustlab.workflows.imagenet_d.review.agreement import (
    CATEGORIES,
    Verdict,
    fleiss_kappa,
    rating_table,
    verdict,
)
from robustlab.workflows.imagenet_d.review.final import CSV_COLUMNS, FinalSet, final_set, write_csv
from robustlab.workflows.imagenet_d.review.items import (
    ClassInfo,
    ReviewItem,
    ReviewSet,
    load_review_set,
)

__all__ = [
    "CATEGORIES",
    "Verdict",
    "fleiss_kappa",
    "rating_table",
    "verdict",
    "CSV_COLUMNS",
    "FinalSet",
    "final_set",
    "write_csv",
    "ClassInfo",
    "ReviewItem",
    "ReviewSet",
    "load_review_set",
]
