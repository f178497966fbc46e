"""Throughput of the bundled models: preprocessing (decode + transform) and forward passes.

    python benchmarks/models.py [--models lite0 lite1 lite2] [--batch 32] [--batches 4]
        [--precisions fp32,bf16,fp16] [--compile] [--photos DIR] [--repeats R]

Prints images/s for the transform of real photos from ../shared/data and for
``Model.predict`` on batches of them, on the device ``load_model`` picks (``--device``),
once per precision (autocast, :mod:`robustlab.models.inference`) with the ratio to the
first one. No thresholds: machines differ; compare numbers from the same machine only.
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import torch

from robustlab.data.images import load_image
from robustlab.models import load_model
from robustlab.models.inference import get_inference

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-samples"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["lite0"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--device", default=None)
    ap.add_argument("--precisions", default="fp32", help="comma list, e.g. fp32,bf16")
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward pass")
    ap.add_argument("--photos", type=Path, default=SAMPLES, help="labelled photos (labels.csv)")
    ap.add_argument("--repeats", type=int, default=1, help="passes over the batches, timed")
    args = ap.parse_args()
    rows = list(
        csv.DictReader((args.photos / "labels.csv").read_text(encoding="utf-8").splitlines())
    )
    n = args.batch * args.batches
    photos = [load_image(args.photos / r["file"])[0] for r in rows[:n]]
    # Every batch full: a ragged last batch is another shape, which a compiled model
    # recompiles for inside the timed loop (and cuDNN re-tunes for).
    photos = [photos[i % len(photos)] for i in range(n)]
    print(f"torch threads: {torch.get_num_threads()}  images: {len(photos)}  batch: {args.batch}")
    for spec in args.models:
        model = load_model(spec, device=args.device, batch_size=args.batch)
        t0 = time.perf_counter()
        xs = [model.transform(p) for p in photos]
        t1 = time.perf_counter()
        batches = [torch.stack(xs[i : i + args.batch]) for i in range(0, len(xs), args.batch)]
        print(f"{spec:8s} device {model.device}: transform {len(xs) / (t1 - t0):7.1f} img/s")
        precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
        first = None
        for precision in precisions:
            model.set_inference(get_inference(precision, args.compile))
            model.predict(batches[0])  # warm-up (and compile)
            t2 = time.perf_counter()
            for _ in range(args.repeats):
                for b in batches:
                    model.predict(b)
            if model.device.startswith("cuda"):
                torch.cuda.synchronize()
            rate = args.repeats * len(xs) / (time.perf_counter() - t2)
            first = first or rate
            print(
                f"{spec:8s} {precision}{' compiled' if args.compile else ''}: "
                f"predict {rate:7.1f} img/s (x{rate / first:.2f} of {precisions[0]})"
            )


if __name__ == "__main__":
    main()
