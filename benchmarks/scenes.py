"""Speed of the background scenarios and of the automatic masker, on one CPU core.

Prints seconds per 224x224 image for every non-diffusion scenario (XIMAGENET-12 and
ImageNet-9), their sum per image against the 0.46 s target, the automatic masker per
image (GrabCut from a box; GrabCut from a lite0 CAM when ``robustlab.models`` has
``load_model``) against the 0.5 s target, and ImageNet-C corruptions at severity 3 as a
yardstick. Real photos from ../shared/data/imagenet-samples with composited objects
(so the masks are known). Usage::

    python benchmarks/scenes.py [--images 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-samples"
SCENE_TARGET_S = 0.46
MASK_TARGET_S = 0.5


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--samples", default=str(SAMPLES))
    args = ap.parse_args()

    cv2.setNumThreads(1)
    import torch

    torch.set_num_threads(1)
    from robustlab.masks import AutoMasker, grabcut_mask, iou
    from robustlab.masks.synthetic import composite
    from robustlab.seeding import make_rng
    from robustlab.shifts import get_shift, list_shifts
    from robustlab.shifts.scenes import IMAGENET9, XIMAGENET12

    files = sorted(Path(args.samples).glob("*.JPEG"))
    if len(files) < 2 * args.images:
        raise SystemExit(f"need {2 * args.images} photos under {args.samples}")
    rng = np.random.default_rng(0)
    photos = [np.asarray(Image.open(f).convert("RGB")) for f in files[: 2 * args.images]]
    data = [composite(photos[i], photos[i + args.images], rng) for i in range(args.images)]

    print(f"{args.images} images of 224x224, best of {args.repeat}, 1 thread")
    print(f"{'scenario':<24}{'ms/image':>10}")
    total = 0.0
    for name in XIMAGENET12 + IMAGENET9:
        shift = get_shift(name)
        for level in shift.levels:

            def run(shift=shift, level=level):
                for k, (img, m) in enumerate(data):
                    d_img, d_m = data[(k + 1) % len(data)]
                    ctx = {"mask": m, "background": d_img, "background_mask": d_m}
                    shift.apply(img, level, make_rng(k), ctx)

            per = _best(run, args.repeat) / len(data)
            total += per
            print(f"{name + ':' + str(level):<24}{per * 1e3:>10.2f}")
    print(
        f"{'ALL scenarios / image':<24}{total * 1e3:>10.2f}   target {SCENE_TARGET_S * 1e3:.0f} ms  "
        f"({total / SCENE_TARGET_S:.2f} of target)"
    )

    print("\nImageNet-C yardstick (severity 3)")
    for s in list_shifts(tag="imagenet-c") + list_shifts(tag="imagenet-c-extra"):

        def run(s=s):
            for k, (img, _) in enumerate(data):
                s.apply(img, 3, make_rng(k), {})

        print(f"{s.name:<24}{_best(run, args.repeat) / len(data) * 1e3:>10.2f}")

    print("\nautomatic masks")
    boxes = []
    for _, m in data:
        ys, xs = np.nonzero(m)
        boxes.append((xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
    t0 = time.perf_counter()
    preds = [grabcut_mask(img, bbox=b) for (img, _), b in zip(data, boxes)]
    per = (time.perf_counter() - t0) / len(data)
    score = np.mean([iou(p, m) for p, (_, m) in zip(preds, data)])
    print(
        f"{'grabcut (bbox)':<24}{per * 1e3:>10.2f}   mean IoU {score:.3f}   target {MASK_TARGET_S * 1e3:.0f} ms "
        f"({per / MASK_TARGET_S:.2f} of target)"
    )
    try:
        from robustlab.models import load_model
    except ImportError:
        print(f"{'cam-grabcut':<24}   skipped: robustlab.models.load_model is not available yet")
        return
    masker = AutoMasker("cam-grabcut", model=load_model("lite0"))
    masker(data[0][0])  # warm-up: first call builds the model's kernels
    t0 = time.perf_counter()
    preds = [masker(img)[0] for img, _ in data]
    per = (time.perf_counter() - t0) / len(data)
    score = np.mean([iou(p, m) for p, (_, m) in zip(preds, data)])
    print(
        f"{'cam-grabcut (lite0)':<24}{per * 1e3:>10.2f}   mean IoU {score:.3f}   target {MASK_TARGET_S * 1e3:.0f} ms "
        f"({per / MASK_TARGET_S:.2f} of target)"
    )


if __name__ == "__main__":
    main()
