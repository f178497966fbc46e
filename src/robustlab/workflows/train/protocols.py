"""XIMAGENET-12's training protocols and its robustness score (REFERENCE.md section 2).

- **EX1 (cross)**: train on the original images, test on each scenario: C(i).
- **EX2 (inner)**: train and test within each scenario: C'(i).
- mu: trained and tested on the original images (the EX1 model's clean accuracy).
- S_robust = 1 - (sigma2_cross + sigma2_inner), via :func:`robustlab.metrics.scenes.robustness_score`
  (partial when only one protocol has run).

Every model sees the same class-stratified split (:func:`robustlab.workflows.train.splits.split_samples`):
trained on the train ids, evaluated on the test ids. Evaluation is the ordinary runner, so
each fine-tuned model is a normal run in the results database: its ``model_spec`` is the
base spec (``lite0``), its ``weights_hash`` the checkpoint's, and ``config["fine_tuned"]``
says how it was trained (mode, steps, training scenario, split, losses, checkpoint path).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from robustlab.cells import as_cells, cells_record
from robustlab.errors import InputError
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.workflows.train.finetune import TrainResult, finetune
from robustlab.workflows.train.request import TrainRequest, check_choice
from robustlab.workflows.train.splits import Split, split_samples

if TYPE_CHECKING:
    from robustlab.metrics.scenes import RobustnessScore
    from robustlab.workflows.evaluate.result import EvaluateResult

log = logging.getLogger(__name__)

PROTOCOLS = ("ex1", "ex2", "both")


def _cell_name(shift: str, level) -> str:
    """Scenario name as :func:`robustlab.metrics.scenes.scenario_accuracies` writes it."""
    from robustlab.shifts.registry import get_shift

    if shift == CLEAN_SHIFT or len(get_shift(shift).levels) == 1:
        return shift
    return f"{shift}:{level}"


def _plan(model, data, *, suite, cells, masks, labels_csv, label_space, seed, tools=None):
    """``make_plan`` covering the shifts of ``cells`` (clean only: no suite); callers keep
    the cells they want from ``plan.cells``. ``tools``: the request's tool settings (a
    :class:`~robustlab.workflows.tools.ToolSpec`; None: the environment's)."""
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    shifts = list(dict.fromkeys(s for s, _ in cells if s != CLEAN_SHIFT))
    request = EvaluateRequest.build(
        model,
        data,
        suite=suite if shifts else None,
        seed=seed,
        shifts=shifts or None,
        masks=masks,
        labels_csv=labels_csv,
        label_space=label_space,
    )
    if tools is not None:  # the training request's own, resolved when it was built
        request = dataclasses.replace(request, tools=tools)
    return make_plan(request)


def _usable(samples, labels, masks):
    """Samples in the split: those with a mask when masks are given (scenarios need one)."""
    if masks is None:
        return list(samples), list(labels)
    pairs = [(s, lab) for s, lab in zip(samples, labels) if s.mask_path is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def make_split(
    model,
    data,
    *,
    masks=None,
    labels_csv=None,
    label_space=None,
    suite="ximagenet12",
    test_fraction: float = 0.3,
    split_seed: int = 0,
) -> Split:
    """The split every model of a protocol shares (over images with masks when given)."""
    plan = _plan(
        model,
        data,
        suite=suite,
        cells=[(CLEAN_SHIFT, 0)],
        masks=masks,
        labels_csv=labels_csv,
        label_space=label_space,
        seed=0,
    )
    samples, labels = _usable(plan.samples, plan.labels, masks)
    return split_samples(samples, labels, test_fraction=test_fraction, seed=split_seed)


def _subset(plan, ids):
    keep = set(ids)
    idx = [i for i, s in enumerate(plan.samples) if s.id in keep]
    return [plan.samples[i] for i in idx], [plan.labels[i] for i in idx]


def _load(request: TrainRequest, weights, **extra):
    """The request's model from ``weights``, behind its pixel defence."""
    from robustlab.defences import defend
    from robustlab.models import load_model

    model = load_model(
        request.model.model_spec,
        weights=weights,
        device=request.execution.device,
        label_space=request.data.label_space,
        **extra,
    )
    return defend(model, preprocess=request.model.preprocess)


def _plan_cells(request: TrainRequest, model, cells):
    """:func:`_plan` over ``cells`` with the request's data and seed."""
    d = request.data
    return _plan(
        model,
        d.data,
        suite=request.cells.suite,
        cells=cells,
        masks=d.masks,
        labels_csv=d.labels_csv,
        label_space=d.label_space,
        seed=d.seed,
        tools=request.tools,
    )


def _split_part(request: TrainRequest, plan, ids, what: str):
    """The samples and labels of one side of the split (all of them, or an error)."""
    samples, labels = _subset(plan, ids)
    if len(samples) != len(ids):
        raise InputError(
            f"{len(ids) - len(samples)} {what} images of the split are not in {request.data.data}"
        )
    return samples, labels


def shared_split(request: TrainRequest) -> Split:
    """The split every model of an experiment shares, made with the un-fine-tuned model."""
    from robustlab.models import load_model

    d = request.data
    base = load_model(
        request.model.model_spec,
        weights=request.model.weights,
        device=request.execution.device,
        label_space=d.label_space,
    )
    return make_split(
        base,
        d.data,
        masks=d.masks,
        labels_csv=d.labels_csv,
        label_space=d.label_space,
        suite=request.cells.suite,
        test_fraction=d.test_fraction,
        split_seed=d.split_seed,
    )


def train_on_cells(
    model_spec: str,
    data,
    train_cells: Sequence[tuple[str, Any]],
    split: Split,
    *,
    method=None,
    **options: Any,
) -> TrainResult:
    """Fine-tune ``model_spec`` on the train ids of ``split`` under ``train_cells``.

    The checkpoint name is a hash of everything that decides the weights, so rerunning a
    protocol reuses checkpoints already trained (``TrainResult.reused``). ``method``: a
    training method of :mod:`robustlab.workflows.train.methods` (None: plain cross-entropy);
    it is part of that hash and of the checkpoint's name. The other keywords are those of
    :class:`~robustlab.workflows.train.request.TrainRequest`'s specs (``config``, ``out``,
    ``suite``, ``seed``, ``masks``, ``labels_csv``, ``label_space``, ``weights``,
    ``device``, ``preprocess``, ``progress``...): ``preprocess`` (a pixel defence of
    :mod:`robustlab.defences`, e.g. ``"clahe"``) is applied to every training image and
    written into the training record, so the model is then evaluated behind the same
    defence. With ``progress``, a line every 10 s on stderr: steps done, rate, ETA and the
    current loss.
    """
    request = TrainRequest.from_keywords("train_on_cells", model_spec, data, options)
    return fine_tune_on(request, split, train_cells, method=method)


def fine_tune_on(
    request: TrainRequest, split: Split, train_cells: Sequence[tuple[str, Any]], *, method=None
) -> TrainResult:
    """:func:`train_on_cells` of a typed request."""
    import json

    model = _load(request, request.model.weights)
    plan = _plan_cells(request, model, train_cells)
    samples, labels = _split_part(request, plan, split.train, "training")
    wanted = {c.stored for c in as_cells(train_cells)}
    cells = [c for c in as_cells(plan.cells) if c.stored in wanted]
    if len(cells) != len(wanted):
        raise InputError(f"unknown training cell(s) among {sorted(wanted)}")
    key = _checkpoint_key(request, model, plan, cells, split, method)
    ckpt = (
        Path(request.execution.out) / f"{_checkpoint_name(request, model, cells, key, method)}.pth"
    )
    if ckpt.is_file() and ckpt.with_suffix(".json").is_file():
        record = json.loads(ckpt.with_suffix(".json").read_text())
        log.info("reusing %s (same model, data, split and training config)", ckpt)
        return TrainResult(ckpt, list(record.get("losses", [])), record, reused=True)
    config = request.model.config
    names = [_cell_name(s, lv) for s, lv in cells]
    log.info(
        "training %s (%s, %d steps) on %d images x %s",
        model.spec,
        config.mode,
        config.steps,
        len(samples),
        ", ".join(names),
    )
    extra_record = {
        "split": split.describe(),
        "data_root": plan.record.data_root,
        "train_seed_rule_seed": int(request.data.seed),
        "identity": key,
        "preprocess": key.get("preprocess"),
    }
    with _step_lines(request, config.steps, "+".join(names)) as step_done:
        return finetune(
            model,
            samples,
            labels,
            cells,
            plan.images,
            config,
            ckpt,
            extra_record=extra_record,
            method=method,
            progress=step_done,
        )


def _checkpoint_key(request: TrainRequest, model, plan, cells, split: Split, method):
    """Everything that decides a fine-tuned model's weights (its hash names the checkpoint)."""
    key = {
        "base": model.spec,
        "weights_hash": model.weights_hash,
        "label_space": model.label_space.name,
        "config": request.model.config.describe(),
        "cells": cells_record(cells),
        "split": split.fingerprint,
        "seed": int(request.data.seed),
        "data": plan.record.data_fingerprint,
        "protocol": plan.protocol.describe(),
    }
    if method is not None:
        key["method"] = method.describe()
    trained_on = (getattr(model, "defence", None) or {}).get("preprocess")
    if trained_on:  # absent without one, so plain checkpoints keep their names
        key["preprocess"] = trained_on
    return key


def _checkpoint_name(request: TrainRequest, model, cells, key, method) -> str:
    from robustlab.records.identity import run_id as hash_id

    return "-".join(
        [
            model.spec.replace(":", "_").replace("/", "_"),
            request.model.config.mode,
            *([method.name] if method is not None else []),
            "+".join(_cell_name(s, lv) for s, lv in cells),
            hash_id(key),
        ]
    )


@contextmanager
def _step_lines(request: TrainRequest, steps: int, names: str):
    """A ``progress(step, loss)`` callback for :func:`finetune`: a line every 10 s on
    stderr with ``progress``, nothing without."""
    if not request.execution.progress:
        yield None
        return
    from robustlab.execution.progress import LineProgress

    lines = LineProgress(steps, unit="step", what="train on " + names)

    def step_done(step: int, loss: float) -> None:
        lines.note = f"loss {loss:.3f}"
        lines.update(step - lines.done)

    try:
        yield step_done
    finally:
        lines.close()


def evaluate_on_split(
    model_spec: str,
    checkpoint,
    data,
    test_cells: Sequence[tuple[str, Any]],
    split: Split,
    *,
    train: TrainResult | None = None,
    **options: Any,
) -> EvaluateResult:
    """Evaluate the checkpoint on the test ids of ``split`` and store it as a run.

    The run is the ordinary runner's, restricted to the test images; its id also covers the
    split (a run on the full folder and one on a split never share an id) and the pixel
    defence ``preprocess`` the model is evaluated behind (the one it was trained with). The
    keywords are those of :class:`~robustlab.workflows.train.request.TrainRequest`'s specs
    (``suite``, ``seed``, ``db``, ``masks``, ``batch_size``, ``workers``...), less
    ``weights`` (the checkpoint is).

    Returns:
        The run (an :class:`~robustlab.workflows.evaluate.result.EvaluateResult`, as
        :func:`robustlab.evaluate` returns).
    """
    if "weights" in options:
        raise TypeError("evaluate_on_split() got multiple values for 'weights' (the checkpoint)")
    options = {**options, "weights": checkpoint}
    request = TrainRequest.from_keywords("evaluate_on_split", model_spec, data, options)
    return evaluate_split(request, split, test_cells, train=train)


def evaluate_split(
    request: TrainRequest,
    split: Split,
    test_cells: Sequence[tuple[str, Any]],
    *,
    train: TrainResult | None = None,
) -> EvaluateResult:
    """:func:`evaluate_on_split` of a typed request (the model from its ``weights``)."""
    from robustlab.execution.lifeline import default_workers
    from robustlab.execution.runner import RunOptions, Runner
    from robustlab.workflows.evaluate import EvaluateResult

    run = request.execution
    model = _load(request, request.model.weights, batch_size=run.batch_size)
    plan = _plan_cells(request, model, test_cells)
    samples, labels = _split_part(request, plan, split.test, "test")
    wanted = {c.stored for c in as_cells([*test_cells, (CLEAN_SHIFT, 0)])}
    cells = [c for c in as_cells(plan.cells) if c.stored in wanted]
    record = _split_record(plan.record, split, samples, labels, cells, train)
    options = RunOptions(
        batch_size=int(run.batch_size or model.batch_size or 32),
        workers=default_workers() if run.workers is None else int(run.workers),
        progress=run.progress,
    )
    store = Store(run.db)
    summary = Runner(model, samples, labels, cells, plan.images, store, record, options).run()
    return EvaluateResult.of_run(store, summary)


def _split_record(base, split: Split, samples, labels, cells, train: TrainResult | None):
    """The stored record of a test-split run: the plan's record (built by
    :func:`robustlab.records.identity.make_record`) narrowed to the test images, its id also
    covering the split and the test images' fingerprint."""
    from robustlab.records.identity import data_fingerprint, run_id

    fingerprint = data_fingerprint((s.id, s.class_name, lab) for s, lab in zip(samples, labels))
    fine_tuned = None
    if train is not None:
        fine_tuned = {k: v for k, v in train.record.items() if k not in ("identity",)}
    return dataclasses.replace(
        base,
        run_id=run_id({"run": base.run_id, "split": split.fingerprint, "test": fingerprint}),
        data_fingerprint=fingerprint,
        n_samples=len(samples),
        config={
            **base.config,
            "split": {**split.describe(), "part": "test"},
            "fine_tuned": fine_tuned,
            "cells": cells_record(cells),
        },
    )


@dataclass(frozen=True)
class Job:
    """One model of an experiment: trained on ``train_cells`` (with ``method``), tested on
    ``test_cells``. Jobs with the same ``name`` share one training; ``group`` is the
    caller's (the protocol, EX1 or EX2)."""

    name: str
    train_cells: tuple[tuple[str, Any], ...]
    test_cells: tuple[tuple[str, Any], ...]
    method: Any = None
    group: str = ""


def run_jobs(
    request: TrainRequest, split: Split, jobs: Iterable[Job], trainings: dict[str, TrainResult]
) -> Iterator[tuple[Job, TrainResult, EvaluateResult]]:
    """Train and test each job in turn (the one loop of :func:`run_protocol` and
    :func:`robustlab.workflows.train.methods.run_method`), filling ``trainings`` by name."""
    for job in jobs:
        tr = trainings.get(job.name) or fine_tune_on(
            request, split, job.train_cells, method=job.method
        )
        trainings[job.name] = tr
        tested = request.with_weights(tr.checkpoint)
        yield job, tr, evaluate_split(tested, split, job.test_cells, train=tr)


@dataclass
class ProtocolResult:
    """Runs of one protocol execution and the robustness score they give.

    Attributes:
        runs: One row per (protocol, training cell, test cell): run_id, checkpoint, n, top1.
        score: :class:`robustlab.metrics.scenes.RobustnessScore` (None without an EX1 run).
        trainings: The :class:`TrainResult` of each training cell name.
        split: The shared split.
    """

    runs: pd.DataFrame
    score: RobustnessScore | None
    trainings: dict[str, TrainResult] = field(default_factory=dict)
    split: Split | None = None


RUN_COLUMNS = (
    "protocol",
    "trained_on",
    "tested_on",
    "shift",
    "level",
    "run_id",
    "checkpoint",
    "n",
    "top1",
)


def run_protocol(
    model_spec: str, data, *, protocol: str = "both", **options: Any
) -> ProtocolResult:
    """Run EX1, EX2 or both on a suite's scenarios and compute the robustness score.

    Args:
        model_spec: Base model (``lite0``, ``timm:NAME``...), fine-tuned from its weights.
        data: Source images (or a folder written by ``robustlab generate``).
        protocol: ``"ex1"``, ``"ex2"`` or ``"both"``.
        options: The keywords of :class:`~robustlab.workflows.train.request.TrainRequest`'s
            specs: ``suite``, ``shifts``, ``levels`` (the scenarios; default: the whole
            suite, ``ai_bg`` only when an inpainter is configured); ``masks`` (scenarios
            need them; the split uses images that have one); ``config`` (fine-tuning config
            shared by every model); ``out`` (checkpoints), ``db`` (results);
            ``test_fraction``, ``split_seed`` (the shared split); ``seed`` (seed rule seed
            of the scenario images); ``progress``; ``preprocess`` (pixel defence every model
            is fine-tuned and evaluated behind: ``"clahe"`` is the ImageNet-C paper's CLAHE
            fine-tuning; recorded in each training record and run); ``labels_csv``,
            ``label_space``, ``weights``, ``device``, ``batch_size``, ``workers``.

    Returns:
        :class:`ProtocolResult`.
    """
    request = TrainRequest.from_keywords("run_protocol", model_spec, data, options)
    return run_protocols(request, protocol)


def run_protocols(request: TrainRequest, protocol: str = "both") -> ProtocolResult:
    """:func:`run_protocol` of a typed request (what ``robustlab train`` calls)."""
    from robustlab.shifts.registry import available_shifts
    from robustlab.suites import get_suite

    check_choice("protocol", protocol, PROTOCOLS)
    c = request.cells
    s = get_suite(c.suite) if isinstance(c.suite, (str, Path)) else c.suite
    names = available_shifts(s.match(c.shifts or None), request.tools.settings, log=log)
    s = s.select(names, c.levels or None).suite
    request = request.with_suite(s)
    scenario_cells = [tuple(cell) for cell in s.cells()]
    split = shared_split(request)
    jobs = []
    if protocol in ("ex1", "both"):
        clean = ((CLEAN_SHIFT, 0),)
        jobs.append(Job(_cell_name(CLEAN_SHIFT, 0), clean, tuple(scenario_cells), group="ex1"))
    if protocol in ("ex2", "both"):
        jobs += [Job(_cell_name(*c), (c,), (c,), group="ex2") for c in scenario_cells]
    rows: list[dict[str, Any]] = []
    trainings: dict[str, TrainResult] = {}
    for job, tr, tested in run_jobs(request, split, jobs, trainings):
        rows += _protocol_rows(job.group, job.name, tr, tested)
    runs = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    score = scenario_score(runs, [_cell_name(a, b) for a, b in scenario_cells])
    return ProtocolResult(runs, score, trainings, split)


def _protocol_rows(proto: str, name: str, tr: TrainResult, tested: EvaluateResult) -> list[dict]:
    """One :attr:`ProtocolResult.runs` row per cell of a test run."""
    return [
        {
            "protocol": proto,
            "trained_on": name,
            "tested_on": _cell_name(r["shift"], r["level"]),
            "shift": r["shift"],
            "level": r["level"],
            "run_id": tested.run_id,
            "checkpoint": str(tr.checkpoint),
            "n": int(r["n"]),
            "top1": float(r["top1"]),
        }
        for _, r in tested.table.iterrows()
    ]


def scenario_score(runs: pd.DataFrame, scenarios: Sequence[str]):
    """Robustness score from a ``runs`` table: mu and C(i) from EX1 rows, C'(i) from EX2 rows.

    mu is the clean accuracy of the model trained on the original images (EX1). Without
    EX1 rows there is no mu, hence no score (None).
    """
    from robustlab.metrics.scenes import robustness_score

    ex1 = runs[runs["protocol"] == "ex1"]
    ex2 = runs[runs["protocol"] == "ex2"]
    clean = ex1[ex1["shift"] == CLEAN_SHIFT]
    if clean.empty:
        return None
    mu = float(clean["top1"].iloc[0])
    cross = {r.tested_on: float(r.top1) for r in ex1.itertuples() if r.tested_on in scenarios}
    inner = {
        r.tested_on: float(r.top1)
        for r in ex2.itertuples()
        if r.tested_on in scenarios and r.tested_on == r.trained_on
    }
    return robustness_score(mu, cross, inner or None, scenarios=list(scenarios))


__all__ = [
    "PROTOCOLS",
    "ProtocolResult",
    "Job",
    "make_split",
    "train_on_cells",
    "fine_tune_on",
    "evaluate_on_split",
    "evaluate_split",
    "shared_split",
    "run_jobs",
    "run_protocol",
    "run_protocols",
    "scenario_score",
]
