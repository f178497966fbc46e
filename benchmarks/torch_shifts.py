"""Fidelity and CPU speed of the batched torch corruptions against the exact path.

For every corruption x severity, on real photos prepared with the ImageNet-C protocol
(bilinear shorter side 256, centre crop 224), both paths make the pixels a model sees on
the fly (shift, then the protocol's JPEG round trip at quality 85):

* exact: ``pipeline.apply_shift`` + ``pipeline.as_stored`` image by image (numpy, the
  reference's bytes);
* torch: ``robustlab.shifts.batched.apply`` on the batch + ``jpeg_roundtrip``.

It prints, per cell, lite0's top-1 error on each (and the difference, the fidelity
contract being |difference| <= 1.5 points on the 500 shared photos), the mean absolute
pixel difference between the two paths' images, and the shift time of each path
(exact: one image at a time, as a worker does; torch: the whole batch) as a ratio.
Photos are processed in chunks and the cumulative table is printed after each chunk,
so a run stopped early still reports on the photos done.

Usage:
    python benchmarks/torch_shifts.py --n 500 [--chunk 50] [--corruptions common|all|a,b]
        [--device cpu|cuda] [--jpeg device|cpu] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "imagenet-samples"


def photos(root: Path, n: int, masks: Path | None = None):
    """``n`` labelled samples spread evenly over the sorted folder (with their masks from
    ``masks``, for torch_scenes.py)."""
    from robustlab.data.sources import discover

    samples = discover(root, labels_csv=root / "labels.csv", masks=masks)
    step = max(1, len(samples) // max(1, n))
    return list(samples)[::step][:n]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=Path, default=DATA)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=50, help="photos per batch and per table")
    ap.add_argument("--corruptions", default="common")
    ap.add_argument("--levels", default="1,2,3,4,5")
    ap.add_argument("--device", default="cpu", help="where the torch shifts and lite0 run")
    ap.add_argument("--jpeg", default="device", choices=("device", "cpu"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from robustlab.data.labels import get_label_space
    from robustlab.models import load_model
    from robustlab.pipeline import apply_shift, as_stored, load_prepared
    from robustlab.shifts.batched import apply, codec_name, jpeg_roundtrip
    from robustlab.shifts.corruptions import list_corruptions
    from robustlab.suites import IMAGENET_C_PROTOCOL as protocol

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.photos.is_dir():
        print(f"SKIP: no photos at {args.photos}")
        return 0
    names = (
        args.corruptions.split(",")
        if "," in args.corruptions or args.corruptions not in ("common", "all", "extra")
        else list_corruptions(args.corruptions)
    )
    levels = [int(v) for v in args.levels.split(",")]
    samples = photos(args.photos, args.n)
    space = get_label_space("imagenet1k")
    model = load_model("lite0", device=args.device, batch_size=args.chunk)
    dev = torch.device(args.device)
    print(
        f"# {len(samples)} photos, {len(names)} corruptions x {levels}, device {dev}, "
        f"JPEG {codec_name(dev, args.jpeg)}, torch threads {torch.get_num_threads()}",
        flush=True,
    )

    def top1(batch: torch.Tensor, labels: torch.Tensor) -> int:
        _, ids = model.predict_topk(batch, 1)
        return int((ids[:, 0] == labels).sum())

    cells = [(c, lv) for c in names for lv in levels]
    acc = {
        cell: {"exact": 0, "torch": 0, "n": 0, "mad": 0.0, "t_exact": 0.0, "t_torch": 0.0}
        for cell in cells
    }
    clean_ok = 0
    done = 0
    for start in range(0, len(samples), args.chunk):
        chunk = samples[start : start + args.chunk]
        prepared = [load_prepared(s, protocol).rgb for s in chunk]
        ids = [s.id for s in chunk]
        labels = torch.as_tensor([space.index_of(s.class_name) for s in chunk])
        x = torch.from_numpy(np.stack(prepared)).permute(0, 3, 1, 2).contiguous().to(dev)
        clean_ok += top1(x, labels)
        for name, lv in cells:
            t0 = time.process_time()
            ex = np.stack(
                [
                    as_stored(apply_shift(img, sid, name, lv, 0), protocol)
                    for img, sid in zip(prepared, ids)
                ]
            )
            t1 = time.process_time()
            out = apply(name, lv, x, ids, seed=0)
            out = jpeg_roundtrip(out, protocol.jpeg_quality, args.jpeg)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.process_time()
            ex_t = torch.from_numpy(ex).permute(0, 3, 1, 2).contiguous().to(dev)
            a = acc[(name, lv)]
            a["exact"] += top1(ex_t, labels)
            a["torch"] += top1(out, labels)
            a["n"] += len(chunk)
            a["mad"] += float((out.int() - ex_t.int()).abs().float().mean()) * len(chunk)
            a["t_exact"] += t1 - t0
            a["t_torch"] += t2 - t1
        done += len(chunk)
        rows = report(acc, clean_ok, done)
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "photos": done,
                        "device": str(dev),
                        "clean_error": 100 - 100 * clean_ok / done,
                        "rows": rows,
                    },
                    indent=1,
                )
            )
    worst = max(abs(r["diff"]) for r in rows)
    print(
        f"# worst |error difference| {worst:.2f} points over {done} photos "
        f"({'PASS' if worst <= 1.5 else 'FAIL'} against 1.5)",
        flush=True,
    )
    return 0


def report(acc: dict, clean_ok: int, done: int) -> list[dict]:
    """Print the cumulative table; returns its rows."""
    rows = []
    print(f"\n## {done} photos; clean error {100 - 100 * clean_ok / done:.2f} %", flush=True)
    print(
        "| corruption | level | error exact % | error torch % | diff | mean abs px diff "
        "| exact s/img | torch s/img | speed-up |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (name, lv), a in acc.items():
        n = a["n"]
        if not n:
            continue
        e_ex = 100 - 100 * a["exact"] / n
        e_to = 100 - 100 * a["torch"] / n
        row = {
            "corruption": name,
            "level": lv,
            "n": n,
            "error_exact": e_ex,
            "error_torch": e_to,
            "diff": e_to - e_ex,
            "mad": a["mad"] / n,
            "exact_s": a["t_exact"] / n,
            "torch_s": a["t_torch"] / n,
        }
        rows.append(row)
        speed = row["exact_s"] / row["torch_s"] if row["torch_s"] else float("nan")
        print(
            f"| {name} | {lv} | {e_ex:.1f} | {e_to:.1f} | {e_to - e_ex:+.1f} | "
            f"{row['mad']:.2f} | {row['exact_s'] * 1e3:.1f} ms | {row['torch_s'] * 1e3:.1f} ms "
            f"| x{speed:.2f} |"
        )
    total_ex = sum(a["t_exact"] for a in acc.values())
    total_to = sum(a["t_torch"] for a in acc.values())
    print(
        f"# all cells: exact {total_ex:.1f} s, torch {total_to:.1f} s CPU time "
        f"(batched / exact throughput ratio x{total_ex / max(total_to, 1e-9):.2f})",
        flush=True,
    )
    sys.stdout.flush()
    return rows


if __name__ == "__main__":
    sys.exit(main())
