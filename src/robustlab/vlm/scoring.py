"""ImageNet-D's scoring of a free-text VLM answer to the two-choice question.

An option counts as named when its class text, or one of its variants, occurs in the
lower-cased answer (plain substring match, as published). An answer naming exactly one
option is right or wrong; one naming both or neither is dropped and counted, and accuracy
is right / (right + wrong).

One case needs care: when one option's text lies inside the other's ("pen" in "can
opener", "plate" in "drying rack for plates"), the longer option decides whenever it is
named, and the shorter one is tested only otherwise. The published scorer special-cases
exactly those two pairs; here the rule applies to any such pair.
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
}


@dataclass(frozen=True)
class Verdict:
    """What an answer said: the option it chose (None when dropped), whether that is the
    truth (None when dropped), and why it was dropped ("both" or "neither", else None)."""

    chosen: str | None
    correct: bool | None
    dropped: str | None


def names(option: str, answer: str, variants=VARIANTS) -> bool:
    """True when the lower-cased ``answer`` contains ``option`` or one of its variants."""
    text = answer.lower()
    return any(v in text for v in (option.lower(), *variants.get(option.lower(), ())))


def score_answer(answer: str, gt: str, distractor: str, variants=VARIANTS) -> Verdict:
    """Score a free-text answer to the question with options ``gt`` and ``distractor``."""
    g, d = gt.lower(), distractor.lower()
    if g != d and (g in d or d in g):
        longer, shorter = (g, d) if d in g else (d, g)
        hit = (
            longer
            if names(longer, answer, variants)
            else (shorter if names(shorter, answer, variants) else None)
        )
        if hit is None:
            return Verdict(None, None, "neither")
        return Verdict(gt if hit == g else distractor, hit == g, None)
    said_gt, said_d = names(g, answer, variants), names(d, answer, variants)
    if said_gt and said_d:
        return Verdict(None, None, "both")
    if not (said_gt or said_d):
        return Verdict(None, None, "neither")
    return Verdict(gt if said_gt else distractor, said_gt, None)
