"""Plan, run, compute and write one card (:func:`build_card`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from robustlab.store import Store
from robustlab.workflows.card.execute import StepRun, run_steps
from robustlab.workflows.card.numbers import Number
from robustlab.workflows.card.plan import TITLES, plan_card
from robustlab.workflows.card.request import CardRequest


def provenance(store: Store, run_id: str) -> dict:
    """The provenance of one run as the card's files carry it."""
    from robustlab.metrics.summary import protocol_text

    run = store.get_run(run_id) or {}
    return {
        "run_id": run_id,
        "model_spec": run.get("model_spec"),
        "weights_hash": run.get("weights_hash"),
        "suite": run.get("suite"),
        "suite_version": run.get("suite_version"),
        "protocol": protocol_text(run),
        "data_fingerprint": run.get("data_fingerprint"),
        "label_space": run.get("label_space"),
        "images": store.distinct_images([run_id]).get(run_id, 0),
        "seed": None if run.get("seed") is None else int(run["seed"]),
        "status": run.get("status"),
    }


def compute(store: Store, runs: list[StepRun], req: CardRequest) -> list[Number]:
    """Every benchmark's numbers, in the card's order."""
    from robustlab.workflows.card import benchmarks as b

    ctx = b.Context(store, np.random.default_rng(int(req.bootstrap_seed)), int(req.n_resamples))
    base = next((r for r in runs if r.step.role == "baseline"), None)
    out: list[Number] = []
    for r in runs:
        if r.step.role != "model":
            continue
        bench = r.step.benchmark
        if bench == "imagenet-c":
            out += b.imagenet_c(ctx, r.run_id, (base.step.model, base.run_id) if base else None)
        elif bench == "ximagenet12":
            out += b.ximagenet12(ctx, r.run_id)
        elif bench == "imagenet9":
            out += b.imagenet9(ctx, r.run_id)
        elif bench == "imagenet-e":
            out += b.imagenet_e(ctx, r.run_id)
        else:
            out += b.imagenet_d(ctx, r.run_id)
    return out


def _same_card(out: Path, card: dict) -> bool:
    """Whether ``out/card.json`` holds this very card (same runs, numbers and notes): then
    its report is this card's too and is not rebuilt (a report takes a minute)."""
    try:
        old = json.loads((out / "card.json").read_text(encoding="utf-8")).get("robustlab")
    except (OSError, ValueError, AttributeError):
        return False
    return old == json.loads(json.dumps(card, default=str))


def check_request(req: CardRequest) -> None:
    """Outputs never clobber inputs, and the card fills only a folder it made (the CLI
    checks the same before parsing is done; the Python API arrives here directly)."""
    from robustlab.files.safety import Database, Folder, check_out_folder, check_outputs

    check_outputs(
        {
            "--data": req.data,
            "--masks": req.masks,
            "--imagenet-d": req.imagenet_d,
            "--labels": req.labels_csv,
        },
        {
            "--out": Folder(req.out, owned=True),
            "--db": Database(req.database),
            "--out's inputs folder": Folder(req.inputs, owned=True),
        },
    )
    check_out_folder(req.out, command="card", flag="--out", allow_flag=None)
    check_out_folder(req.inputs, command="card", flag="--out's inputs folder", allow_flag=None)


def build_card(req: CardRequest):
    """:func:`robustlab.workflows.card.card` for a built request."""
    from robustlab.metrics.reference import reference_rows
    from robustlab.files.safety import claim_out_folder
    from robustlab.version import __version__
    from robustlab.workflows.card.result import CardResult
    from robustlab.workflows.card.write import number_dicts, write_all, write_cells

    check_request(req)
    plan = plan_card(req)
    claim_out_folder(req.out, command="card")
    runs = run_steps(req, plan)
    store = Store(req.database)
    numbers = compute(store, runs, req)
    model_runs = {r.step.benchmark: r for r in runs if r.step.role == "model"}
    prov = {bench: provenance(store, r.run_id) for bench, r in model_runs.items()}
    first = next(iter(prov.values()))
    run_ids = {
        r.step.benchmark + ("" if r.step.role == "model" else ":baseline"): r.run_id for r in runs
    }
    mode = next(
        (n.note for n in numbers if n.metric in ("mce", "mce_vs_baseline", "mean_error")), ""
    )
    card = {
        "model": req.model,
        "weights_hash": first["weights_hash"],
        "version": __version__,
        "benchmarks": list(model_runs),
        "footnote": (
            f"robustlab {__version__}: {req.model} on {first['images']} photos of "
            f"{req.data.name}/ (data fingerprint {str(first['data_fingerprint'])[:16]}), "
            f"{', '.join(TITLES[b] for b in model_runs)}; ImageNet-C CE: {mode}"
        ),
        "numbers": number_dicts(numbers),
        "skipped": dict(plan.skipped),
        "left_out": {k: list(v) for k, v in plan.left_out.items()},
        "provenance": prov,
        "run_ids": run_ids,
        "n_resamples": int(req.n_resamples),
        "bootstrap_seed": int(req.bootstrap_seed),
    }
    reference = reference_rows(list(TITLES))  # skipped ones too: "benchmark skipped"
    row_prov = {
        b: {
            "run_id": p["run_id"],
            "model": p["model_spec"],
            "weights_hash": p["weights_hash"],
            "protocol": p["protocol"],
            "data_fingerprint": p["data_fingerprint"],
            "robustlab": __version__,
        }
        for b, p in prov.items()
    }
    card["csvs"] = write_cells(store, req.out, row_prov)
    unchanged = _same_card(req.out, card)
    files = write_all(req.out, card, reference)
    if req.report and unchanged and (req.out / "report.html").is_file():
        print("report unchanged (the same card as the one in the folder)", file=sys.stderr)
        files["report.html"] = req.out / "report.html"
    elif req.report:
        from robustlab.workflows.report import build_report

        build_report(
            req.database,
            req.out / "report.html",
            run_ids=list(run_ids.values()),
            title=f"robustlab card: {req.model}",
            card=card,
            force=False,
        )
        files["report.html"] = req.out / "report.html"
    return CardResult(
        req.out,
        files,
        card["csvs"],
        run_ids,
        sum(r.n_written for r in runs),
        dict(plan.skipped),
        card["numbers"],
    )
