"""Surface-variation protocols on the offline emoji set (ICONS-50's experiment, offline).

Builds the emoji set (`robustlab data icons`), then trains the small CNN from scratch under
each protocol and prints in-distribution and held-out top-1:

- style hold-out: each style in turn (train on the other two styles),
- subtype hold-out: one subtype of each class (broad-class accuracy on it),
- the control: one skin-tone version of each multi-version icon.

Usage (CPU, a few minutes per protocol on 2 cores):

    OMP_NUM_THREADS=2 python benchmarks/surface_variation.py --out /tmp/sv [--epochs 6]

Numbers from this script are in docs/surface-variation.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main() -> None:
    from robustlab.data.emoji import build_icons
    from robustlab.train.holdout import HoldoutConfig, make_split, read_set, run_holdout

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/surface-variation")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--protocols", default="style=symbola,style=noto,style=openmoji,subtypes,versions"
    )
    args = ap.parse_args()
    out = Path(args.out)
    icons = out / "icons"
    if not (icons / "metadata.csv").is_file():
        t = time.perf_counter()
        res = build_icons(icons, size=32)
        print(
            f"built {sum(res.counts.values())} images {res.counts} in {res.classes} classes "
            f"({time.perf_counter() - t:.0f} s)",
            flush=True,
        )
    data = read_set(icons)
    config = HoldoutConfig(epochs=args.epochs, seed=args.seed)
    print(
        "| protocol | held out | train | in-dist. n | in-dist. top-1 | held-out n | held-out top-1 | s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for proto in args.protocols.split(","):
        kw = (
            {"holdout": proto}
            if "=" in proto
            else {"holdout_subtypes": 1}
            if proto == "subtypes"
            else {"versions": True}
        )
        split = make_split(data.meta, seed=args.seed, **kw)
        t = time.perf_counter()
        r = run_holdout(
            data,
            split,
            config,
            db=out / "sv.duckdb",
            out=out / "checkpoints",
            progress=lambda e, loss, name=split.label: print(
                f"  {name} epoch {e}: loss {loss:.3f}", file=sys.stderr, flush=True
            ),
        )
        print(
            f"| {split.protocol} | {split.label} | {len(split.train)} | {r.n_seen} | "
            f"{100 * r.seen_top1:.1f} % | {r.n_held} | {100 * r.held_top1:.1f} % | "
            f"{time.perf_counter() - t:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
