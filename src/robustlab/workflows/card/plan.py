"""Which benchmarks a card can run from its inputs, and why it skips the others.

Each benchmark is one ``evaluate`` run (ImageNet-D: the set's folder on its label space):
its identity is the same as the one ``robustlab evaluate`` with the same options would
make, so a run stored earlier (by a card or by hand) is resumed, not recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from robustlab.workflows.card.request import CardRequest

# The card's benchmarks, in the card's order, and how it names them.
TITLES = {
    "imagenet-c": "ImageNet-C",
    "ximagenet12": "XIMAGENET-12",
    "imagenet9": "ImageNet-9",
    "imagenet-e": "ImageNet-E",
    "imagenet-d": "ImageNet-D",
}
MASKED = ("ximagenet12", "imagenet9", "imagenet-e")


@dataclass(frozen=True)
class Step:
    """One evaluate run of the card.

    Attributes:
        benchmark: Key of :data:`TITLES`.
        model: The model spec evaluated (the card's model, or the CE baseline).
        data: The folder evaluated.
        suite: The suite (None: ImageNet-D's folder, clean cells only).
        shifts: The suite's shifts the card runs (None: all of them).
        role: ``model`` or ``baseline``.
        labels: ``(file, class)`` rows of the labels CSV the step reads (ImageNet-9: the
            photos of its 370 classes, labelled with their superclass), None: the data's own.
    """

    benchmark: str
    model: str
    data: Path
    suite: str | None
    shifts: tuple[str, ...] | None = None
    role: str = "model"
    labels: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True)
class CardPlan:
    """The steps in order, the benchmarks skipped and the shifts left out, with reasons."""

    steps: tuple[Step, ...]
    skipped: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, list[str]] = field(default_factory=dict)
    masks: Path | None = None


def _runnable(suite: str, classes: list) -> tuple[list[str], list[str]]:
    """A suite's shifts the card runs: those that need no generative model and whose
    donor rule the photos' ``classes`` can serve (a donor of the same class needs two
    photos of one class, one of another class two classes; otherwise every image would be
    a counted skip); the others with the reason."""
    from robustlab.shifts.registry import get_shift, needs_resource
    from robustlab.suites import get_suite

    kept, dropped = [], []
    for name in get_suite(suite).shifts:
        shift = get_shift(name)
        if needs_resource(shift):
            dropped.append(
                f"{name}: needs a generative model (run `robustlab evaluate --suite {suite}` "
                "with it configured)"
            )
        elif shift.extra.get("donor_rule") == "same" and not _has_pairs(classes):
            dropped.append(
                f"{name}: needs a second photo of the same class as its donor; every class "
                "here has one photo"
            )
        elif shift.extra.get("donor_rule") in ("random", "next") and len(set(classes)) < 2:
            dropped.append(f"{name}: needs a donor of another class; the photos have one class")
        else:
            kept.append(name)
    return kept, dropped


def _has_pairs(classes) -> bool:
    """Whether some class has two photos or more."""
    from collections import Counter

    return any(n > 1 for n in Counter(classes).values())


def imagenet9_labels(samples) -> tuple[tuple[str, str], ...]:
    """``(file, superclass)`` of the photos whose class is one of ImageNet-9's: that
    benchmark scores 9 superclasses (a prediction counts when its ImageNet class maps to
    the photo's), and a photo of another class has no label there."""
    from robustlab.data.labels import get_label_space
    from robustlab.errors import InputError

    space = get_label_space("imagenet9")
    rows = []
    for smp in samples:
        try:
            rows.append((smp.id, space.classes[space.index_of(smp.class_name)]))
        except (InputError, KeyError, ValueError):
            continue
    return tuple(rows)


def _selected(suite: str, shifts: list[str], req: CardRequest) -> list[str]:
    """The shifts of ``shifts`` that ``req.shifts`` / ``req.levels`` select (the one
    selection grammar, ``Suite.select``); all of them without a selection."""
    from robustlab.errors import InputError
    from robustlab.suites import get_suite

    if req.shifts is None and req.levels is None:
        return shifts
    s = get_suite(suite)
    chosen: set[str] = set()
    for pattern in req.shifts if req.shifts is not None else [None]:
        try:
            cells = s.select(None if pattern is None else [pattern], req.levels)
        except InputError:  # the pattern names another suite's shifts, or no such level
            continue
        chosen.update(c.shift for c in cells.cells)
    return [x for x in shifts if x in chosen]


def _step(req: CardRequest, suite: str, kept: list[str], skipped: dict[str, str]):
    """The step of ``suite`` for the selected shifts, or None (and why) when none is."""
    chosen = _selected(suite, kept, req)
    if not chosen:
        skipped[suite] = "no shift of the suite matches the --shift/--level selection"
        return None
    whole = req.shifts is None and req.levels is None and suite == "imagenet-c"
    return Step(suite, req.model, req.data, suite, None if whole else tuple(chosen))


def plan_card(req: CardRequest) -> CardPlan:
    """The card's steps from what the request gives (no model is loaded here)."""
    masks = (
        req.masks if req.masks is not None else (req.inputs / "masks" if req.auto_masks else None)
    )
    from robustlab.suites import get_suite

    skipped: dict[str, str] = {}
    left_out: dict[str, list[str]] = {}
    steps = []
    first = _step(req, "imagenet-c", list(get_suite("imagenet-c").shifts), skipped)
    if first is not None:
        steps.append(first)
        if req.baseline:
            steps.append(replace(first, model=req.baseline, role="baseline"))
    samples = []
    if masks is not None:
        from robustlab.data.sources import discover

        samples = list(discover(req.data, labels_csv=req.labels_csv))
    in9 = imagenet9_labels(samples)
    for suite in MASKED:
        if masks is None:
            skipped[suite] = "needs foreground masks: pass --masks DIR, or --auto-masks"
            continue
        if suite == "imagenet9" and not in9:
            skipped[suite] = "no photo is of one of ImageNet-9's 370 ImageNet classes"
            continue
        classes = [c for _, c in in9] if suite == "imagenet9" else [s.class_name for s in samples]
        kept, dropped = _runnable(suite, classes)
        if dropped:
            left_out[suite] = dropped
        step = _step(req, suite, kept, skipped)
        if step is not None:
            steps.append(replace(step, labels=in9) if suite == "imagenet9" else step)
    if req.imagenet_d is None:
        skipped["imagenet-d"] = (
            "needs an ImageNet-D set: pass --imagenet-d DIR (the published download, or "
            "your synth/mine/review output)"
        )
    else:
        steps.append(Step("imagenet-d", req.model, req.imagenet_d, None))
    return CardPlan(tuple(steps), skipped, left_out, masks)
