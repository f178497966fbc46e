"""Surface-variation protocols on the offline emoji set (ICONS-50's experiment, offline).

Builds the emoji set (`robustlab data icons`, 32 px), then trains each architecture from
scratch under each protocol and prints in-distribution and held-out top-1 with 95 % Wilson
intervals, the training time, CPU time and load average, as a Markdown table:

- style hold-out (`style=symbola`: train on noto + openmoji), or any `column=value`,
- `subtypes`: one subtype of each class (broad-class accuracy on it),
- `versions`: the control (one skin-tone version of each multi-version icon).

Every (architecture, protocol) is a stored run in `OUT/sv-ARCH.duckdb` (one database per
architecture, so two architectures train at once without sharing a DuckDB writer); a
rerun with the same settings reuses the stored runs and only prints the table. Each
architecture trains in its own process (one torch thread, the script's niceness),
`--jobs` at once; per-epoch losses go to `OUT/train-ARCH.log`.

The table in docs/surface-variation.md (ResNeXt vs Shake-Shake ResNeXt, DenseNet vs the
MSDNet-style network) is regenerated with:

    nice -n 5 python benchmarks/surface_variation.py --out bench-out \\
        --archs resnext:4,densenet:8,shake-resnext:4,msdnet:4 --epochs 6 \\
        --protocols style=symbola --jobs 2

(`ARCH:WIDTH`; the small CNN of the first measurement is `small-cnn:16 --epochs 5`.)
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path


def _kwargs(proto: str) -> dict:
    if "=" in proto:
        return {"holdout": proto}
    if proto == "subtypes":
        return {"holdout_subtypes": 1}
    if proto == "versions":
        return {"versions": True}
    raise SystemExit(f"unknown protocol {proto!r}")


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion k/n."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return mid - half, mid + half


# The paper's two comparisons: (baseline A, candidate B).
PAIRS = (("resnext", "shake-resnext"), ("densenet", "msdnet"))


def paired_bootstrap(diff, *, seed: int = 0, n: int = 10_000) -> tuple[float, float, float]:
    """Mean of per-image differences and its 95 % percentile bootstrap interval."""
    import numpy as np

    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (n, len(diff)))].mean(1)
    return float(diff.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def _pct(acc: float, n: int) -> str:
    lo, hi = wilson(round(acc * n), n)
    return f"{100 * acc:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]"


def train_one(args, arch: str, width: int) -> None:
    """Worker: train ``arch`` under every protocol into its own database."""
    import torch

    from robustlab.workflows.train.holdout import HoldoutConfig, make_split, read_set, run_holdout

    torch.set_num_threads(1)
    out = Path(args.out)
    data = read_set(out / "icons")
    config = HoldoutConfig(
        arch=arch, width=width, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed
    )
    for proto in args.protocols.split(","):
        split = make_split(data.meta, seed=args.seed, **_kwargs(proto))
        t0 = time.perf_counter()
        run_holdout(
            data,
            split,
            config,
            db=out / f"sv-{arch}.duckdb",
            out=out / "checkpoints",
            device=args.device,
            progress=lambda e, loss, name=f"{arch} {split.label}", t0=t0: print(
                f"{name} epoch {e}: loss {loss:.4f} ({time.perf_counter() - t0:.0f} s, "
                f"load {open('/proc/loadavg').read().split()[0]})",
                file=sys.stderr,
                flush=True,
            ),
        )


def table(args, archs: list[tuple[str, int]]) -> None:
    from robustlab.store import CLEAN_SHIFT, Store
    from robustlab.workflows.train.holdout import (
        HOLDOUT_SHIFT,
        HoldoutConfig,
        make_split,
        read_set,
        run_holdout,
    )

    correct = {}
    out = Path(args.out)
    data = read_set(out / "icons")
    print(
        "| arch | width | params | protocol | held out | train | epochs | first → last loss "
        "| in-dist. top-1 (n) | held-out top-1 (n) | train min (CPU min) | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for arch, width in archs:
        config = HoldoutConfig(
            arch=arch, width=width, epochs=args.epochs, batch_size=args.batch_size, seed=args.seed
        )
        db = out / f"sv-{arch}.duckdb"
        for proto in args.protocols.split(","):
            split = make_split(data.meta, seed=args.seed, **_kwargs(proto))
            r = run_holdout(data, split, config, db=db, out=out / "checkpoints")
            train = Store(db).get_run(r.run_id)["config"]["train"]
            load = train.get("loadavg") or [None, None]
            print(
                f"| {arch} | {width} | {train.get('parameters', '?'):,} | {split.protocol} | "
                f"{split.label} | {len(split.train)} | {config.epochs} | "
                f"{r.losses[0]:.2f} → {r.losses[-1]:.2f} | {_pct(r.seen_top1, r.n_seen)} "
                f"({r.n_seen}) | {_pct(r.held_top1, r.n_held)} ({r.n_held}) | "
                f"{train.get('train_seconds', float('nan')) / 60:.1f} "
                f"({train.get('train_cpu_seconds', float('nan')) / 60:.1f}) | "
                f"{load[0]}–{load[1]} |",
                flush=True,
            )
            preds = Store(db).predictions([r.run_id])
            correct[(arch, split.label)] = preds.set_index(["shift", "sample_id"])["correct"]
    # The direction of each of the paper's effects: paired bootstrap of the accuracy
    # difference on the same test images (both networks saw the same split).
    print()
    print("| comparison | protocol | test | difference (B − A), 95 % paired bootstrap |")
    print("|---|---|---|---|")
    names = [a for a, _ in archs]
    for a, b in PAIRS:
        if a not in names or b not in names:
            continue
        for proto in args.protocols.split(","):
            label = make_split(data.meta, seed=args.seed, **_kwargs(proto)).label
            ca, cb = correct[(a, label)], correct[(b, label)]
            for shift, name in ((HOLDOUT_SHIFT, "held-out"), (CLEAN_SHIFT, "in-dist.")):
                x = ca.loc[shift].sort_index().to_numpy(float)
                y = cb.loc[shift].reindex(ca.loc[shift].sort_index().index).to_numpy(float)
                d, lo, hi = paired_bootstrap(y - x, seed=args.seed)
                print(
                    f"| {a} → {b} | {label} | {name} | {100 * d:+.1f} points "
                    f"[{100 * lo:+.1f}, {100 * hi:+.1f}] |"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/surface-variation")
    ap.add_argument(
        "--archs",
        default="resnext:4,densenet:8,shake-resnext:4,msdnet:4",
        help="ARCH:WIDTH,... (robustlab holdout --arch / --width)",
    )
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--protocols", default="style=symbola")
    ap.add_argument("--jobs", type=int, default=2, help="architectures trained at once")
    ap.add_argument(
        "--device", default=None, help="where networks train (default: cuda when available)"
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    archs = [(a, int(w)) for a, w in (x.split(":") for x in args.archs.split(","))]
    if args.worker:
        arch, width = args.worker.split(":")
        train_one(args, arch, int(width))
        return

    out = Path(args.out)
    icons = out / "icons"
    if not (icons / "metadata.csv").is_file():
        from robustlab.data.emoji import build_icons

        t = time.perf_counter()
        res = build_icons(icons, size=32)
        print(
            f"built {sum(res.counts.values())} images {res.counts} in {res.classes} classes "
            f"({time.perf_counter() - t:.0f} s)",
            flush=True,
        )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    pending = list(archs)
    running: list[tuple[subprocess.Popen, str]] = []
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            arch, width = pending.pop(0)
            cmd = [sys.executable, __file__, *sys.argv[1:]]
            cmd += ["--worker", f"{arch}:{width}"]
            log = open(out / f"train-{arch}.log", "a")
            running.append((subprocess.Popen(cmd, env=env, stderr=log, stdout=log), arch))
        time.sleep(5)
        for p, arch in list(running):
            if p.poll() is not None:
                running.remove((p, arch))
                if p.returncode:
                    print(f"{arch}: worker failed ({p.returncode}); see train-{arch}.log")
    table(args, archs)


if __name__ == "__main__":
    main()
