"""``robustlab mine --data DIR --out DIR``: the images several surrogates all get wrong."""

from __future__ import annotations

from robustlab.commands._args import (
    add_backend,
    add_batch_size,
    add_cell_filters,
    add_db,
    add_device,
    add_inference_args,
    add_k,
    add_labels,
    add_no_progress,
    add_workers,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "mine",
        help="keep the images that k of n surrogate models get wrong (ImageNet-D mining)",
        description="Evaluate surrogate classifiers on an image folder (stored in the results "
        "database like any evaluation, resumable), keep the images at least k of them get wrong "
        "under the label space's rule, and write the hard subset (hard links or copies, labels.csv, "
        "hard.csv with each surrogate's guess) plus a mining record in the database.",
    )
    p.add_argument(
        "--data",
        required=True,
        help="images to mine: a class-folder tree, a flat folder + labels CSV, a "
        "`robustlab synth` folder or a `robustlab generate` folder",
    )
    p.add_argument("--out", default=None, help="folder for the hard subset (default: record only)")
    p.add_argument(
        "--surrogates",
        default="lite0,lite1,lite2",
        help="comma-separated model specs (default lite0,lite1,lite2, bundled offline)",
    )
    p.add_argument(
        "--weights",
        default=None,
        help="comma-separated weights paths, one per surrogate (empty for none)",
    )
    add_k(p, voters="surrogates are wrong (default: all of them)", default=None)
    p.add_argument(
        "--label-space",
        default=None,
        help="label space of the correctness rule (e.g. imagenet-d; default: the "
        "suite's, else imagenet1k)",
    )
    add_labels(p)
    p.add_argument(
        "--copy", action="store_true", help="copy the kept images instead of hard-linking them"
    )
    p.add_argument(
        "--include-clean",
        action="store_true",
        help="also mine a generated folder's clean source images",
    )
    add_cell_filters(p)
    add_db(p)
    add_device(p)
    add_batch_size(p)
    add_inference_args(p)
    add_workers(p)
    add_no_progress(p)
    add_backend(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.imagenet_d.mine import MineExecution, MineInputs, MineRule, mine
    from robustlab.workflows.keywords import specs_from_args

    parts = {"rule": MineRule, "inputs": MineInputs, "execution": MineExecution}
    specs = specs_from_args(
        "mine",
        args,
        parts,
        surrogates=[s.strip() for s in args.surrogates.split(",") if s.strip()],
        weights=[w.strip() or None for w in args.weights.split(",")] if args.weights else None,
        include_clean=True if args.include_clean else None,
    )
    res = mine(args.data, **specs)
    kept = len(res.kept)
    total = len(res.table)
    print(
        f"mining {res.mining_id}: kept {kept} of {total} candidates "
        f"({100.0 * kept / total:.1f} %) that at least {res.k} of {res.n} surrogates "
        f"({', '.join(res.surrogates)}) get wrong; runs {', '.join(res.run_ids)}"
        + (f"; hard subset in {res.out}" if res.out else "")
    )
    for note in res.notes:
        print(f"  note: {note}")
    return 0
