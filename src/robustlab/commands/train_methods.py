"""``robustlab train ... --method``: the flags and the output of the training-method experiment
(:func:`robustlab.workflows.train.methods.run_methods`); the rest of ``robustlab train`` is in
:mod:`robustlab.commands.train`."""

from __future__ import annotations

import math

from robustlab.commands._args import CommaList
from robustlab.errors import InputError


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise InputError(f"not a finite number: {text!r}")
    return value


# robustlab.workflows.train.methods.METHODS, spelled here so that --help imports no training code (a
# test checks that the two agree).
METHODS = ("plain", "stability", "corruption-aug")


def add_method_arguments(p) -> None:
    """The ``--method`` flags of ``robustlab train``."""
    g = p.add_argument_group(
        "training methods (ImageNet-C paper, section 5)",
        "--method fine-tunes on the clean training split with one method, evaluates it and the "
        "un-fine-tuned model on the test split under --suite (default imagenet-c) and prints "
        "mCE relative to the un-fine-tuned model (its mCE is 1). Every model is a stored run; "
        "its training record (method, parameters, held-out families) is in "
        "config['fine_tuned']['method'].",
    )
    g.add_argument(
        "--method",
        choices=METHODS,
        default=None,
        help="plain (clean fine-tuning, the control), stability (stability training), "
        "corruption-aug (corruption augmentation with held-out families)",
    )
    g.add_argument(
        "--stability-noise",
        action=CommaList,
        default=None,
        help="uniform noise half-width on [0,1] pixels (default 0.05); a comma list "
        "trains one model per value (the paper: 0.01,0.05,0.1)",
    )
    g.add_argument(
        "--stability-weight",
        action=CommaList,
        default=None,
        help="weight of the clean/noisy KL divergence (default 0.05); a comma list "
        "trains one model per value, crossed with the noises (the paper: "
        "0.01,0.05,0.1)",
    )
    g.add_argument(
        "--holdout-family",
        action=CommaList,
        dest="holdout_families",
        default=None,
        help="corruption families never drawn in training (noise, blur, weather, "
        "digital; repeatable or comma list: all are held out together); the "
        "test covers these families unless --shift says otherwise",
    )
    g.add_argument(
        "--aug-clean-fraction",
        type=float,
        default=0.5,
        help="share of corruption-aug draws that keep the clean image (default 0.5)",
    )


def run_method_command(args) -> int:
    """``robustlab train --method``: train, evaluate, print the mCE table."""
    import sys

    from robustlab.commands._tables import format_table
    from robustlab.store import Store
    from robustlab.workflows.train.methods import make_methods, run_methods

    if args.masks is not None or args.protocol is not None:
        raise InputError(
            "--masks and --protocol belong to the scenario protocols (EX1/EX2), not to --method",
            hint="leave them out with --method",
        )
    if args.method != "stability" and (args.stability_noise or args.stability_weight):
        raise InputError(
            "--stability-noise and --stability-weight apply to --method stability only"
        )
    Store(args.db).check()
    methods = make_methods(
        args.method,
        noises=[_number(v) for v in args.stability_noise or ["0.05"]],
        weights=[_number(v) for v in args.stability_weight or ["0.05"]],
        holdout_families=args.holdout_families or (),
        clean_fraction=args.aug_clean_fraction,
    )
    args.suite = args.suite or "imagenet-c"
    res = run_methods(train_request(args), methods)
    table = res.summary[
        ["method", "clean_error", "mce", "relative_mce", "mce_held_out", "n_corruptions", "run_id"]
    ]
    sys.stdout.write(format_table(table, "table"))
    for label, tr in res.trainings.items():
        state = "reused" if tr.reused else f"loss {tr.losses[0]:.3f} -> {tr.losses[-1]:.3f}"
        print(f"trained {label}: {tr.checkpoint} ({state})", file=sys.stderr)
    print(
        f"mCE and relative mCE are relative to the un-fine-tuned {args.model} (base = 1) on "
        f"{len(res.split.test)} test images; split: {len(res.split.train)} train; runs stored "
        f"in {args.db}",
        file=sys.stderr,
    )
    return 0


def train_request(args, *, preprocess=None):
    """The :class:`~robustlab.workflows.train.request.TrainRequest` of ``robustlab train``'s
    flags, for the protocols (:mod:`robustlab.commands.train`) and ``--method`` alike
    (``--suite`` already defaulted); ``preprocess`` is the pixel defence the protocols
    train behind (``--method`` runs have always been trained without one)."""
    from robustlab.workflows.train import TrainConfig
    from robustlab.workflows.train.request import (
        TrainCells,
        TrainData,
        TrainExecution,
        TrainModel,
        TrainRequest,
    )

    config = TrainConfig(
        mode=args.mode,
        steps=args.steps,
        batch_size=args.train_batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        seed=args.seed,
    )
    from robustlab.workflows.keywords import specs_from_args

    from robustlab.workflows.tools import ToolSpec

    parts = {
        "model": TrainModel,
        "data": TrainData,
        "cells": TrainCells,
        "execution": TrainExecution,
        "tools": ToolSpec,
    }
    specs = specs_from_args(
        "train", args, parts, model_spec=args.model, config=config, preprocess=preprocess
    )
    return TrainRequest(**specs)
