"""``robustlab evaluate MODEL --data DIR [--suite SUITE] [--db FILE]``."""

from __future__ import annotations

from robustlab.commands._args import (
    add_backend,
    add_batch_size,
    add_cell_filters,
    add_db,
    add_defence_args,
    add_device,
    add_inference_args,
    add_label_space,
    add_labels,
    add_masks,
    add_no_progress,
    add_seed,
    add_tools,
    add_weights,
    add_workers,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="evaluate a model on clean images and on every cell of a suite",
        description="Evaluate MODEL on the images in --data (clean) and on every cell of "
        "--suite, applying the shifts on the fly (nothing written to disk). "
        "Predictions go to a DuckDB file; rerunning resumes an interrupted run.",
    )
    p.add_argument("model", help="model spec: lite0, timm:NAME, torchvision:NAME, onnx:PATH, ...")
    p.add_argument(
        "--data",
        required=True,
        help="image folder (class folders, or flat + labels CSV), a folder written by "
        "generate, or a published set as downloaded (ImageNet-C, ImageNet-9 bg_challenge, "
        "XIMAGENET-12, ImageNet-E archive, ImageNet-D: recognised by its layout, see "
        "docs/fidelity.md)",
    )
    p.add_argument(
        "--suite", default=None, help="suite name or YAML file (default: clean images only)"
    )
    add_db(p)
    add_seed(p)
    add_cell_filters(p)
    add_labels(p)
    add_masks(p)
    add_label_space(p, default="the suite's")
    add_weights(p)
    add_device(p)
    add_batch_size(p)
    add_defence_args(p)
    add_tools(p)
    add_inference_args(p)
    add_workers(p)
    p.add_argument(
        "--lanes",
        type=int,
        default=None,
        help="batches a model on the CPU computes at once, each on its share of the torch "
        "threads (default: 2 with two threads or more; 1: one batch at a time); the same "
        "predictions",
    )
    add_backend(p)
    p.add_argument(
        "--shift-device",
        default=None,
        help="apply the corruptions and mask scenes batched as torch tensor operations on this "
        "device (cuda, cpu) after the workers decode (with --backend ray: on the model "
        "actors, cuda on their GPUs): other pixels than the exact path, the same "
        "statistics, a run of its own (default: the exact CPU path, byte for byte the "
        "reference's)",
    )
    p.add_argument(
        "--shift-jpeg",
        choices=("device", "cpu"),
        default="cpu",
        help="with --shift-device: the protocol's JPEG round trip on the CPU (default: "
        "libjpeg, the protocol's bytes) or on the device's codec (nvJPEG on CUDA: faster, "
        "other pixels, measurably other error rates)",
    )
    p.add_argument(
        "--protocol",
        default=None,
        help="how the model sees the images, instead of the benchmark's official protocol "
        "(ImageNet-C: 256/224 bilinear then the model's resize; ImageNet-D: the model's own "
        "eval transform; ImageNet-E: the stored image's 256/224 then the model's resize): a "
        "name (imagenet-c, model, imagenet-e, imagenet-e-archive) or key=value pairs such as "
        "view=model or resize=none,crop=none,view=model; a run of its own",
    )
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from robustlab.commands._tables import format_table
    from robustlab.store import Store
    from robustlab.workflows.evaluate import EvaluateRequest, run_request

    Store(args.db).check()  # a damaged --db fails now, not after the model has loaded
    res = run_request(EvaluateRequest.from_args(args))
    df = res.table
    show = df[["model", "suite", "shift", "level", "n", "top1", "top5", "error"]]
    sys.stdout.write(format_table(show, "table"))
    skipped = res.skipped
    if skipped:
        print(
            f"skipped {len({s[0] for s in skipped})} image(s); first: {skipped[0][0]}: "
            f"{skipped[0][1]} (all listed in the run record)",
            file=sys.stderr,
        )
    if res.stages:
        from robustlab.execution.ray.pipeline import stages_line

        print(stages_line(res.stages), file=sys.stderr)
    if res.throughput:
        from robustlab.execution.progress import throughput_line

        print(throughput_line(res.throughput), file=sys.stderr)
    if res.protocol:
        print(f"protocol {res.protocol}", file=sys.stderr)
    print(f"run {res.run_id} stored in {res.db}", file=sys.stderr)
    if df.empty or int(df["n"].sum()) == 0:
        # A run without a single prediction has no number to report: say so, as generate does.
        why = f"; first: {skipped[0][0]}: {skipped[0][1]}" if skipped else ""
        print(
            f"robustlab evaluate: error: no image of {args.data} could be used, so there are "
            f"no results{why}",
            file=sys.stderr,
        )
        return 1
    return 0
