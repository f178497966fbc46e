"""``robustlab segment MODEL --weights PATH --data DIR --masks DIR``: segmentation scores.

XIMAGENET-12 scores segmentation networks as well as classifiers: this runs a torchvision
segmentation checkpoint on the clean images and every scenario cell, compares its
predicted foreground with the object masks, stores per-image pixel counts in the results
database (resumable, like ``evaluate``) and prints mIoU / IoU / pixel accuracy per cell.
"""

from __future__ import annotations

import math
import sys

from robustlab.commands._args import (
    add_batch_size,
    add_cell_filters,
    add_db,
    add_device,
    add_image_data,
    add_labels,
    add_limit,
    add_mask_suite,
    add_masks,
    add_no_progress,
    add_seed,
    add_tools,
    add_weights,
)
from robustlab.errors import InputError

SCORE_COLUMNS = ("pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou")
# robustlab.workflows.segment.DEFAULT_BATCH_SIZE (spelled here so that --help imports no
# torch; tests/test_saliency_segment_requests.py checks that they agree).
DEFAULT_BATCH_SIZE = 8


def add_parser(sub) -> None:
    p = sub.add_parser(
        "segment",
        help="score a segmentation model (mIoU, pixel accuracy) on the scenario cells",
        description="Segment the clean images in --data and every cell of --suite with a local "
        "torchvision segmentation checkpoint, compare predicted foreground (every "
        "class but --background) with the masks in --masks, store per-image counts "
        "in --db (rerunning resumes) and print the per-cell scores.",
    )
    p.add_argument("model", help="torchvision:NAME, e.g. torchvision:lraspp_mobilenet_v3_large")
    add_weights(p, required=True)
    add_image_data(p)
    add_masks(p, required=True)
    add_mask_suite(p)
    add_db(p)
    p.add_argument(
        "--num-classes",
        type=int,
        default=21,
        help="output classes of the checkpoint (default: 21, VOC)",
    )
    p.add_argument(
        "--background", type=int, default=0, help="index of the background class (default: 0)"
    )
    add_seed(p)
    add_tools(p)
    add_cell_filters(p)
    add_labels(p)
    add_device(p)
    add_batch_size(p, default=DEFAULT_BATCH_SIZE)
    add_limit(p, what="images with masks")
    add_no_progress(p)
    p.set_defaults(func=run)


def format_segmentation(df, fmt: str = "table") -> str:
    """Render a segmentation table: scores as percentages in the human formats."""
    from robustlab.commands._tables import format_table

    if fmt in ("csv", "json"):
        return format_table(df, fmt)
    out = df.copy()
    for c in SCORE_COLUMNS:
        if c in out.columns:
            out[c] = [
                ""
                if v is None or (isinstance(v, float) and math.isnan(v))
                else f"{100 * float(v):.2f}"
                for v in out[c]
            ]
    return format_table(out.rename(columns={c: c + " %" for c in SCORE_COLUMNS}), fmt)


def request(args):
    """The :class:`robustlab.workflows.segment.SegmentRequest` of the parsed flags (the
    model loaded from --weights)."""
    from robustlab.workflows._masked import MaskedCells, MaskedData, MaskedExecution
    from robustlab.workflows.keywords import specs_from_args
    from robustlab.workflows.segment import SegmentRequest, load_segmentation_model

    if args.weights == "random":
        raise InputError("--weights needs a checkpoint file; random weights cannot be stored")
    from robustlab.workflows.tools import ToolSpec

    parts = {"data": MaskedData, "cells": MaskedCells, "run": MaskedExecution, "tools": ToolSpec}
    specs = specs_from_args("segment", args, parts)
    model = load_segmentation_model(
        args.model,
        weights=args.weights,
        num_classes=args.num_classes,
        background=args.background,
        device=args.device,
    )
    return SegmentRequest(model, **specs)


def run(args) -> int:
    from robustlab.cells import level_key
    from robustlab.store import Store
    from robustlab.workflows.results import segmentation_table
    from robustlab.workflows.segment import run_segment

    Store(args.db).check()  # a damaged --db fails now, not after the model has loaded
    res = run_segment(request(args))
    rid = res.record["run_id"]
    table, _ = segmentation_table(Store(args.db), run_ids=[rid], require=True)
    wanted = set(zip(res.summary["shift"], res.summary["level"].map(level_key)))
    table = table[[(s, level_key(lv)) in wanted for s, lv in zip(table["shift"], table["level"])]]
    sys.stdout.write(format_segmentation(table.drop(columns=["run_id"]), "table"))
    if res.skipped:
        print(
            f"skipped {len({s[0] for s in res.skipped})} image(s); first: {res.skipped[0][0]}: "
            f"{res.skipped[0][1]} (all listed in the run record)",
            file=sys.stderr,
        )
    print(
        f"run {rid} stored in {args.db} ({res.record['n_written']} new rows"
        f"{', resumed' if res.record['resumed'] else ''})",
        file=sys.stderr,
    )
    return 0
