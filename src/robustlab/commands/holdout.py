"""``robustlab holdout --data DIR --holdout style=X``: the surface-variation protocols."""

from __future__ import annotations

from robustlab.commands._args import add_no_progress, CommaList, add_db, add_device, add_seed


def _subtypes(text: str):
    """``--holdout-subtypes 1`` (per class) or ``--holdout-subtypes duck,owl`` (named)."""
    return (
        int(text) if text.strip().isdigit() else [s.strip() for s in text.split(",") if s.strip()]
    )


def add_parser(sub) -> None:
    p = sub.add_parser(
        "holdout",
        help="train a small network with a style, subtypes or versions held out",
        description="The ImageNet-C paper's surface-variation protocols (ICONS-50): train a "
        "small network from scratch on a labelled image set with one style "
        "(--holdout style=VALUE), some subtypes of each class (--holdout-subtypes) "
        "or one version of each multi-version icon (--holdout-versions, the "
        "control) held out, then test on what was held out and on a seeded "
        "in-distribution share. Each protocol is stored in --db as a run.",
    )
    p.add_argument(
        "--data",
        required=True,
        help="a folder with metadata.csv (robustlab data icons), Icons-50.npy, or "
        "CIFAR-100's cifar-100-python folder",
    )
    p.add_argument(
        "--layout",
        choices=["auto", "folder", "icons50", "cifar100"],
        default="auto",
        help="how to read --data (auto guesses from the files)",
    )
    p.add_argument("--metadata", default=None, help="metadata CSV (default DATA/metadata.csv)")
    p.add_argument(
        "--holdout",
        default=None,
        metavar="COLUMN=VALUE",
        help="hold out the rows with this value, e.g. style=openmoji",
    )
    p.add_argument(
        "--holdout-subtypes",
        type=_subtypes,
        default=None,
        metavar="N|A,B",
        help="hold out N subtypes of each class (seeded), or the subtypes named",
    )
    p.add_argument(
        "--holdout-versions",
        action="store_true",
        help="the control: hold out one version of each icon that has several",
    )
    p.add_argument(
        "--arch",
        default="small-cnn",
        help="small-cnn, resnext, shake-resnext (Shake-Shake), densenet, msdnet "
        "(multi-scale) or timm:NAME (e.g. timm:resnet10t)",
    )
    p.add_argument(
        "--width",
        type=int,
        default=16,
        help="base width: small-cnn first-stage channels; resnext/shake-resnext "
        "bottleneck channels of stage 1 (a multiple of 4); densenet growth rate x 4/3; "
        "msdnet finest-scale channels",
    )
    p.add_argument("--image-size", type=int, default=32, help="input side in pixels")
    p.add_argument("--epochs", type=int, default=8, help="training epochs")
    p.add_argument("--batch-size", type=int, default=64, help="images per training step")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (AdamW, one-cycle)")
    p.add_argument("--no-augment", action="store_true", help="no random shifts and flips")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=0.1,
        help="share of each class's training pool kept as the in-distribution test "
        "(ignored when the data has its own train/test split)",
    )
    add_seed(p)
    add_device(p)
    p.add_argument("--out", default="checkpoints", help="checkpoint folder")
    add_db(p)
    p.add_argument(
        "--classes",
        action=CommaList,
        default=None,
        help="keep only these classes (repeatable or comma-separated)",
    )
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.keywords import specs_from_args
    from robustlab.workflows.train.holdout.workflow import PARTS, run_protocol

    specs = specs_from_args("holdout", args, PARTS, augment=not args.no_augment)
    done = run_protocol(**specs)
    res = done.result
    state = "reused stored run" if res.reused else f"checkpoint {res.checkpoint}"
    print(
        f"held out {res.split.label}: trained on {len(res.split.train)} images of "
        f"{len(done.classes)} classes ({state})"
    )
    print(
        f"in-distribution top-1 {100 * res.seen_top1:.1f} % (n={res.n_seen}); "
        f"held-out top-1 {100 * res.held_top1:.1f} % (n={res.n_held}); run {res.run_id} in {args.db}"
    )
    return 0
