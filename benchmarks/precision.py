"""Mixed precision against fp32: top-1 on real photos, agreement and speed (issue 11).

Evaluates the bundled ``lite0`` on the clean photos of ``../shared/data/imagenet-samples``
once per precision (``robustlab.evaluate(..., precision=)``, the whole evaluation path:
workers, uint8 hand-over, autocast forward, float32 softmax/top-k, DuckDB) and prints one
Markdown table: top-1, its difference from fp32 in points (the contract: at most 0.2
points under bf16), how many photos changed their top-1 class, the largest change of a
top-1 probability, and predictions/s with the model's busy share (the throughput line of
every evaluate). Rerunning with the same ``--db`` resumes the runs (then the speed column
is of the resumed part only); the default is a fresh temporary database.

Usage:
    python benchmarks/precision.py                          # 500 photos, fp32 and bf16
    python benchmarks/precision.py --precisions fp32,bf16,fp16 --photos 100
    python benchmarks/precision.py --device cuda --compile
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"


def _subset(n: int, folder: Path, shared: Path = SHARED) -> Path:
    """The first ``n`` photos of the shared set (all 500 by default), linked into ``folder``
    with their labels CSV rows."""
    import csv
    import os

    rows = list(csv.DictReader((shared / "labels.csv").open(encoding="utf-8")))[:n]
    folder.mkdir(parents=True, exist_ok=True)
    for r in rows:
        target = folder / r["file"]
        if not target.exists():
            try:
                os.link(shared / r["file"], target)
            except OSError:
                target.symlink_to(shared / r["file"])
    with (folder / "labels.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return folder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="lite0")
    ap.add_argument("--precisions", default="fp32,bf16", help="comma list; fp32 first")
    ap.add_argument("--photos", type=int, default=500)
    ap.add_argument(
        "--photos-dir", type=Path, default=SHARED, help="labelled photos (a labels.csv beside)"
    )
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--compile", action="store_true", help="also torch.compile each run")
    ap.add_argument("--db", default=None, help="results database (default: a temporary one)")
    args = ap.parse_args()
    if not args.photos_dir.is_dir():
        print(f"no shared photos at {args.photos_dir}", file=sys.stderr)
        return 1
    import torch

    import robustlab
    from robustlab.execution.progress import throughput_line
    from robustlab.store import Store

    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    tmp = tempfile.TemporaryDirectory(prefix="robustlab-precision-")
    data = _subset(args.photos, Path(tmp.name) / "photos", args.photos_dir)
    db = args.db or str(Path(tmp.name) / "precision.duckdb")
    print(
        f"{args.model} on {args.photos} photos of {args.photos_dir}, device {args.device}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"workers {args.workers}{', compiled' if args.compile else ''}",
        file=sys.stderr,
    )
    results = {}
    for p in precisions:
        t0 = time.perf_counter()
        res = robustlab.evaluate(
            args.model,
            data,
            db=db,
            device=args.device,
            workers=args.workers,
            batch_size=args.batch_size,
            progress=False,
            precision=p,
            compile=args.compile,
        )
        seconds = time.perf_counter() - t0
        print(f"{p}: {throughput_line(res.throughput)}", file=sys.stderr)
        preds = Store(db).predictions([res.run_id]).set_index("sample_id").sort_index()
        results[p] = (preds, res.throughput, seconds)

    base = results[precisions[0]][0]
    print(
        f"\n| precision | top-1 % | vs {precisions[0]} (points) | top-1 class changed "
        "| max abs change of top-1 prob | predictions/s | model busy |"
    )
    print("|---|---|---|---|---|---|---|")
    for p, (preds, tp, _) in results.items():
        top1 = 100.0 * preds["correct"].mean()
        ids = preds["top5_ids"].map(lambda v: int(v[0]))
        base_ids = base["top5_ids"].map(lambda v: int(v[0]))
        probs = preds["top5_probs"].map(lambda v: float(v[0]))
        base_probs = base["top5_probs"].map(lambda v: float(v[0]))
        changed = int((ids != base_ids).sum())
        diff = top1 - 100.0 * base["correct"].mean()
        busy = f"{100 * tp['busy']:.0f} %" if tp.get("busy") is not None else "-"
        print(
            f"| {p} | {top1:.1f} | {diff:+.1f} | {changed} of {len(preds)} "
            f"| {float((probs - base_probs).abs().max()):.4f} | {tp.get('per_s')} | {busy} |"
        )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
