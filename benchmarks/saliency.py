"""Speed of ``robustlab saliency``: lite0 Grad-CAM on the shared photos, on the CPU.

Builds a flat folder of the first ``--photos`` photos of ../shared/data/imagenet-samples
(hard links, the labels CSV) with an elliptic mask per photo (the rate does not depend on
what the mask holds: the metrics are a few array sums), then runs the whole stored run
(:func:`robustlab.saliency.saliency`: decode, prepare, model resize and crop, the top-1
forward pass, Grad-CAM's forward and backward pass, the metrics and the database writes)
on the clean images, and prints the wall time, images per second and the time a 500-photo
run would take at that rate. A second, bare timing runs only the Grad-CAM call of the
grad-cam library on ready input batches, so the line says which part the run spends on
the attribution itself.

Usage:
    python benchmarks/saliency.py                    # 100 photos, 1 worker, batch 16
    python benchmarks/saliency.py --photos 500 --workers 1 --threads 2
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"


def make_masked_flat(dst: Path, n: int, src: Path = SHARED) -> tuple[Path, Path]:
    """``dst/data`` (hard links of the first ``n`` photos + labels.csv) and ``dst/masks``
    (a centred ellipse covering about 24 % of each photo)."""
    from PIL import Image

    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    data, masks = dst / "data", dst / "masks"
    data.mkdir(parents=True)
    masks.mkdir(parents=True)
    for r in rows:
        os.link(src / r["file"], data / r["file"])
        w, h = Image.open(src / r["file"]).size
        yy, xx = np.mgrid[:h, :w]
        m = ((yy - h / 2) / (0.35 * h)) ** 2 + ((xx - w / 2) / (0.22 * w)) ** 2 <= 1
        Image.fromarray(m.astype(np.uint8) * 255).save(
            masks / (r["file"].rsplit(".", 1)[0] + ".png")
        )
    with open(data / "labels.csv", "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    return data, masks


def bare_gradcam(model, n_batches: int, batch: int) -> float:
    """Seconds per image of the library's Grad-CAM alone on random ready batches."""
    import torch
    from pytorch_grad_cam import GradCAM
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    net = model.module
    cam = GradCAM(model=net, target_layers=[net.bn2])
    x = torch.randn(batch, 3, *model.preprocessing.hw)
    targets = [ClassifierOutputTarget(i) for i in range(batch)]
    cam(input_tensor=x, targets=targets)  # warm-up
    t = time.perf_counter()
    for _ in range(n_batches):
        cam(input_tensor=x, targets=targets)
    cam.activations_and_grads.release()
    return (time.perf_counter() - t) / (n_batches * batch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=100)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"SKIP: no shared photos at {SHARED}")
        return 0
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from robustlab.models import load_model
    from robustlab.workflows.saliency import saliency

    model = load_model("lite0", device=args.device)
    with tempfile.TemporaryDirectory(prefix="robustlab-saliency-bench-") as tmp:
        data, masks = make_masked_flat(Path(tmp), args.photos)
        t = time.perf_counter()
        res = saliency(
            model,
            data,
            masks=masks,
            shifts=["clean"],
            db=Path(tmp) / "bench.duckdb",
            workers=args.workers,
            batch_size=args.batch_size,
            progress=True,
        )
        wall = time.perf_counter() - t
        n = len(res.rows)
    rate = n / wall
    load = os.getloadavg()[0]
    print(
        f"lite0 Grad-CAM run ({args.device}, {torch.get_num_threads()} torch threads, "
        f"{args.workers} worker(s), batch {args.batch_size}): {n} images in {wall:.1f} s = "
        f"{rate:.2f} img/s; 500 photos at this rate: {500 / rate / 60:.1f} min "
        f"(load average {load:.1f}, {os.cpu_count()} cores)"
    )
    per = bare_gradcam(model, max(1, min(4, args.photos // args.batch_size)), args.batch_size)
    print(
        f"grad-cam GradCAM alone on ready batches: {1 / per:.2f} img/s "
        f"({100 * per * rate:.0f} % of the run's time per image)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
