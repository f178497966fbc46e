"""Robustness training methods of the ImageNet-C paper, and the experiment that scores them.

A *method* changes what one optimiser step sees and minimises:

- ``plain``: cross-entropy on clean images (the control: fine-tuning alone).
- ``stability``: :class:`robustlab.workflows.train.stability.StabilityTraining`.
- ``corruption-aug``: :class:`robustlab.workflows.train.augment.CorruptionAugmentation`.

A method object has ``items(items, step=, samples=, seed=)`` (which cells the step's
images are), ``loss(forward, x, labels, columns, gen, preprocessing)``, ``describe()``
(recorded as ``record["method"]``; :func:`record_label` names it). Plain fine-tuning is
:class:`robustlab.workflows.train.finetune.PlainTraining`, and :func:`robustlab.workflows.train.finetune.finetune`
runs every method in one loop, in either training mode; in ``linear`` mode the frozen
backbone runs on every step's images (they change from step to step), unlike the plain
probe's cached features.

:func:`run_method` is the experiment: fine-tune on the clean training split with each
method, evaluate every checkpoint and the un-fine-tuned model on the test split under the
corruption suite, and give each checkpoint's mCE relative to the un-fine-tuned model (whose
CE is 1 by definition: on data other than the ImageNet validation set the baseline must be
a model measured on the same images).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from robustlab.errors import InputError
from robustlab.store import CLEAN_SHIFT
from robustlab.store.naming import record_label

log = logging.getLogger(__name__)

METHODS = ("plain", "stability", "corruption-aug")
# Suites whose shifts all carry one of these tags have corruption errors (mCE).
CORRUPTION_TAGS = frozenset({"imagenet-c", "imagenet-c-extra"})


def make_methods(
    name: str,
    *,
    noises: Sequence[float] = (0.05,),
    weights: Sequence[float] = (0.05,),
    holdout_families: Sequence[str] = (),
    clean_fraction: float = 0.5,
) -> list:
    """The method objects one command line asks for (None stands for ``plain``).

    ``stability`` gives one method per (noise, weight) pair: the paper's grid is
    ``noises=(0.01, 0.05, 0.1), weights=(0.01, 0.05, 0.1)``. ``corruption-aug`` gives one
    method holding out all of ``holdout_families`` together.
    """
    from robustlab.workflows.train.augment import CorruptionAugmentation
    from robustlab.workflows.train.stability import stability_grid

    if name not in METHODS:
        raise InputError(f"training method must be one of {', '.join(METHODS)}, not {name!r}")
    if name != "corruption-aug" and holdout_families:
        raise InputError("--holdout-family applies to --method corruption-aug only")
    if name == "plain":
        return [None]
    if name == "stability":
        if not noises or not weights:
            raise InputError("stability training needs at least one noise and one weight")
        return stability_grid(noises, weights)
    return [CorruptionAugmentation(tuple(holdout_families), clean_fraction)]


def method_label(method) -> str:
    """Short name of a method object (None: plain cross-entropy)."""
    return "plain" if method is None else str(record_label(method.describe()))


def test_cells_for(method, suite, shifts: Sequence[str] | None, levels: Sequence | None):
    """Cells a method's checkpoint is evaluated on: ``shifts`` when given, else the held-out
    families' corruptions (corruption augmentation) or the whole suite."""
    names = suite.match(shifts) if shifts else None
    if names is None and getattr(method, "held_out_shifts", None):
        names = [s for s in method.held_out_shifts if s in suite.shifts]
        if not names:
            raise InputError(
                f"suite {suite.name!r} has none of the held-out corruptions "
                f"{', '.join(method.held_out_shifts)}"
            )
    return list(suite.select(names, levels or None).cells)


@dataclass
class MethodResult:
    """What :func:`run_method` measured.

    Attributes:
        summary: One row per trained model and one for the un-fine-tuned ``base``: method,
            run_id, clean_error, mce and relative_mce against the base (the base's are 1),
            n_corruptions, mce_held_out (over held-out families, corruption augmentation),
            checkpoint.
        ce: CE rows per (method, corruption): shift, family, held_out, ce, relative_ce.
        trainings: method label -> :class:`robustlab.workflows.train.TrainResult`.
        split: The shared split.
    """

    summary: pd.DataFrame
    ce: pd.DataFrame
    trainings: dict = field(default_factory=dict)
    split: object = None


def _scores(label, method, table, base_cells, run_id, checkpoint):
    from robustlab.metrics.accuracy import family_of
    from robustlab.metrics.mce import corruption_errors

    cells = table.assign(error=1.0 - table["top1"])
    ce = corruption_errors(cells, base_cells)
    held = set(getattr(method, "held_out_shifts", ()) or ())
    ce = ce.assign(
        method=label,
        run_id=run_id,
        family=[family_of(s) for s in ce["shift"]],
        held_out=[s in held for s in ce["shift"]],
    )
    clean = cells[cells["shift"] == CLEAN_SHIFT]
    row = {
        "method": label,
        "run_id": run_id,
        "clean_error": float(clean["error"].iloc[0]),
        "mce": float(ce["ce"].mean()),
        "relative_mce": float(ce["relative_ce"].mean()),
        "n_corruptions": len(ce),
        "mce_held_out": float(ce.loc[ce["held_out"], "ce"].mean()) if held else float("nan"),
        "checkpoint": checkpoint,
    }
    return row, ce


def run_method(model_spec: str, data, methods: Sequence, *, split=None, **options) -> MethodResult:
    """Fine-tune with each method on clean training images and score it on corruptions.

    Args:
        model_spec: Base model, fine-tuned from its weights (``weights`` when given).
        data: Source images (class folders, or flat + ``labels_csv``).
        methods: Method objects from :func:`make_methods` (None: plain fine-tuning).
        split: The split to use (default: a class-stratified one made from
            ``test_fraction`` and ``split_seed``; give one, e.g. a split by image, for a
            set with one image per class).
        options: The keywords of :class:`~robustlab.workflows.train.request.TrainRequest`'s
            specs: ``config`` (the :class:`robustlab.workflows.train.TrainConfig` shared by
            every method); ``suite`` (default ``imagenet-c``), ``shifts``, ``levels`` (the
            test corruptions; default: the whole suite, or the held-out families for
            corruption augmentation); ``out``, ``db`` (checkpoint folder, results
            database); ``test_fraction``, ``split_seed``; ``seed`` (seed rule seed of the
            corrupted images; training draws use ``config.seed``); ``labels_csv``,
            ``label_space``, ``weights``, ``device``, ``batch_size``, ``workers``,
            ``progress``.

    Returns:
        :class:`MethodResult`; every model's test run is stored in ``db`` with the training
        record (``config["fine_tuned"]["method"]``), the un-fine-tuned model's too.
    """
    from robustlab.workflows.train.request import TrainRequest

    options.setdefault("suite", "imagenet-c")
    request = TrainRequest.from_keywords("run_method", model_spec, data, options)
    return run_methods(request, methods, split=split)


def run_methods(request, methods: Sequence, *, split=None) -> MethodResult:
    """:func:`run_method` of a typed :class:`~robustlab.workflows.train.request.TrainRequest`
    (what ``robustlab train --method`` calls): the base model is tested on every method's
    cells, then :func:`robustlab.workflows.train.protocols.run_jobs` trains and tests each
    method, as it does each protocol's models."""
    from robustlab.workflows.train.protocols import Job, evaluate_split, run_jobs, shared_split

    if not methods:
        raise InputError("no training method given")
    s = _corruption_suite(request.cells.suite)
    _warn_unheld(methods)
    c = request.cells
    per_method = [test_cells_for(m, s, c.shifts, c.levels) for m in methods]
    union = list(dict.fromkeys(cell for cells in per_method for cell in cells))
    request = request.with_suite(s)
    if split is None:
        split = shared_split(request)
    base = evaluate_split(request, split, union)
    base_cells = base.table.assign(error=1.0 - base.table["top1"])
    base_row, base_ce = _scores("base", None, base.table, base_cells, base.run_id, None)
    rows, ces, trainings = [base_row], [base_ce], {}
    clean = ((CLEAN_SHIFT, 0),)
    jobs = [
        Job(method_label(m), clean, tuple(cells), method=m) for m, cells in zip(methods, per_method)
    ]
    for job, tr, tested in run_jobs(request, split, jobs, trainings):
        mine = _base_on(base_cells, job.test_cells)
        row, ce = _scores(
            job.name, job.method, tested.table, mine, tested.run_id, str(tr.checkpoint)
        )
        rows.append(row)
        ces.append(ce)
    ce_all = pd.concat(ces, ignore_index=True)[
        ["method", "run_id", "shift", "family", "held_out", "ce", "relative_ce"]
    ]
    return MethodResult(pd.DataFrame(rows), ce_all, trainings, split)


def _corruption_suite(suite):
    """The suite, refused unless every shift of it has corruption errors (mCE)."""
    from robustlab.shifts.registry import get_shift
    from robustlab.suites import get_suite

    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    if not s.shifts or not all(get_shift(n).tags & CORRUPTION_TAGS for n in s.shifts):
        raise InputError(
            f"suite {s.name!r} has no corruption errors (mCE); use imagenet-c or imagenet-c-extra"
        )
    return s


def _warn_unheld(methods) -> None:
    for m in methods:
        if getattr(m, "name", None) == "corruption-aug" and not m.holdout_families:
            log.warning(
                "corruption augmentation without a held-out family: the test corruptions "
                "are among the training ones (not a robustness measurement)"
            )


def _base_on(base_cells: pd.DataFrame, cells) -> pd.DataFrame:
    """The base model's rows of ``cells`` and clean (what a method's CE is relative to)."""
    keep = {(a, str(b)) for a, b in cells} | {(CLEAN_SHIFT, "0")}
    return base_cells[
        [(a, str(b)) in keep for a, b in zip(base_cells["shift"], base_cells["level"])]
    ]


__all__ = [
    "METHODS",
    "MethodResult",
    "make_methods",
    "method_label",
    "record_label",
    "run_method",
    "run_methods",
    "test_cells_for",
]
