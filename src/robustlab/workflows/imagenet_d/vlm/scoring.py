"""ImageNet-D's scoring of a free-text VLM answer to the two-choice question.

An option counts as named when its class text, or one of its variants, occurs in the
lower-cased answer (plain substring match, as published). An answer naming exactly one
option is right or wrong; one naming both or neither is dropped and counted, and accuracy
is right / (right + wrong).

Two rules (:data:`RULES`):

- ``official`` (the default): ImageNet-D's ``LLaVA/compute_accuracy.py`` verdict for verdict.
  It special-cases exactly two pairs whose one text lies inside the other ("pen" in "can
  opener", "plate" in "drying rack for plates"): there the distractor is tested first when
  the truth is the shorter text, the truth first when it is the longer one. Every other
  pair naming both options is dropped, including pairs where one text hides inside the
  other by accident ("pen" in "laptop (open)", "letter opener", "soap dispenser").
- ``nested``: the stricter generalisation: whenever one option's text lies inside the
  other's, the longer option decides when it is named and the shorter one is tested only
  otherwise. It scores answers that ``official`` drops as "both", so its accuracies are
  not the paper's; it is an option, never the default.

``tests/fixtures/imagenet_d_scorer_grid.npz`` holds the official script's verdicts on
every ordered class pair x 6 answer forms (``benchmarks/imagenet_d_scorer.py`` runs it),
and a test checks :func:`score_answer` gives the same on all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Other ways an answer names a class: the variants of ImageNet-D's scorer
# (chenshuang-zhang/imagenet_d, LLaVA/compute_accuracy.py, MIT), keyed by the class text
# the question uses (ImageNet-D's CLIP names).
VARIANTS: dict[str, tuple[str, ...]] = {
    "alarm clock": ("clock",),
    "band aid": ("band-aid", "bandaid"),
    "binder (closed)": ("binder",),
    "bread loaf": ("bread",),
    "cellphone": ("cell phone", "mobile phone"),
    "coffee or french press": ("coffee press", "french press", "coffee machine", "coffee maker"),
    "computer mouse": ("mouse",),
    "dishcloth": ("dishrag",),
    "dress shoe (men)": ("dress shoe",),
    "iron (for clothes)": ("iron",),
    "ladle": ("spoon",),
    "lampshade": ("lamp shade",),
    "laptop (open)": ("laptop",),
    "matchstick": ("match",),
    "mixing or salad bowl": ("mixing bowl", "salad bowl"),
    "nail (fastener)": ("nail",),
    "pill bottle": ("pill",),
    "pop can": ("can of",),
    "portable heater": ("heater",),
    "sandal": ("flip flop",),
    "soup bowl": ("bowl of soup",),
    "still camera": ("camera",),
    "swimming trunks": ("swimming trunk",),
    "t shirt": ("t-shirt", "shirt"),
    "toilet paper roll": ("roll of toilet paper",),
    "trash bin": ("trash can",),
    "tv": ("television",),
    "water bottle": ("bottle of water",),
    "weight (exercise)": ("dumbbell", "weight"),
    "weight scale": ("scale",),
    "wheel": ("bicycle wheel",),
    "winter glove": ("glove",),
}

# The two ordered pairs of each special case of the published scorer: (truth, distractor)
# -> which option it tests first. Only these; other nested texts are not special there.
OFFICIAL_ORDER: dict[tuple[str, str], str] = {
    ("pen", "can opener"): "distractor",
    ("plate", "drying rack for plates"): "distractor",
    ("can opener", "pen"): "gt",
    ("drying rack for plates", "plate"): "gt",
}
RULES = ("official", "nested")


@dataclass(frozen=True)
class Verdict:
    """What an answer said: the option it chose (None when dropped), whether that is the
    truth (None when dropped), and why it was dropped ("both" or "neither", else None)."""

    chosen: str | None
    correct: bool | None
    dropped: str | None


def names(option: str, answer: str, variants=VARIANTS) -> bool:
    """True when the lower-cased ``answer`` contains ``option`` or one of its variants
    (variants are looked up by the option text as the question writes it)."""
    text = answer.lower()
    return any(v in text for v in (option, *variants.get(option, ())))


def check_rule(rule: str) -> str:
    from robustlab.errors import InputError

    if rule not in RULES:
        raise InputError(f"unknown scoring rule {rule!r}; rules are {', '.join(RULES)}")
    return rule


def score_answer(
    answer: str, gt: str, distractor: str, variants=VARIANTS, rule: str = "official"
) -> Verdict:
    """Score a free-text answer to the question with options ``gt`` and ``distractor``.

    ``rule``: ``"official"`` (ImageNet-D's compute_accuracy.py) or ``"nested"`` (see the
    module docstring).
    """
    said_gt, said_d = names(gt, answer, variants), names(distractor, answer, variants)
    first = None
    if check_rule(rule) == "official":
        first = OFFICIAL_ORDER.get((gt, distractor))
    else:
        g, d = gt.lower(), distractor.lower()
        if g != d and (g in d or d in g):
            first = "distractor" if g in d else "gt"
    if first is not None:
        order = [("gt", said_gt), ("distractor", said_d)]
        for who, said in order if first == "gt" else order[::-1]:
            if said:
                return Verdict(gt if who == "gt" else distractor, who == "gt", None)
        return Verdict(None, None, "neither")
    if said_gt and said_d:
        return Verdict(None, None, "both")
    if not (said_gt or said_d):
        return Verdict(None, None, "neither")
    return Verdict(gt if said_gt else distractor, said_gt, None)
