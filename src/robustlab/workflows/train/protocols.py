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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from robustlab.errors import InputError
from robustlab.store import CLEAN_SHIFT, DEFAULT_DB, Store
from robustlab.workflows.train.finetune import TrainConfig, TrainResult, finetune
from robustlab.workflows.train.splits import Split, split_samples

log = logging.getLogger(__name__)

PROTOCOLS = ("ex1", "ex2", "both")


def _cell_name(shift: str, level) -> str:
    """Scenario name as :func:`robustlab.metrics.scenes.scenario_accuracies` writes it."""
    from robustlab.shifts.registry import get_shift

    if shift == CLEAN_SHIFT or len(get_shift(shift).levels) == 1:
        return shift
    return f"{shift}:{level}"


def _plan(model, data, *, suite, cells, masks, labels_csv, label_space, seed):
    """``make_plan`` covering the shifts of ``cells`` (clean only: no suite); callers keep
    the cells they want from ``plan.cells``."""
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    shifts = list(dict.fromkeys(s for s, _ in cells if s != CLEAN_SHIFT))
    return make_plan(
        EvaluateRequest.build(
            model,
            data,
            suite=suite if shifts else None,
            seed=seed,
            shifts=shifts or None,
            masks=masks,
            labels_csv=labels_csv,
            label_space=label_space,
        )
    )


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


def train_on_cells(
    model_spec: str,
    data,
    train_cells: Sequence[tuple[str, Any]],
    split: Split,
    *,
    config: TrainConfig,
    out,
    suite="ximagenet12",
    seed: int = 0,
    masks=None,
    labels_csv=None,
    label_space=None,
    weights=None,
    device=None,
    method=None,
    preprocess=None,
    progress: bool = False,
) -> TrainResult:
    """Fine-tune ``model_spec`` on the train ids of ``split`` under ``train_cells``.

    The checkpoint name is a hash of everything that decides the weights, so rerunning a
    protocol reuses checkpoints already trained (``TrainResult.reused``). ``method``: a
    training method of :mod:`robustlab.workflows.train.methods` (None: plain cross-entropy); it is
    part of that hash and of the checkpoint's name. ``preprocess`` (a pixel defence of
    :mod:`robustlab.defences`, e.g. ``"clahe"``) is applied to every training image and
    written into the training record, so the model is then evaluated behind the same
    defence. With ``progress``, a line every 10 s on stderr: steps done, rate, ETA and the
    current loss.
    """
    import json

    from robustlab.defences import defend
    from robustlab.models import load_model
    from robustlab.run.identity import run_id as hash_id

    model = defend(
        load_model(model_spec, weights=weights, device=device, label_space=label_space),
        preprocess=preprocess,
    )
    trained_on = (getattr(model, "defence", None) or {}).get("preprocess")
    plan = _plan(
        model,
        data,
        suite=suite,
        cells=train_cells,
        masks=masks,
        labels_csv=labels_csv,
        label_space=label_space,
        seed=seed,
    )
    samples, labels = _subset(plan, split.train)
    if len(samples) != len(split.train):
        raise InputError(
            f"{len(split.train) - len(samples)} training images of the split are not in {data}"
        )
    wanted = {(a, str(b)) for a, b in train_cells}
    cells = [(s, lv) for s, lv in plan.cells if (s, str(lv)) in wanted]
    if len(cells) != len(wanted):
        raise InputError(f"unknown training cell(s) among {sorted(wanted)}")
    key = {
        "base": model.spec,
        "weights_hash": model.weights_hash,
        "label_space": model.label_space.name,
        "config": config.describe(),
        "cells": [[s, str(lv)] for s, lv in cells],
        "split": split.fingerprint,
        "seed": int(seed),
        "data": plan.record.data_fingerprint,
        "protocol": plan.protocol.describe(),
    }
    if method is not None:
        key["method"] = method.describe()
    if trained_on:  # absent without one, so plain checkpoints keep their names
        key["preprocess"] = trained_on
    name = "-".join(
        [
            model.spec.replace(":", "_").replace("/", "_"),
            config.mode,
            *([method.name] if method is not None else []),
            "+".join(_cell_name(s, lv) for s, lv in cells),
            hash_id(key),
        ]
    )
    ckpt = Path(out) / f"{name}.pth"
    if ckpt.is_file() and ckpt.with_suffix(".json").is_file():
        record = json.loads(ckpt.with_suffix(".json").read_text())
        log.info("reusing %s (same model, data, split and training config)", ckpt)
        return TrainResult(ckpt, list(record.get("losses", [])), record, reused=True)
    log.info(
        "training %s (%s, %d steps) on %d images x %s",
        model.spec,
        config.mode,
        config.steps,
        len(samples),
        ", ".join(_cell_name(s, lv) for s, lv in cells),
    )
    lines = None
    if progress:
        from robustlab.run.progress import LineProgress

        lines = LineProgress(
            config.steps,
            unit="step",
            what="train on " + "+".join(_cell_name(s, lv) for s, lv in cells),
        )

    def step_done(step: int, loss: float) -> None:
        if lines is not None:
            lines.note = f"loss {loss:.3f}"
            lines.update(step - lines.done)

    try:
        return finetune(
            model,
            samples,
            labels,
            cells,
            plan.images,
            config,
            ckpt,
            extra_record={
                "split": split.describe(),
                "data_root": plan.record.data_root,
                "train_seed_rule_seed": int(seed),
                "identity": key,
                "preprocess": trained_on,
            },
            method=method,
            progress=step_done,
        )
    finally:
        if lines is not None:
            lines.close()


def evaluate_on_split(
    model_spec: str,
    checkpoint,
    data,
    test_cells: Sequence[tuple[str, Any]],
    split: Split,
    *,
    train: TrainResult | None = None,
    suite="ximagenet12",
    seed: int = 0,
    db=DEFAULT_DB,
    masks=None,
    labels_csv=None,
    label_space=None,
    device=None,
    batch_size: int | None = None,
    workers: int | None = 0,
    progress: bool = False,
    preprocess=None,
) -> pd.DataFrame:
    """Evaluate the checkpoint on the test ids of ``split`` and store it as a run.

    The run is the ordinary runner's, restricted to the test images; its id also covers the
    split (a run on the full folder and one on a split never share an id) and the pixel
    defence ``preprocess`` the model is evaluated behind (the one it was trained with).

    Returns:
        The run's per-cell table (as :func:`robustlab.evaluate` returns).
    """
    from robustlab.defences import defend
    from robustlab.workflows.evaluate import run_table
    from robustlab.models import load_model
    from robustlab.run.identity import data_fingerprint, run_id
    from robustlab.run.runner import RunOptions, Runner
    from robustlab.run.lifeline import default_workers

    model = defend(
        load_model(
            model_spec,
            weights=checkpoint,
            device=device,
            label_space=label_space,
            batch_size=batch_size,
        ),
        preprocess=preprocess,
    )
    plan = _plan(
        model,
        data,
        suite=suite,
        cells=test_cells,
        masks=masks,
        labels_csv=labels_csv,
        label_space=label_space,
        seed=seed,
    )
    samples, labels = _subset(plan, split.test)
    if len(samples) != len(split.test):
        raise InputError(
            f"{len(split.test) - len(samples)} test images of the split are not in {data}"
        )
    wanted = {(s, str(lv)) for s, lv in test_cells} | {(CLEAN_SHIFT, "0")}
    cells = [(s, lv) for s, lv in plan.cells if (s, str(lv)) in wanted]
    base = plan.record
    fingerprint = data_fingerprint((s.id, s.class_name, lab) for s, lab in zip(samples, labels))
    fine_tuned = None
    if train is not None:
        fine_tuned = {k: v for k, v in train.record.items() if k not in ("identity",)}
    record = dataclasses.replace(
        base,
        run_id=run_id({"run": base.run_id, "split": split.fingerprint, "test": fingerprint}),
        data_fingerprint=fingerprint,
        n_samples=len(samples),
        config={
            **base.config,
            "split": {**split.describe(), "part": "test"},
            "fine_tuned": fine_tuned,
            "cells": [[s, str(lv)] for s, lv in cells],
        },
    )
    options = RunOptions(
        batch_size=int(batch_size or model.batch_size or 32),
        workers=default_workers() if workers is None else int(workers),
        progress=progress,
    )
    store = Store(db)
    summary = Runner(model, samples, labels, cells, plan.images, store, record, options).run()
    return run_table(store, summary.run_id, skipped=summary.skipped)


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
    score: Any
    trainings: dict[str, TrainResult] = field(default_factory=dict)
    split: Split | None = None


def run_protocol(
    model_spec: str,
    data,
    *,
    protocol: str = "both",
    suite="ximagenet12",
    shifts: Sequence[str] | None = None,
    levels: Sequence | None = None,
    masks=None,
    config: TrainConfig = TrainConfig(),
    out="checkpoints",
    db=DEFAULT_DB,
    test_fraction: float = 0.3,
    split_seed: int = 0,
    seed: int = 0,
    labels_csv=None,
    label_space=None,
    weights=None,
    device=None,
    batch_size: int | None = None,
    workers: int | None = 0,
    progress: bool = False,
    preprocess=None,
) -> ProtocolResult:
    """Run EX1, EX2 or both on a suite's scenarios and compute the robustness score.

    Args:
        model_spec: Base model (``lite0``, ``timm:NAME``...), fine-tuned from its weights.
        data: Source images (or a folder written by ``robustlab generate``).
        protocol: ``"ex1"``, ``"ex2"`` or ``"both"``.
        suite, shifts, levels: The scenarios (default: the whole suite; ``ai_bg`` only when
            an inpainter is configured).
        masks: Foreground masks (scenarios need them; the split uses images that have one).
        config: Fine-tuning config shared by every model.
        out: Checkpoint folder.
        db: Results database.
        test_fraction, split_seed: The shared split.
        seed: Seed rule seed of the scenario images.
        progress: Progress of each training (a line every 10 s) and each evaluation.
        preprocess: Pixel defence every model is fine-tuned and evaluated behind
            (``"clahe"``: the ImageNet-C paper's CLAHE fine-tuning; see
            :mod:`robustlab.defences`); recorded in each training record and run.

    Returns:
        :class:`ProtocolResult`.
    """
    from robustlab.defences import get_preprocess
    from robustlab.models import load_model
    from robustlab.shifts.registry import available_shifts
    from robustlab.suites import get_suite

    if protocol not in PROTOCOLS:
        raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
    preprocess = get_preprocess(preprocess)  # a bad name fails before any training
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    names = available_shifts(s.match(shifts or None), log=log)
    s = s.select(names, levels or None).suite
    scenario_cells = s.cells()
    base = load_model(model_spec, weights=weights, device=device, label_space=label_space)
    split = make_split(
        base,
        data,
        masks=masks,
        labels_csv=labels_csv,
        label_space=label_space,
        suite=s,
        test_fraction=test_fraction,
        split_seed=split_seed,
    )
    del base
    common = {
        "suite": s,
        "seed": seed,
        "masks": masks,
        "labels_csv": labels_csv,
        "label_space": label_space,
        "preprocess": preprocess,
    }
    rows, trainings = [], {}

    def one(proto: str, train_cells, test_cells):
        name = "+".join(_cell_name(a, b) for a, b in train_cells)
        tr = trainings.get(name) or train_on_cells(
            model_spec,
            data,
            train_cells,
            split,
            config=config,
            out=out,
            weights=weights,
            device=device,
            progress=progress,
            **common,
        )
        trainings[name] = tr
        table = evaluate_on_split(
            model_spec,
            tr.checkpoint,
            data,
            test_cells,
            split,
            train=tr,
            db=db,
            device=device,
            batch_size=batch_size,
            workers=workers,
            progress=progress,
            **common,
        )
        for _, r in table.iterrows():
            rows.append(
                {
                    "protocol": proto,
                    "trained_on": name,
                    "tested_on": _cell_name(r["shift"], r["level"]),
                    "shift": r["shift"],
                    "level": r["level"],
                    "run_id": table.attrs["run_id"],
                    "checkpoint": str(tr.checkpoint),
                    "n": int(r["n"]),
                    "top1": float(r["top1"]),
                }
            )

    if protocol in ("ex1", "both"):
        one("ex1", [(CLEAN_SHIFT, 0)], scenario_cells)
    if protocol in ("ex2", "both"):
        for cell in scenario_cells:
            one("ex2", [cell], [cell])
    runs = pd.DataFrame(
        rows,
        columns=[
            "protocol",
            "trained_on",
            "tested_on",
            "shift",
            "level",
            "run_id",
            "checkpoint",
            "n",
            "top1",
        ],
    )
    score = scenario_score(runs, [_cell_name(a, b) for a, b in scenario_cells])
    return ProtocolResult(runs, score, trainings, split)


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
    "make_split",
    "train_on_cells",
    "evaluate_on_split",
    "run_protocol",
    "scenario_score",
]
