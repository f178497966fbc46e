"""``robustlab generate SUITE --data DIR --out DIR``: write a suite's images to disk."""

from __future__ import annotations

from robustlab.commands._args import (
    Deprecated,
    add_backend,
    add_bboxes,
    add_cell_filters,
    add_into_existing,
    add_labels,
    add_masks,
    add_no_progress,
    add_seed,
    add_tools,
    add_unlabelled,
    add_workers,
    count,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "generate",
        help="write a suite's shifted images as <out>/<shift>/<level>/<class>/<file>",
        description="Generate a suite (e.g. imagenet-c) from an ImageFolder tree or a flat "
        "folder with labels.csv. Rerunning the same command resumes: finished files are kept.",
    )
    p.add_argument(
        "suite", help="built-in suite name (see `robustlab list suites`) or a suite .yaml"
    )
    p.add_argument(
        "--data",
        required=True,
        help="source images: <class>/<file> tree or flat folder + labels CSV",
    )
    p.add_argument(
        "--out",
        required=True,
        help="output folder, or an fsspec URL such as s3://bucket/prefix (resumes when it "
        "already holds a run)",
    )
    add_labels(p)
    add_unlabelled(p)
    add_masks(p)
    add_bboxes(p)
    add_cell_filters(p, corruptions=True)
    p.add_argument(
        "--image-format",
        dest="fmt",
        choices=["jpeg", "png"],
        default=None,
        help="file format of the generated images (default: the suite's, JPEG q85 for imagenet-c)",
    )
    p.add_argument(
        "--format", action=Deprecated, dest="fmt", choices=["jpeg", "png"], new="--image-format"
    )
    p.add_argument(
        "--out-layout",
        choices=["folders", "npy"],
        default="folders",
        help="folders: a file per cell (cifar-c adds the release's .npy arrays); npy "
        "(cifar-c only): the CIFAR-10-C arrays alone, written directly, no file per cell",
    )
    p.add_argument(
        "--keep-size",
        action="store_true",
        help="no resize or crop; sources under 32x32 are skipped",
    )
    add_seed(p)
    add_tools(p)
    add_into_existing(p)
    add_workers(p)
    p.add_argument(
        "--limit", type=count, default=None, help="only the first N images (sorted by id)"
    )
    add_backend(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.generate import (
        GenerateCells,
        GenerateExecution,
        GenerateInputs,
        generate,
    )
    from robustlab.workflows.keywords import specs_from_args

    from robustlab.workflows.tools import ToolSpec

    parts = {
        "cells": GenerateCells,
        "inputs": GenerateInputs,
        "execution": GenerateExecution,
        "tools": ToolSpec,
    }
    res = generate(args.suite, args.data, args.out, **specs_from_args("generate", args, parts))
    # Two rates, each naming its unit: source photos read (each gives one file per cell)
    # and files written by this call.
    photos = res.samples / res.seconds if res.seconds > 0 else 0.0
    files = res.written / res.seconds if res.seconds > 0 else 0.0
    redrawn = f" ({len(res.redrawn)} redrawn: not what generate wrote)" if res.redrawn else ""
    # --out-layout npy writes cells into the release arrays: they are rows, not files.
    unit, where = ("cells", " into the .npy arrays") if res.release else ("files", "")
    print(
        f"{res.out}: {res.written} written{where}{redrawn}, {res.skipped_existing} already "
        f"there, {res.failed} failed, {len(res.skipped_inputs)} inputs skipped "
        f"({res.samples} source photos x {res.cells} cells, {res.seconds:.1f} s: "
        f"{photos:.3g} source photos/s, {files:.3g} {unit}/s); manifest: {res.manifest_path}"
    )
    if res.stages:
        from robustlab.execution.ray.pipeline import stages_line

        print(stages_line(res.stages))
    for sid, reason in res.skipped_inputs[:10]:
        print(f"  skipped {sid}: {reason}")
    if len(res.skipped_inputs) > 10:
        print(f"  ... {len(res.skipped_inputs) - 10} more in the manifest")
    produced = res.written + res.skipped_existing
    return 0 if produced or not res.samples else 1
