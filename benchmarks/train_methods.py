"""The ImageNet-C paper's training-time methods on a tiny offline set (issue 14).

Fine-tunes the bundled lite0 (EfficientNet-Lite0) with each method on a few hundred of the
shared photos and scores every model, and the un-fine-tuned one, by ImageNet-C mCE on other,
held-out photos (mCE relative to the un-fine-tuned model: its mCE is 1). Everything goes
through :func:`robustlab.workflows.train.methods.run_method`, so each model is a stored run with its
training record, as ``robustlab train --method`` stores it.

The shared set has one photo per class, so the split is by photo (seeded), not stratified:
train and test photos are of different classes. Such a run is far too small to reproduce
the paper's effect sizes (ResNet-50, all of ImageNet, 5 epochs: CLAHE fine-tuning 76.7 ->
74.5 mCE; no stability-training setting beat the baseline); it shows the direction on this
data and that the machinery runs end to end.

Usage:
    python benchmarks/train_methods.py                    # the run in benchmarks/README.md
    python benchmarks/train_methods.py --train 40 --test 10 --steps 5 --levels 3   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"


def photo_split(data: Path, n_train: int, n_test: int, seed: int):
    """Disjoint, seeded train/test photo sets (one photo per class: no stratification)."""
    import numpy as np

    from robustlab.data.sources import discover
    from robustlab.records.identity import data_fingerprint
    from robustlab.workflows.train import Split

    ids = sorted(s.id for s in discover(data))
    if n_train + n_test > len(ids):
        sys.exit(f"only {len(ids)} photos in {data}")
    order = np.random.default_rng(seed).permutation(len(ids))
    train = sorted(ids[i] for i in order[:n_train])
    test = sorted(ids[i] for i in order[n_train : n_train + n_test])
    fp = data_fingerprint([("train", i) for i in train] + [("test", i) for i in test])
    return Split(tuple(train), tuple(test), n_test / (n_train + n_test), seed, fp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=SHARED)
    ap.add_argument("--train", type=int, default=200, help="training photos")
    ap.add_argument("--test", type=int, default=50, help="test photos")
    ap.add_argument(
        "--steps", type=int, default=63, help="optimiser steps (63 x 16 = 5 epochs of 200)"
    )
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--mode", default="linear", choices=["linear", "full"])
    ap.add_argument("--levels", default="1,3,5", help="severities scored (comma list)")
    ap.add_argument(
        "--stability", default="0.05:0.05,0.1:0.1", help="noise:weight pairs of stability training"
    )
    ap.add_argument("--holdout", default="blur", help="families held out of corruption-aug")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    ap.add_argument(
        "--work", type=Path, default=None, help="checkpoints and database (default: a temp dir)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the tables here")
    args = ap.parse_args()
    if not args.data.is_dir():
        print(f"needs the shared photos at {args.data}")
        return 0
    import torch

    torch.set_num_threads(args.threads)
    from robustlab.workflows.train import TrainConfig
    from robustlab.workflows.train.augment import CorruptionAugmentation
    from robustlab.workflows.train.methods import run_method
    from robustlab.workflows.train.stability import StabilityTraining

    work = args.work or Path(tempfile.mkdtemp(prefix="train_methods_"))
    levels = [int(v) for v in args.levels.split(",")]
    methods = [None]
    for pair in filter(None, args.stability.split(",")):
        noise, weight = (float(v) for v in pair.split(":"))
        methods.append(StabilityTraining(noise, weight))
    methods.append(CorruptionAugmentation(tuple(filter(None, args.holdout.split(","))), 0.5))
    split = photo_split(args.data, args.train, args.test, seed=0)
    config = TrainConfig(
        mode=args.mode, steps=args.steps, batch_size=args.batch, lr=args.lr, seed=0
    )
    from robustlab.suites import get_suite

    every = list(get_suite("imagenet-c").shifts)
    started = time.perf_counter()
    res = run_method(
        "lite0",
        args.data,
        methods,
        config=config,
        suite="imagenet-c",
        shifts=every,
        levels=levels,
        out=work / "ckpt",
        db=work / "methods.duckdb",
        device="cpu",
        seed=0,
        split=split,
    )
    seconds = time.perf_counter() - started
    import pandas as pd

    pd.set_option("display.width", 160)
    ce = res.ce.pivot_table(index="shift", columns="method", values="ce", sort=False)
    print(
        f"lite0, {args.mode} fine-tune, {args.steps} steps x {args.batch}, lr {args.lr}; "
        f"{len(split.train)} train / {len(split.test)} test photos; severities {levels}; "
        f"{seconds:.0f} s on {args.threads} thread(s); work dir {work}"
    )
    print(
        res.summary.drop(columns=["checkpoint", "run_id"]).to_string(
            index=False, float_format="%.3f"
        )
    )
    print(ce.to_string(float_format="%.3f"))
    for label, tr in res.trainings.items():
        print(
            f"{label}: loss {tr.losses[0]:.3f} -> {tr.losses[-1]:.3f}, drawn "
            f"{tr.record.get('method', {}).get('drawn')}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "summary": res.summary.to_dict("records"),
                    "ce": res.ce.to_dict("records"),
                    "seconds": seconds,
                },
                default=str,
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    raise SystemExit(main())
