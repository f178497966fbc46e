"""Run a card's steps: masks when asked, then one ``evaluate`` per step.

:func:`evaluate_step` is the card's only call into the evaluate workflow (and the only
place that reads what it returns), so a change of evaluate's return type touches this one
function.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from robustlab.workflows.card.plan import CardPlan, Step
from robustlab.workflows.card.request import CardRequest


@dataclass(frozen=True)
class StepRun:
    """What one step left in the database: its run id and what this call computed."""

    step: Step
    run_id: str
    n_written: int
    n_skipped: int


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def evaluate_step(req: CardRequest, step: Step, masks: Path | None) -> StepRun:
    """Evaluate one step into the card's database (resumed when already stored)."""
    from robustlab.workflows.evaluate import evaluate

    options: dict = {"db": req.database, "seed": req.seed, "progress": req.progress}
    if req.workers is not None:
        options["workers"] = req.workers
    if req.device is not None:
        options["device"] = req.device
    if step.suite is not None:
        options["suite"] = step.suite
        if step.shifts is not None:
            options["shifts"] = list(step.shifts)
        if req.levels is not None:
            options["levels"] = list(req.levels)
        if step.suite != "imagenet-c":
            options["masks"] = masks
        if step.labels is not None:
            options["labels_csv"] = write_labels(req.inputs / f"{step.suite}-labels.csv", step)
        elif req.labels_csv is not None:
            options["labels_csv"] = req.labels_csv
    else:
        options["label_space"] = "imagenet-d"
    done = evaluate(step.model, step.data, **options)
    return StepRun(step, str(done.run_id), int(done.n_written), len(done.skipped or []))


def write_labels(path: Path, step: Step) -> Path:
    """The step's labels CSV (``file,class``), rewritten only when its rows changed, so
    the run it labels keeps its identity."""
    import csv
    import io

    from robustlab.errors import environment_errors
    from robustlab.files.atomic import atomic_write

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["file", "class"])
    writer.writerows(step.labels or ())
    text = buf.getvalue()
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        from robustlab.files.safety import claim_out_folder

        claim_out_folder(path.parent, command="card")
        with environment_errors(f"cannot write {path}"):
            atomic_write(path, text.encode())
    return path


def make_masks(req: CardRequest, out: Path) -> None:
    """GrabCut masks of the photos into ``out`` (``--auto-masks``); a mask already there
    is kept, so a second card makes none."""
    from robustlab.data.sources import discover
    from robustlab.masks.auto import AutoMasker
    from robustlab.masks.build import build_masks

    samples = discover(req.data, labels_csv=req.labels_csv)
    summary = build_masks(samples, out, AutoMasker("grabcut"))
    _say(
        f"    masks: {summary['n_written']} usable of {summary['n']} in {out} "
        f"({summary['n'] - summary['n_written']} empty or full, {summary['n_skipped']} skipped)"
    )


def run_steps(req: CardRequest, plan: CardPlan) -> list[StepRun]:
    """Every step of ``plan``, printing one line per step and per skipped benchmark."""
    from robustlab.workflows.card.plan import TITLES

    if req.auto_masks and plan.masks is not None:
        from robustlab.files.safety import claim_out_folder

        _say(f"[masks] GrabCut masks for the scene suites and ImageNet-E into {plan.masks}")
        claim_out_folder(req.inputs, command="card")
        make_masks(req, plan.masks)
    done = []
    for i, step in enumerate(plan.steps, 1):
        who = "" if step.role == "model" else f" (CE baseline {step.model})"
        _say(f"[{i}/{len(plan.steps)}] {TITLES[step.benchmark]}{who}")
        for note in plan.left_out.get(step.benchmark, []) if step.role == "model" else []:
            _say(f"    left out: {note}")
        run = evaluate_step(req, step, plan.masks)
        _say(f"    run {run.run_id[:8]}: {run.n_written} predictions computed")
        done.append(run)
    for bench, why in plan.skipped.items():
        _say(f"skipped {TITLES[bench]}: {why}")
    return done
