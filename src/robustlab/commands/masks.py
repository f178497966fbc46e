"""``robustlab masks``: make and cache foreground masks, with a quality record per image."""

from __future__ import annotations

from robustlab.commands._args import add_bboxes, add_into_existing, add_labels, add_no_progress

from robustlab.errors import InputError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "masks",
        help="make foreground masks automatically (GrabCut, CAM-seeded GrabCut, your segmentation model)",
    )
    p.add_argument(
        "--data", required=True, help="image folder (ImageFolder tree or flat + labels CSV)"
    )
    p.add_argument(
        "--out", required=True, help="folder for the mask PNGs and masks_quality.csv/json"
    )
    p.add_argument(
        "--method",
        choices=["grabcut", "cam-grabcut", "segmentation"],
        default="grabcut",
        help="grabcut: seed by the bbox (CAM when an image has none); "
        "cam-grabcut: seed by a lite0 class-activation map (bbox bounds it); "
        "segmentation: non-background pixels of your own --seg-model",
    )
    p.add_argument(
        "--seg-model",
        help="with --method segmentation: torchvision:NAME (e.g. torchvision:deeplabv3_resnet50)",
    )
    p.add_argument(
        "--seg-weights", help="with --method segmentation: local state-dict file of --seg-model"
    )
    p.add_argument(
        "--seg-classes", type=int, default=21, help="output classes of the checkpoint (VOC: 21)"
    )
    p.add_argument("--seg-background", type=int, default=0, help="index of the background class")
    add_bboxes(p)
    add_labels(p)
    p.add_argument(
        "--cam-class",
        choices=["top1", "label"],
        default="top1",
        help="CAM target: the model's top-1 class or the sample's ImageNet-1k label",
    )
    p.add_argument(
        "--max-side", type=int, default=256, help="GrabCut work resolution (longer side)"
    )
    p.add_argument("--iterations", type=int, default=5, help="GrabCut iterations")
    p.add_argument("--overwrite", action="store_true", help="remake masks that already exist")
    add_into_existing(p)
    p.add_argument(
        "--threads",
        type=_threads,
        default=None,
        help="images masked at once, each on one thread (default: one per CPU core; "
        "1: one after another)",
    )
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from robustlab.data.sources import discover
    from robustlab.masks.auto import AutoMasker, MaskerParams
    from robustlab.masks.build import build_masks

    if args.max_side < 32 or args.iterations < 1:
        raise InputError("--max-side must be at least 32 and --iterations at least 1")
    segmenter = None
    if args.method == "segmentation":
        if not (args.seg_model and args.seg_weights):
            raise InputError("--method segmentation needs --seg-model and --seg-weights")
        from robustlab.workflows.segment import load_segmentation_model

        segmenter = load_segmentation_model(
            args.seg_model,
            weights=args.seg_weights,
            num_classes=args.seg_classes,
            background=args.seg_background,
        )
    elif args.seg_model or args.seg_weights:
        raise InputError("--seg-model/--seg-weights only apply to --method segmentation")
    data = Path(args.data).expanduser()
    # The CLI checked --out against --data both ways (commands._outputs.check_args):
    # masks inside the data would become a class 'masks' on the next run.
    samples = discover(data, labels_csv=args.labels_csv, bboxes=args.bboxes)
    if args.method in ("grabcut", "cam-grabcut"):
        print(_seeding_line(args.method, samples, args.bboxes), flush=True)
    params = MaskerParams(max_side=args.max_side, iterations=args.iterations)
    from robustlab.execution.progress import LineProgress

    lines = None if args.no_progress else LineProgress(len(samples), what="masks", unit="img")
    summary = build_masks(
        samples,
        args.out,
        AutoMasker(args.method, params=params, segmenter=segmenter),
        overwrite=args.overwrite,
        cam_class=args.cam_class,
        progress=None if lines is None else lambda done, _total: lines.update(done - lines.done),
        threads=args.threads,
    )
    if lines is not None:
        lines.close()
    print(
        f"masks: {summary['n']} images, {summary['n_written']} usable masks in {args.out} "
        f"({summary['n'] - summary['n_written']} empty/full, unusable), {summary['n_skipped']} "
        f"skipped (unreadable, or a mask of another size), {summary['n_suspicious']} "
        f"suspicious; flags: {_counts_text(summary['flag_counts'])}"
    )
    return 0


def _threads(text: str) -> int:
    """``--threads``: a whole number from 1 to ``commands._args.max_workers()``."""
    import argparse

    from robustlab.commands._args import max_workers

    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= n <= max_workers():
        raise argparse.ArgumentTypeError(f"must be 1 to {max_workers()}, got {n}")
    return n


def _seeding_line(method: str, samples, bboxes) -> str:
    """Which seeding GrabCut gets, said before the work starts: without a box an image
    falls back to a lite0 CAM, which users should not have to discover from the masks."""
    boxed = sum(s.bbox is not None for s in samples)
    rest = len(samples) - boxed
    if method == "cam-grabcut":
        return f"seeding: lite0 CAM for all {len(samples)} images" + (
            f" ({boxed} bounded by their box)" if boxed else ""
        )
    line = f"seeding: {boxed} images by their box, {rest} by a lite0 CAM (no box)"
    if rest and not bboxes:
        line += "; pass --bboxes CSV to seed by object boxes"
    return line


def _counts_text(counts: dict) -> str:
    """``{"tiny": 2, "full": 1}`` as ``tiny 2, full 1`` (``none`` when empty)."""
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "none"
