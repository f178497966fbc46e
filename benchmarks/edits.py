"""Speed of the ImageNet-E weights-free attribute edits (size, position, direction), one core.

Prints milliseconds per image (demo photos on ImageNet-E's 256x256 frame) for every level of ``obj_size``, ``obj_position`` and
``obj_direction``, the hole fill alone, and the total of all edits of one image against the
0.5 s target. The total is what ``generate`` pays per image: its cells run one after the
other in one process, so the first edit fills the hole and the others reuse the cached
fill; the fill cache is emptied before every image and every repeat. Times are process
CPU time (everything runs on one thread), so a busy shared machine inflates them less than
wall time would.

Photos: the six demo photos (real photos with checked-in masks; always available), plus,
when ../shared/data/imagenet-samples exists, real photos with composited objects (known
masks). Usage::

    python benchmarks/edits.py [--images 10] [--repeat 3]
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
TARGET_S = 0.5


def demo_images():
    from robustlab.data.sources import Sample
    from robustlab.workflows.demo import demo_photos
    from robustlab.pipeline import load_prepared
    from robustlab.suites import IMAGENET_E_PROTOCOL

    out = []
    for ph in demo_photos():
        p = load_prepared(
            Sample(ph.id, ph.source, ph.class_name, mask_path=ph.mask),
            IMAGENET_E_PROTOCOL,
            with_mask=True,
        )
        out.append((ph.id, p.rgb, p.mask > 0))
    return out


def sample_images(n: int):
    from robustlab.masks.synthetic import composite

    files = sorted(SAMPLES.glob("*.JPEG"))[: 2 * n]
    if len(files) < 2 * n:
        return []
    rng = np.random.default_rng(0)
    photos = [np.asarray(Image.open(f).convert("RGB")) for f in files]
    return [(files[i].name, *composite(photos[i], photos[i + n], rng)) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--images", type=int, default=10, help="composited sample photos (besides the demo)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--fill", default=None, help="hole-fill backend (default: the configured one, patch)"
    )
    args = ap.parse_args()

    cv2.setNumThreads(1)
    from robustlab.seeding import make_rng
    from robustlab.shifts import get_shift
    from robustlab.shifts.attributes import EDITS
    from robustlab.shifts.attributes import fill as fillmod

    backend = fillmod.backend_name(args.fill)
    ctx = {"hole_fill": backend}
    images = demo_images() + sample_images(args.images)
    # compile the exemplar fill's numba kernels (or load them from numba's cache) untimed
    fillmod.fill_background(images[0][1], images[0][2], make_rng(0), ctx)
    cells = [(name, lv) for name in EDITS for lv in get_shift(name).levels]
    per_cell = {c: [] for c in cells}
    totals, fills, skips = [], [], 0
    for _, img, mask in images:
        best_total, best_cells = None, None
        for _ in range(args.repeat):
            fillmod._cache.clear()
            times = {}
            t_all = time.process_time()
            for name, lv in cells:
                t0 = time.process_time()
                try:
                    get_shift(name).apply(img, lv, make_rng(0), {"mask": mask, **ctx})
                except ValueError:
                    pass  # e.g. an object touching every border cannot move: still timed
                times[(name, lv)] = time.process_time() - t0
            total = time.process_time() - t_all
            if best_total is None or total < best_total:
                best_total, best_cells = total, times
        totals.append(best_total)
        for c, t in best_cells.items():
            per_cell[c].append(t)
        fillmod._cache.clear()
        t0 = time.process_time()
        fillmod.fill_background(img, mask, make_rng(0), ctx)
        fills.append(time.process_time() - t0)
        for name, lv in cells:  # count skips once per image
            try:
                get_shift(name).apply(img, lv, make_rng(0), {"mask": mask, **ctx})
            except ValueError:
                skips += 1

    print(
        f"{len(images)} images (6 demo photos at 256x256, {len(images) - 6} composited samples), "
        f"best of {args.repeat}, 1 thread, process CPU time, "
        f"{fillmod.describe_hole_fill(backend)['backend']} fill"
    )
    print(f"{'edit':<24}{'median ms':>10}{'max ms':>10}")
    for (name, lv), ts in per_cell.items():
        print(f"{name + ':' + lv:<24}{np.median(ts) * 1e3:>10.1f}{max(ts) * 1e3:>10.1f}")
    print(f"{'hole fill alone':<24}{np.median(fills) * 1e3:>10.1f}{max(fills) * 1e3:>10.1f}")
    med, worst = float(np.median(totals)), float(max(totals))
    print(
        f"{'ALL edits / image':<24}{med * 1e3:>10.1f}{worst * 1e3:>10.1f}   target "
        f"{TARGET_S * 1e3:.0f} ms: {'PASS' if worst <= TARGET_S else 'FAIL'} "
        f"(worst image {worst / TARGET_S:.2f} of target)"
    )
    print(f"({skips} of {len(images) * len(cells)} cells were skips with a reason, timed anyway)")


if __name__ == "__main__":
    main()
