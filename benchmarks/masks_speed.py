"""Rate of ``robustlab masks`` without boxes (CAM-seeded GrabCut) against an older checkout.

Issue 35 item 5: automatic masks at ImageNet sizes at 2 photos per second or more on 2
cores, the masks equal to the older code's or IoU >= 0.99 on real photos.

Both versions mask the same photos of ../shared/data/imagenet-samples (original ImageNet
sizes: median 500x375, largest 1836x1377) with ``build_masks`` and ``AutoMasker("grabcut")``
(what ``robustlab masks --data DIR --out DIR`` runs: no box, so every photo is seeded by a
lite0 CAM), each in a fresh interpreter with its own ``src`` on ``PYTHONPATH``. The photos
go in chunks, old and new alternating chunk by chunk, so both see the same machine load.
Interpreter start and the model load are timed apart (a fixed cost, about 5-10 s) and
left out of the rate: the rate is what 50,000 photos would see. CPU seconds are those of
the whole process (every thread). At the end every new mask is compared with the old one
(IoU; a photo whose mask neither version wrote, empty or full, counts as equal).

The older code is a ``git archive`` of ``--baseline`` (default: the commit before the
change) unpacked into a temp folder, or ``--baseline-src DIR``.

Usage:
    python benchmarks/masks_speed.py                        # 500 photos, chunks of 100
    python benchmarks/masks_speed.py --photos 100 --chunk 50
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"
#: The commit before issue 35 item 5 changed the masker (serial, torch's own threads).
BASELINE = "277cf09"

DRIVER = r"""
import json, sys, time
t_start = time.perf_counter()
from robustlab.data.sources import discover
from robustlab.masks.auto import AutoMasker
from robustlab.masks.build import build_masks
data, out, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
samples = list(discover(data))[lo:hi]
masker = AutoMasker("grabcut")
masker.model  # the lite0 load: a fixed cost, timed apart
t0, c0 = time.perf_counter(), time.process_time()
summary = build_masks(samples, out, masker)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({"n": len(samples), "wall": wall, "cpu": cpu, "setup": t0 - t_start,
                  "written": summary["n_written"], "skipped": summary["n_skipped"]}))
"""


def export_src(rev: str, dst: Path) -> Path:
    """``src`` of commit ``rev`` unpacked under ``dst`` (git archive)."""
    tar = dst / "src.tar"
    with open(tar, "wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], stdout=fh, check=True)
    with tarfile.open(tar) as tf:
        tf.extractall(dst, filter="data")
    return dst / "src"


def run_chunk(src: Path, data: Path, out: Path, lo: int, hi: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(data), str(out), str(lo), str(hi)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode:
        sys.exit(f"masking failed with {src}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(data: Path, old: Path, new: Path) -> list[tuple[str, float, bool]]:
    """(id, IoU, bit-equal) of every photo's new mask against its old one."""
    from robustlab.data.sources import discover
    from robustlab.masks.io import load_mask, mask_name
    from robustlab.masks.quality import iou

    out = []
    for s in discover(data):
        a, b = old / mask_name(s.id), new / mask_name(s.id)
        if not a.exists() and not b.exists():
            out.append((s.id, 1.0, True))
            continue
        if not (a.exists() and b.exists()):
            out.append((s.id, 0.0, False))
            continue
        ma, mb = load_mask(a), load_mask(b)
        out.append((s.id, float(iou(ma, mb)), bool(np.array_equal(ma, mb))))
    return out


def _data_folder(dst: Path, n: int) -> Path:
    """A flat folder of the first ``n`` shared photos (hard links) and their labels."""
    import csv

    with open(SHARED / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    dst.mkdir(parents=True)
    for r in rows:
        os.link(SHARED / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=100)
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the older code")
    ap.add_argument("--baseline-src", type=Path, default=None, help="or its src folder")
    args = ap.parse_args()
    if not SHARED.exists():
        sys.exit(f"shared photos not found at {SHARED}")
    tmp = Path(tempfile.mkdtemp(prefix="rl-bench-masks-"))
    old_src = args.baseline_src or export_src(args.baseline, tmp)
    new_src = ROOT / "src"
    data = _data_folder(tmp / "data", args.photos)
    print(
        f"# {args.photos} photos, chunks of {args.chunk}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}; old = {old_src}"
    )
    totals = {"old": [0, 0.0, 0.0, 0.0], "new": [0, 0.0, 0.0, 0.0]}
    for lo in range(0, args.photos, args.chunk):
        hi = min(args.photos, lo + args.chunk)
        for name, src in (("old", old_src), ("new", new_src)):
            r = run_chunk(src, data, tmp / f"masks-{name}", lo, hi)
            t = totals[name]
            t[0] += r["n"]
            t[1] += r["wall"]
            t[2] += r["cpu"]
            t[3] += r["setup"]
            print(
                f"{name} photos {lo:4d}-{hi:4d}: {r['wall']:7.1f} s, {r['n'] / r['wall']:5.2f} "
                f"photos/s, {r['cpu'] / r['n']:.3f} CPU s/photo (start + model load "
                f"{r['setup']:.1f} s), load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    rate = {k: v[0] / v[1] for k, v in totals.items()}
    for k, (n, wall, cpu, setup) in totals.items():
        starts = setup / ((n - 1) // args.chunk + 1)
        print(
            f"{k}: {n} photos in {wall:.1f} s = {rate[k]:.2f} photos/s, {cpu / n:.3f} CPU s "
            f"per photo; interpreter start + model load {starts:.1f} s per chunk"
        )
    n, _, cpu, _ = totals["new"]
    print(
        f"new with all {os.cpu_count()} cores to itself (CPU-bound: cores / CPU s per photo): "
        f"{os.cpu_count() * n / cpu:.2f} photos/s"
    )
    print(f"rate new / old = {rate['new'] / rate['old']:.2f}x (target: new >= 2 photos/s)")
    agree = agreement(data, tmp / "masks-old", tmp / "masks-new")
    ious = np.array([a[1] for a in agree])
    equal = sum(a[2] for a in agree)
    print(
        f"masks: {equal} of {len(agree)} bit-equal; IoU min {ious.min():.4f}, 1st percentile "
        f"{np.percentile(ious, 1):.4f}, median {np.median(ious):.4f}, mean {ious.mean():.4f}; "
        f"{int((ious < 0.99).sum())} below 0.99"
    )
    for sid, v, _ in sorted(agree, key=lambda a: a[1])[:5]:
        if v < 1.0:
            print(f"  lowest: {sid} IoU {v:.4f}")
    print(f"# outputs in {tmp}")


if __name__ == "__main__":
    main()
