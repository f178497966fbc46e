"""``robustlab saliency MODEL --data DIR --masks DIR``: where a model looks.

Saliency maps (Grad-CAM and its variants through the ``grad-cam`` package, gradient
methods through Captum) on the clean images and every scenario cell of a mask suite,
scored against the object masks (share of positive saliency on the object, pointing game,
share normalised by the object's area) and stored per image in the results database,
resumable like ``evaluate``. Prints the per-cell table and, with several saliency runs in
the database, the per-model numbers and their correlation with robustness.
"""

from __future__ import annotations

import sys

from robustlab.commands._args import (
    add_batch_size,
    add_cell_filters,
    add_db,
    add_device,
    add_image_data,
    add_label_space,
    add_labels,
    add_limit,
    add_mask_suite,
    add_masks,
    add_no_progress,
    add_seed,
    add_tools,
    add_weights,
    add_workers,
)


def add_parser(sub) -> None:
    from robustlab.saliency.methods import DEFAULT_METHOD, METHODS, TARGETS

    p = sub.add_parser(
        "saliency",
        help="saliency maps and foreground reliance on the clean and scenario images",
        description="Compute saliency maps of MODEL on the clean images of --data and on the "
        "scenario cells of --suite, measure how much of each map lies on the object of "
        "--masks (relevance mass, pointing game, area-normalised share), store one row per "
        "image and cell in --db (rerunning resumes) and print the mean foreground share per "
        "cell with a bootstrap interval. Needs the saliency extra: "
        "pip install 'robustlab[saliency]'.",
    )
    p.add_argument("model", help="torch model spec: lite0, timm:NAME, torchvision:NAME, ...")
    add_image_data(p)
    add_masks(p, required=True)
    add_mask_suite(p)
    add_db(p)
    p.add_argument(
        "--method",
        default=DEFAULT_METHOD,
        choices=list(METHODS),
        help=f"saliency method (default: {DEFAULT_METHOD})",
    )
    p.add_argument(
        "--target-layer",
        default=None,
        help="module name a CAM method explains (default: found automatically and recorded)",
    )
    p.add_argument(
        "--target",
        default="predicted",
        choices=TARGETS,
        help="class to explain: the model's top-1 or the true label (default: predicted)",
    )
    add_seed(p)
    add_tools(p)
    add_cell_filters(p)
    add_labels(p)
    add_label_space(p, default="imagenet1k")
    add_weights(p)
    add_device(p)
    add_batch_size(p, what="images per forward/backward pass")
    add_workers(p)
    add_limit(p, what="images with masks")
    add_no_progress(p)
    p.set_defaults(func=run)


def format_saliency(df) -> str:
    """A saliency table as text: shares and scores to three decimals, accuracies and the
    BG-gap in percent (their columns renamed with " %")."""
    import math

    import pandas as pd

    from robustlab.commands._tables import format_table

    percent = ("top1", "top1_clean", "bg_gap")
    out = pd.DataFrame(index=df.index)
    for c in df.columns:
        col = df[c]
        if c in ("n", "n_images") or not pd.api.types.is_float_dtype(col):
            out[c] = col
            continue
        scale, digits = (100.0, 2) if c in percent else (1.0, 3)
        out[c + (" %" if c in percent else "")] = [
            "" if v is None or math.isnan(float(v)) else f"{scale * float(v):.{digits}f}"
            for v in col
        ]
    return format_table(out, "table")


def request(args):
    """The :class:`robustlab.workflows.saliency.SaliencyRequest` of the parsed flags."""
    from robustlab.workflows._masked import MaskedCells, MaskedData
    from robustlab.workflows.saliency import SaliencyExecution, SaliencyModel, SaliencyRequest
    from robustlab.workflows.tools import ToolSpec

    from robustlab.workflows.keywords import specs_from_args

    parts = {
        "model": SaliencyModel,
        "data": MaskedData,
        "cells": MaskedCells,
        "run": SaliencyExecution,
        "tools": ToolSpec,
    }
    return SaliencyRequest(**specs_from_args("saliency", args, parts))


def run(args) -> int:
    from robustlab.workflows.saliency import run_saliency, stored_comparison

    res = run_saliency(request(args))
    show = res.summary.drop(columns=["run_id"])
    sys.stdout.write(format_saliency(show))
    compared = stored_comparison(args.db)
    if compared is not None:
        models, corr = compared
        sys.stdout.write("\n" + format_saliency(models.drop(columns=["run_id"])))
        sys.stdout.write("\n" + format_saliency(corr))
    layer = (res.record["saliency"].get("layer") or {}).get("name")
    print(
        f"{res.record['saliency']['method']} ({res.record['saliency']['library']} "
        f"{res.record['saliency']['version']})" + (f", layer {layer}" if layer else ""),
        file=sys.stderr,
    )
    if res.record["removed_object"]:
        print(
            f"left out {', '.join(res.record['removed_object'])}: the scenario removes the "
            "object, so there is no foreground to look at",
            file=sys.stderr,
        )
    if res.skipped:
        print(
            f"skipped {len({s[0] for s in res.skipped})} image(s); first: {res.skipped[0][0]}: "
            f"{res.skipped[0][1]} (all listed in the run record)",
            file=sys.stderr,
        )
    print(
        f"run {res.record['run_id']} stored in {args.db} ({res.record['n_written']} new rows"
        f"{', resumed' if res.record['resumed'] else ''})",
        file=sys.stderr,
    )
    if res.rows.empty:
        print(
            f"robustlab saliency: error: no image of {args.data} could be used, so there are "
            "no results",
            file=sys.stderr,
        )
        return 1
    return 0
