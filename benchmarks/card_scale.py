"""The card's ImageNet-C numbers at the benchmark's real size: wall time, CPU and memory.

``robustlab card`` on a full ImageNet-C run (50,000 val images x 76 cells, 3.8 M stored
predictions: the run for which mCE is printed against AlexNet) spends its time in two
places once the run is stored: reading the predictions into per-image outcomes, and the
bootstrap intervals of its 34 ImageNet-C numbers (2,000 resamples of the 50,000 images).
This times exactly that step, ``robustlab.workflows.card.benchmarks.imagenet_c`` on a
stored run, in a child process per source tree, so that a checkout of an older commit
can be the baseline of the same run:

    python benchmarks/store_scale.py build --dir /tmp/cardscale --runs 2 --images 50000
    git worktree add /tmp/card-base <older commit>
    python benchmarks/card_scale.py --db /tmp/cardscale/runs-2.duckdb --baseline-src /tmp/card-base/src

Prints, per tree: wall and CPU seconds, peak resident memory (``ru_maxrss`` of the child),
the normalisation the card chose, and the headline numbers (the values must agree between
the trees; the intervals are Monte Carlo estimates and may differ in their last digits).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(db: str, n_resamples: int) -> None:
    """Run in the child: the card's ImageNet-C numbers of the first run of ``db``."""
    import numpy as np

    from robustlab.store import Store
    from robustlab.workflows.card.benchmarks import Context, imagenet_c

    store = Store(db)
    runs = store.runs().sort_values("started_at")
    run_id = str(runs["run_id"].iloc[0])
    ctx = Context(store, np.random.default_rng(0), n_resamples)
    t0, c0 = time.perf_counter(), time.process_time()
    numbers = imagenet_c(ctx, run_id, None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    heads = {
        n.metric: [n.value, n.lo, n.hi, n.n_images]
        for n in numbers
        if n.metric in ("clean_acc", "corruptions_acc", "mce", "relative_mce", "mean_error")
    }
    note = next((n.note for n in numbers if n.note), "")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB -> GB
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": cpu,
                "peak_gb": peak,
                "n": len(numbers),
                "note": note,
                "headline": heads,
            }
        )
    )


def measure(src: Path, db: Path, n_resamples: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--db", str(db), "--resamples", str(n_resamples)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, required=True, help="a store_scale.py database")
    ap.add_argument("--baseline-src", type=Path, help="the src/ folder of an older checkout")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(str(args.db), args.resamples)
        return 0
    trees = [("this tree", ROOT / "src")]
    if args.baseline_src:
        trees.insert(0, ("baseline", args.baseline_src))
    results = {}
    for name, src in trees:
        r = results[name] = measure(src, args.db, args.resamples)
        print(
            f"{name:10s} {r['wall']:7.1f} s wall {r['cpu']:7.1f} s CPU  peak {r['peak_gb']:.2f} GB"
            f"  {r['n']} numbers; {r['note']}"
        )
        for metric, (v, lo, hi, n) in r["headline"].items():
            print(f"{'':10s} {metric:16s} {v:8.3f} (95 % CI {lo:.3f}-{hi:.3f}, {n:,} images)")
    if len(results) == 2:
        base, new = results["baseline"], results["this tree"]
        same = all(base["headline"][k][0] == new["headline"][k][0] for k in new["headline"])
        print(
            f"this tree / baseline: wall x{new['wall'] / base['wall']:.3f}, "
            f"CPU x{new['cpu'] / base['cpu']:.3f}, peak x{new['peak_gb'] / base['peak_gb']:.2f};"
            f" headline values {'identical' if same else 'DIFFER'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
