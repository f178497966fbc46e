"""``robustlab card``: run every benchmark the inputs allow and write the robustness card."""

from __future__ import annotations

from robustlab.commands._args import (
    add_bootstrap,
    add_cell_filters,
    add_db,
    add_device,
    add_labels,
    add_masks,
    add_no_progress,
    add_seed,
    add_workers,
    check_resamples,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "card",
        help="one model's robustness card across ImageNet-C, XIMAGENET-12, ImageNet-9, "
        "ImageNet-E and ImageNet-D, beside the published numbers",
    )
    p.add_argument("model", help="model spec (lite0, timm:resnet50, torchvision:resnet50, ...)")
    p.add_argument(
        "--data", required=True, help="folder of labelled photos (ImageFolder or flat + labels.csv)"
    )
    p.add_argument(
        "--out",
        default="robustlab-card",
        help="folder for card.md, card.json, model-index.yaml, cells/ and report.html",
    )
    add_masks(p)
    p.add_argument(
        "--auto-masks",
        action="store_true",
        help="without --masks: make GrabCut masks into OUT/masks for the scene suites and "
        "ImageNet-E (otherwise those benchmarks are skipped)",
    )
    p.add_argument(
        "--imagenet-d",
        default=None,
        help="an ImageNet-D set (<subset>/<class>/<file>): the published download or your "
        "synth/mine/review output (otherwise ImageNet-D is skipped)",
    )
    p.add_argument(
        "--baseline",
        default=None,
        help="a model spec run on the same ImageNet-C images as the CE normaliser when "
        "AlexNet's errors do not apply (they need the full 50,000-image val set; default: "
        "unnormalised CE then)",
    )
    add_cell_filters(p)
    add_labels(p)
    add_db(p)
    add_seed(p)
    add_bootstrap(p, legacy_seed=False)
    add_workers(p)
    add_device(p)
    p.add_argument("--no-report", action="store_true", help="do not write OUT/report.html")
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.card import card

    check_resamples(args)
    result = card(
        args.model,
        args.data,
        args.out,
        masks=args.masks,
        auto_masks=args.auto_masks,
        imagenet_d=args.imagenet_d,
        db=args.db,
        baseline=args.baseline,
        labels_csv=args.labels_csv,
        shifts=args.shifts,
        levels=args.levels,
        seed=args.seed,
        bootstrap_seed=args.bootstrap_seed,
        n_resamples=args.resamples,
        workers=args.workers,
        device=args.device,
        progress=False if args.no_progress else None,
        report=not args.no_report,
    )
    for n in result.numbers:
        if n["headline"]:
            value = "n/a" if n["value"] is None else f"{n['value']:.4g} {n['unit']}"
            ci = "" if n["lo"] is None else f" (95 % CI {n['lo']:.4g}-{n['hi']:.4g})"
            print(f"{n['benchmark']}: {n['label']}: {value}{ci} on {n['n_images']} images")
    for bench, why in result.skipped.items():
        print(f"skipped {bench}: {why}")
    todo = (
        "nothing new to compute"
        if result.n_computed == 0
        else f"{result.n_computed} predictions computed"
    )
    print(f"{todo}; card: {result.files['card.md']}")
    return 0
