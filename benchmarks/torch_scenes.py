"""Fidelity and speed of the batched XIMAGENET-12 / ImageNet-9 scenes against the exact path.

The sibling of benchmarks/torch_shifts.py for the mask scenes (``--shift-device``). On the
shared photos, prepared as the scene suites do (shorter side 256, centre crop 224, PNG: no
JPEG round trip), with the foreground masks of the project's own automatic masker
(``robustlab masks``: GrabCut from a lite0 CAM; the shared data has no masks, so they are
made once into ``--masks`` and reused), both paths make every batched scene's pixels:

* exact: ``pipeline.apply_shift`` image by image (OpenCV);
* torch: ``robustlab.shifts.batched.apply`` on the chunk with its masks and boxes.

Per scene it prints lite0's top-1 error on each path, their difference, the mean and max
absolute pixel difference between the two paths' images, and each path's shift time per
image. Photos whose mask is unusable (empty or full) are skipped on both paths, as a run
does. Photos are processed in chunks; the cumulative table is printed after each chunk.

Usage:
    python benchmarks/torch_scenes.py --n 500 [--chunk 50] [--masks DIR] [--device cpu|cuda]
        [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from torch_shifts import photos  # the same photo pick as the corruption table (sibling script)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "imagenet-samples"
MASKS = Path(tempfile.gettempdir()) / "robustlab-bench-masks"


def ensure_masks(samples, out: Path) -> None:
    """Make the missing masks with the project's automatic masker (cached in ``out``)."""
    from robustlab.masks import AutoMasker
    from robustlab.masks.build import build_masks

    t0 = time.perf_counter()
    summary = build_masks(
        samples,
        out,
        AutoMasker("cam-grabcut"),
        progress=lambda done, total: print(f"# masks {done}/{total}", end="\r", flush=True),
    )
    print(
        f"\n# masks in {out}: {time.perf_counter() - t0:.0f} s "
        f"({summary.get('n_written', '?')} written)",
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=Path, default=DATA)
    ap.add_argument("--masks", type=Path, default=MASKS, help="masks folder (made if missing)")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=50, help="photos per batch and per table")
    ap.add_argument("--scenes", default="all", help="comma-separated names (default: all)")
    ap.add_argument("--device", default="cpu", help="where the torch scenes and lite0 run")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from robustlab.data.labels import get_label_space
    from robustlab.models import load_model
    from robustlab.pipeline import apply_shift, load_prepared, shift_context
    from robustlab.shifts.batched import apply
    from robustlab.shifts.batched.scenes import problem, scene_inputs
    from robustlab.shifts.registry import get_shift, list_shifts
    from robustlab.suites import get_suite

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.photos.is_dir():
        print(f"SKIP: no photos at {args.photos}")
        return 0
    if args.scenes == "all":  # the batched scenes: those taking masks
        names = [sh.name for sh in list_shifts() if get_shift(sh.name, batched=True).batched_needs]
    else:
        names = args.scenes.split(",")
    protocol = get_suite("ximagenet12").protocol
    ensure_masks(photos(args.photos, args.n), args.masks)
    samples = photos(args.photos, args.n, args.masks)
    space = get_label_space("imagenet1k")
    model = load_model("lite0", device=args.device, batch_size=args.chunk)
    dev = torch.device(args.device)
    print(
        f"# {len(samples)} photos, {len(names)} scenes, device {dev}, "
        f"torch threads {torch.get_num_threads()}",
        flush=True,
    )

    def top1(batch: torch.Tensor, labels: torch.Tensor) -> int:
        _, ids = model.predict_topk(batch, 1)
        return int((ids[:, 0].cpu() == labels).sum())

    acc = {
        name: {"exact": 0, "torch": 0, "n": 0, "mad": 0.0, "max": 0, "t_exact": 0.0, "t_torch": 0.0}
        for name in names
    }
    clean_ok = clean_n = 0
    for start in range(0, len(samples), args.chunk):
        chunk = samples[start : start + args.chunk]
        prepared = [load_prepared(s, protocol, with_mask=s.mask_path is not None) for s in chunk]
        inputs = [scene_inputs(p) for p in prepared]
        x = torch.from_numpy(np.stack([p.rgb for p in prepared])).permute(0, 3, 1, 2).to(dev)
        labels = torch.as_tensor([space.index_of(s.class_name) for s in chunk])
        clean_ok += top1(x, labels)
        clean_n += len(chunk)
        for name in names:
            keep = [i for i, inp in enumerate(inputs) if problem(name, inp, x.shape[-2:]) is None]
            if not keep:
                continue
            ids = [chunk[i].id for i in keep]
            t0 = time.process_time()
            ex = np.stack(
                [
                    apply_shift(
                        prepared[i].rgb,
                        chunk[i].id,
                        name,
                        "default",
                        0,
                        shift_context(chunk[i], prepared[i], name, "default", 0, protocol),
                    )[..., :3]
                    for i in keep
                ]
            )
            t1 = time.process_time()
            masks = torch.stack([inputs[i]["mask"] for i in keep])
            boxes = (
                torch.tensor([inputs[i]["box"] for i in keep])
                if "boxes" in get_shift(name).batched_needs
                else None
            )
            out = apply(name, "default", x[keep], ids, seed=0, masks=masks, boxes=boxes)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.process_time()
            ex_t = torch.from_numpy(ex).permute(0, 3, 1, 2).to(dev)
            diff = (out.int() - ex_t.int()).abs()
            a = acc[name]
            a["exact"] += top1(ex_t, labels[keep])
            a["torch"] += top1(out, labels[keep])
            a["n"] += len(keep)
            a["mad"] += float(diff.float().mean()) * len(keep)
            a["max"] = max(a["max"], int(diff.max()))
            a["t_exact"] += t1 - t0
            a["t_torch"] += t2 - t1
        rows = report(acc, clean_ok, clean_n)
        if args.json:
            args.json.write_text(
                json.dumps(
                    {"photos": clean_n, "device": str(dev), "rows": rows, "clean_ok": clean_ok},
                    indent=1,
                )
            )
    return 0


def report(acc: dict, clean_ok: int, done: int) -> list[dict]:
    """Print the cumulative table; returns its rows."""
    rows = []
    print(f"\n## {done} photos; clean error {100 - 100 * clean_ok / done:.2f} %", flush=True)
    print(
        "| scene | n | error exact % | error torch % | diff | mean abs px diff | max "
        "| exact ms/img | torch ms/img |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, a in acc.items():
        n = a["n"]
        if not n:
            continue
        e_ex = 100 - 100 * a["exact"] / n
        e_to = 100 - 100 * a["torch"] / n
        row = {
            "scene": name,
            "n": n,
            "error_exact": e_ex,
            "error_torch": e_to,
            "diff": e_to - e_ex,
            "mad": a["mad"] / n,
            "max": a["max"],
            "exact_s": a["t_exact"] / n,
            "torch_s": a["t_torch"] / n,
        }
        rows.append(row)
        print(
            f"| {name} | {n} | {e_ex:.1f} | {e_to:.1f} | {e_to - e_ex:+.1f} | {row['mad']:.4f} "
            f"| {row['max']} | {row['exact_s'] * 1e3:.1f} | {row['torch_s'] * 1e3:.1f} |"
        )
    total_ex = sum(a["t_exact"] for a in acc.values())
    total_to = sum(a["t_torch"] for a in acc.values())
    print(
        f"# all scenes: exact {total_ex:.1f} s, torch {total_to:.1f} s CPU time "
        f"(batched / exact throughput ratio x{total_ex / max(total_to, 1e-9):.2f})",
        flush=True,
    )
    sys.stdout.flush()
    return rows


if __name__ == "__main__":
    sys.exit(main())
