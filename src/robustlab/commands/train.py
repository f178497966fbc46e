"""``robustlab train MODEL --data DIR --masks DIR``: XIMAGENET-12's EX1/EX2 protocols;
``robustlab train MODEL --data DIR --method stability|corruption-aug|plain``: the ImageNet-C
paper's training-time robustness methods, scored by mCE against the un-fine-tuned model."""

from __future__ import annotations

from robustlab.commands._args import (
    Deprecated,
    add_cell_filters,
    add_db,
    add_defence_args,
    add_device,
    add_label_space,
    add_labels,
    add_masks,
    add_no_progress,
    add_seed,
    add_tools,
    seed,
    add_workers,
)
from robustlab.commands.train_methods import (
    add_method_arguments,
    run_method_command,
    train_request,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune a model per scenario (EX1/EX2) and compute the robustness score",
        description="Fine-tune MODEL (linear probe or full) on a class-stratified training split: "
        "EX1 trains on the original images and tests on every scenario, EX2 trains "
        "and tests within each scenario. Each fine-tuned model is evaluated on the "
        "test split and stored in --db like any run; checkpoints go to --out and "
        "are reused when a rerun asks for the same training.",
    )
    p.add_argument("model", help="base model spec: lite0, timm:NAME, ...")
    p.add_argument(
        "--data",
        required=True,
        help="source images (class folders, or flat + labels CSV), "
        "or a folder written by `robustlab generate`",
    )
    add_masks(p)
    p.add_argument(
        "--suite",
        default=None,
        help="suite of scenarios (default: ximagenet12; imagenet-c with --method)",
    )
    p.add_argument(
        "--experiment",
        dest="protocol",
        choices=["ex1", "ex2", "both"],
        default=None,
        help="XIMAGENET-12's training experiment: ex1 (cross), ex2 (inner) or both (default; "
        "needed for the full score)",
    )
    p.add_argument(
        "--protocol",
        action=Deprecated,
        dest="protocol",
        choices=["ex1", "ex2", "both"],
        new="--experiment (--protocol is evaluate's view protocol)",
    )
    add_method_arguments(p)
    add_cell_filters(p)
    p.add_argument(
        "--mode",
        choices=["linear", "full"],
        default="linear",
        help="linear probe (classifier layer only; default) or full fine-tune",
    )
    p.add_argument("--steps", type=int, default=100, help="optimiser steps per model (default 100)")
    p.add_argument(
        "--train-batch-size", type=int, default=16, help="images per training step (default 16)"
    )
    p.add_argument(
        "--lr", type=float, default=None, help="learning rate (default 1e-3 linear, 1e-4 full)"
    )
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (default 0)")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=0.3,
        help="share of each class held out (default 0.3)",
    )
    p.add_argument(
        "--split-seed", type=seed, default=0, help="seed of the train/test split (default 0)"
    )
    add_seed(p)
    add_tools(p)
    p.add_argument("--out", default="checkpoints", help="checkpoint folder (default ./checkpoints)")
    add_db(p)
    add_labels(p)
    add_label_space(p, default="the suite's")
    p.add_argument("--weights", default=None, help="base weights file for the model")
    add_device(p)
    p.add_argument(
        "--batch-size", type=int, default=None, help="images per evaluation forward pass"
    )
    add_defence_args(p, tta=False)
    add_workers(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    if args.method is not None:
        return run_method_command(args)
    args.suite = args.suite or "ximagenet12"
    args.protocol = args.protocol or "both"

    from robustlab.commands._tables import format_table
    from robustlab.store import Store
    from robustlab.workflows.train.protocols import run_protocols

    Store(args.db).check()  # a damaged --db fails now, not after the training

    res = run_protocols(train_request(args, preprocess=args.preprocess), args.protocol)
    sys.stdout.write(
        format_table(
            res.runs[["protocol", "trained_on", "tested_on", "n", "top1", "run_id"]], "table"
        )
    )
    for name, tr in res.trainings.items():
        first, last = tr.losses[0], tr.losses[-1]
        state = "reused" if tr.reused else f"loss {first:.3f} -> {last:.3f}"
        print(f"trained on {name}: {tr.checkpoint} ({state})", file=sys.stderr)
    sc = res.score
    if sc is None:
        print(
            "robustness score: needs EX1 (mu is the clean accuracy of the model trained on "
            "original images)"
        )
    elif sc.complete:
        print(
            f"robustness score S_robust = {sc.s_robust:.4f} (mu {sc.mu:.4f}, sigma2_cross "
            f"{sc.sigma2_cross:.4f}, sigma2_inner {sc.sigma2_inner:.4f}, {len(sc.scenarios)} scenarios)"
        )
    else:
        missing = sorted(set(sc.missing_cross) | set(sc.missing_inner))
        print(
            f"partial robustness score {sc.s_partial:.4f} (mu {sc.mu:.4f}; missing "
            f"{'EX1' if sc.missing_cross else ''}{'/' if sc.missing_cross and sc.missing_inner else ''}"
            f"{'EX2' if sc.missing_inner else ''} for {', '.join(missing)})"
        )
    print(
        f"split: {len(res.split.train)} train / {len(res.split.test)} test images; "
        f"runs stored in {args.db}",
        file=sys.stderr,
    )
    return 0
