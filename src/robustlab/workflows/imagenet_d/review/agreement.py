"""Turning several people's decisions into a final set, and measuring how much they agree.

The final-set rule is "k of n": an image is kept with its own label when at least ``k``
annotators accepted it, and with a new label when at least ``k`` annotators relabelled it to
the same class (ImageNet-D keeps images that people confirm show one object of the class;
the paper does not publish its rule, so ``k`` is a parameter, default 2). Rejections and
"not a single object" votes never keep an image. When two labels both reach ``k`` (possible
only when ``k`` is at most half the annotators) the one with more votes wins; a tie keeps
nothing, because nobody agreed on what the image shows.

Agreement is Fleiss' kappa (Fleiss 1971): chance-corrected agreement of a fixed number of
raters per item over nominal categories, here the four decisions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# Fleiss' kappa categories: the decisions themselves (a relabel counts as one category,
# whatever class it names; agreement on the new class is the final-set rule's business).
CATEGORIES = ("accept", "reject", "not_single", "relabel")


def fleiss_kappa(counts) -> float | None:
    """Fleiss' kappa of an items x categories table of rating counts.

    Args:
        counts: ``counts[i, j]`` = how many raters put item ``i`` in category ``j``; every
            row must sum to the same number of raters n >= 2.

    Returns:
        kappa = (P_bar - P_e) / (1 - P_e), where P_i = (sum_j n_ij^2 - n) / (n (n - 1)) is
        item i's pairwise agreement, P_bar their mean, and P_e = sum_j p_j^2 with p_j the
        share of all ratings in category j. None when it is undefined: no items, or every
        rating in one category (P_e = 1, nothing to correct for).

    Raises:
        ValueError: rows with different rater counts, fewer than 2 raters, negative counts.
    """
    table = np.asarray(counts, dtype=np.float64)
    if table.ndim != 2:
        raise ValueError(f"counts must be a 2-d items x categories table, not shape {table.shape}")
    if table.shape[0] == 0:
        return None
    if (table < 0).any():
        raise ValueError("rating counts cannot be negative")
    raters = table.sum(axis=1)
    n = raters[0]
    if not np.all(raters == n):
        raise ValueError("Fleiss' kappa needs the same number of raters for every item")
    if n < 2:
        raise ValueError("Fleiss' kappa needs at least 2 raters per item")
    p_item = ((table**2).sum(axis=1) - n) / (n * (n - 1))
    p_bar = p_item.mean()
    p_cat = table.sum(axis=0) / table.sum()
    p_e = float((p_cat**2).sum())
    if np.isclose(p_e, 1.0):
        return None
    return float((p_bar - p_e) / (1.0 - p_e))


@dataclass(frozen=True)
class Verdict:
    """What the agreement rule made of one image.

    Attributes:
        kept: Whether the image is in the final set.
        label: Its final class key (the original label, or the agreed relabel target) when
            kept, else None.
        relabelled: Kept under a class other than its own.
        votes: Decision counts (``accept``, ``reject``, ``not_single``, ``relabel``).
        support: Votes for the final label (0 when not kept).
        reason: Why it was not kept: ``"unreviewed"``, ``"too few votes"``, ``"tie"``.
    """

    kept: bool
    label: str | None
    relabelled: bool
    votes: dict
    support: int
    reason: str | None = None


def verdict(label: str, decisions: Iterable[tuple[str, str | None]], k: int) -> Verdict:
    """Apply the k-of-n rule to one image's current decisions.

    Args:
        label: The image's own class key.
        decisions: ``(decision, target)`` per annotator; ``target`` is the relabel class
            key (a relabel to the image's own class counts as an accept).
        k: Votes a label needs (>= 1).
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    votes = Counter({c: 0 for c in CATEGORIES})
    for_label: Counter = Counter()
    for decision, target in decisions:
        if decision == "relabel" and target == label:
            decision = "accept"
        votes[decision] += 1
        if decision == "accept":
            for_label[label] += 1
        elif decision == "relabel":
            for_label[target] += 1
    votes = dict(votes)
    if sum(votes.values()) == 0:
        return Verdict(False, None, False, votes, 0, "unreviewed")
    reaching = [(n, key) for key, n in for_label.items() if n >= k]
    if not reaching:
        return Verdict(False, None, False, votes, 0, "too few votes")
    reaching.sort(reverse=True)
    if len(reaching) > 1 and reaching[0][0] == reaching[1][0]:
        return Verdict(False, None, False, votes, 0, "tie")
    support, key = reaching[0]
    return Verdict(True, key, key != label, votes, support)


def rating_table(per_image: Sequence[Sequence[str]], n_raters: int) -> np.ndarray:
    """Items x :data:`CATEGORIES` counts for the images rated by exactly ``n_raters``.

    Fleiss' kappa needs a fixed number of raters per item, so images that not every
    annotator has reviewed yet are left out (the caller reports how many were used).
    """
    rows = []
    for decisions in per_image:
        if len(decisions) != n_raters:
            continue
        c = Counter(decisions)
        rows.append([c.get(cat, 0) for cat in CATEGORIES])
    return np.asarray(rows, dtype=np.int64).reshape(-1, len(CATEGORIES))


__all__ = ["CATEGORIES", "fleiss_kappa", "Verdict", "verdict", "rating_table"]
