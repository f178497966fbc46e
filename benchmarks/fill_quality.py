"""Is the ImageNet-E hole fill a cue? The exemplar fill (``patch``) against OpenCV's Telea.

For each photo the object's (dilated) region is filled by each backend, with nothing pasted
back: the *filled background alone*, the picture an edit's object sits on. Two numbers:

- ``texture distance``: the 1-D Wasserstein distance between the gradient magnitudes
  (Sobel, grey levels) of the filled pixels and of the real background in a 16-pixel ring
  around the hole. A fill whose texture matches its surroundings scores near 0; smooth
  streaks (few, weak gradients) score high. Reported as the median over photos.
- ``lite0 on the fill``: on the six demo photos (real objects, hand-checked masks) lite0's
  top-1 for the object's class and its mean softmax probability for it, on the filled
  background alone: an object-shaped fill that still reads as the object is a cue. On the
  composites (a blob of one ImageNet photo pasted on another, so the true background is
  known) the share of fills on which lite0's top-1 equals its top-1 on the true background.

Photos: the six demo photos on ImageNet-E's 256x256 frame, plus ``--images`` composites from
../shared/data/imagenet-samples (or the test fixtures' photos when that is absent). With
``--grid PATH`` it also writes the picture in docs/ (photo, Telea, exemplar; four photos).
Usage::

    python benchmarks/fill_quality.py [--images 40] [--grid docs/fill-comparison.png]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402
from scipy.stats import wasserstein_distance  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from edits import demo_images  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_DIRS = [
    ROOT.parent / "shared" / "data" / "imagenet-samples",
    ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples",
]
BACKENDS = ("telea", "patch")
GRID_PHOTOS = (
    "cat/chelsea.png",
    "espresso/coffee.png",
    "motorcycle/motorcycle_left.png",
    "military_uniform/grace_hopper.jpg",
)
RING = 16
TILE = 192


def composites(n: int):
    """``n`` (name, composite, mask, true background) at 256x256, seeded."""
    from robustlab.masks.synthetic import random_blob

    folder = next((d for d in SAMPLE_DIRS if d.is_dir()), None)
    if folder is None or n == 0:
        return []
    files = sorted(folder.glob("*.JPEG"))[: 2 * n]
    n = len(files) // 2
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        fg, bg = (
            cv2.resize(
                np.asarray(Image.open(f).convert("RGB")), (256, 256), interpolation=cv2.INTER_AREA
            )
            for f in (files[i], files[i + n])
        )
        m = random_blob(256, 256, rng)
        x = bg.copy()
        x[m] = fg[m]
        out.append((files[i].name, x, m, bg))
    return out


def gradient_distance(img: np.ndarray, hole: np.ndarray) -> float:
    """Wasserstein distance of the Sobel gradient magnitudes: hole vs the ring around it."""
    g = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32)
    mag = np.hypot(cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1))
    ring = cv2.dilate(hole.astype(np.uint8), np.ones((2 * RING + 1,) * 2, np.uint8)) > 0
    ring &= ~hole
    # the hole's own rim touches the background: its gradients are the seam, keep them
    return float(wasserstein_distance(mag[hole], mag[ring]))


def _block_features(img: np.ndarray, region: np.ndarray) -> np.ndarray:
    """Per 8x8 block lying mostly (>= 3/4) in ``region``: grey-level std, mean gradient
    magnitude, and structure-tensor coherence (1: all gradients share one orientation, as
    in a streak; 0: no dominant orientation)."""
    g = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32)
    gx, gy = cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1)
    feats = []
    h, w = g.shape
    for y in range(0, h - 7, 8):
        for x in range(0, w - 7, 8):
            if region[y : y + 8, x : x + 8].mean() < 0.75:
                continue
            bx, by = gx[y : y + 8, x : x + 8], gy[y : y + 8, x : x + 8]
            jxx, jyy, jxy = (bx * bx).sum(), (by * by).sum(), (bx * by).sum()
            coh = np.sqrt((jxx - jyy) ** 2 + 4 * jxy**2) / (jxx + jyy + 1e-6)
            feats.append((g[y : y + 8, x : x + 8].std(), np.hypot(bx, by).mean(), coh))
    return np.asarray(feats, np.float64).reshape(-1, 3)


def patch_distance(img: np.ndarray, hole: np.ndarray) -> float:
    """Sum over the three block features of the 1-D Wasserstein distance between the
    hole's blocks and the ring's, each feature in units of the ring's standard deviation."""
    ring = cv2.dilate(hole.astype(np.uint8), np.ones((2 * RING + 1,) * 2, np.uint8)) > 0
    a, b = _block_features(img, hole), _block_features(img, ring & ~hole)
    if len(a) == 0 or len(b) < 2:
        return float("nan")
    scale = b.std(0) + 1e-6
    return float(sum(wasserstein_distance(a[:, k], b[:, k]) / scale[k] for k in range(3)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=40, help="composites besides the demo photos")
    ap.add_argument("--grid", type=Path, default=None, help="write the comparison picture here")
    args = ap.parse_args()
    cv2.setNumThreads(1)

    import torch

    from robustlab.data.labels import get_label_space
    from robustlab.models import load_model
    from robustlab.seeding import make_rng
    from robustlab.shifts.attributes import fill as fillmod

    model = load_model("lite0")

    def probs(imgs):
        with torch.inference_mode():
            b = torch.stack([model.transform(x) for x in imgs])
            return torch.softmax(model.predict(b), 1).numpy()

    demo_space = get_label_space("demo")
    demo = demo_images()
    comp = composites(args.images)
    fills = {}
    for b in BACKENDS:
        for name, x, m, *_ in [(*d, None) for d in demo] + comp:
            hole = fillmod.hole_mask(m, fillmod.SETTINGS[b]["dilate"])
            fills[b, name] = (fillmod.fill_background(x, m, make_rng(0), {"hole_fill": b})[0], hole)
    print(f"{len(demo)} demo photos, {len(comp)} composites, 256x256")
    truth = [list(demo_space.imagenet_ids[demo_space.index_of(n.split("/")[0])]) for n, *_ in demo]
    p_orig = probs([x for _, x, _ in demo])
    bg_top = probs([bg for *_, bg in comp]).argmax(1) if comp else np.zeros(0)
    print(
        f"{'':28}{'grad dist':>10}{'patch dist':>11}{'lite0 top-1':>13}{'p(class)':>10}{'bg kept':>9}"
    )
    top1 = np.mean([p_orig[i].argmax() in t for i, t in enumerate(truth)])
    pcls = np.mean([p_orig[i][t].sum() for i, t in enumerate(truth)])
    print(f"{'demo photos (object kept)':<28}{'':>21}{top1:>13.2f}{pcls:>10.3f}")
    for b in BACKENDS:
        td = [gradient_distance(*fills[b, n]) for n, *_ in demo]
        tc = [gradient_distance(*fills[b, n]) for n, *_ in comp]
        pd = [patch_distance(*fills[b, n]) for n, *_ in demo]
        pc = [patch_distance(*fills[b, n]) for n, *_ in comp]
        p = probs([fills[b, n][0] for n, *_ in demo])
        top1 = np.mean([p[i].argmax() in t for i, t in enumerate(truth)])
        pcls = np.mean([p[i][t].sum() for i, t in enumerate(truth)])
        kept = (
            np.mean(probs([fills[b, n][0] for n, *_ in comp]).argmax(1) == bg_top)
            if comp
            else float("nan")
        )
        label = fillmod.describe_hole_fill(b)["backend"]
        print(
            f"{label + ' demo':<28}{np.median(td):>10.1f}{np.nanmedian(pd):>11.2f}{top1:>13.2f}{pcls:>10.3f}"
        )
        if comp:
            print(
                f"{label + ' composites':<28}{np.median(tc):>10.1f}{np.nanmedian(pc):>11.2f}{'':>13}{'':>10}{kept:>9.2f}"
            )
    if args.grid:
        rows = []
        for name, x, _ in demo:
            if name in GRID_PHOTOS:
                tiles = [x] + [fills[b, name][0] for b in BACKENDS]
                rows.append(
                    np.concatenate(
                        [cv2.resize(t, (TILE, TILE), interpolation=cv2.INTER_AREA) for t in tiles],
                        1,
                    )
                )
        im = Image.fromarray(np.concatenate(rows, 0))
        im.quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(
            args.grid, optimize=True
        )
        print(f"wrote {args.grid} (columns: photo, opencv-telea, patchmatch)")


if __name__ == "__main__":
    main()
