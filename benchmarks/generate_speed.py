"""Throughput of ``robustlab generate`` (images/s, all cells per image) in this process (0) and with N workers.

Usage: python benchmarks/generate_speed.py [--images 8] [--workers 0,2] [--suite imagenet-c]

Copies a few shared photos to a temp folder and generates every registered cell of the
suite into fresh output folders, once per worker count. Prints a ratio, asserts nothing:
the machine is shared and timings vary.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from robustlab.workflows.generate import generate
from robustlab.suites import get_suite

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-samples"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--suite", default="imagenet-c")
    args = ap.parse_args()
    suite = get_suite(args.suite)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        rows = (SHARED / "labels.csv").read_text().splitlines()
        # Evenly spaced photos: a spread of sizes rather than the first few classes.
        step = max(1, (len(rows) - 1) // args.images)
        picked = rows[1::step][: args.images]
        (data / "labels.csv").write_text("\n".join([rows[0], *picked]) + "\n")
        for r in picked:
            shutil.copy(SHARED / r.split(",")[0], data)
        print(
            f"{args.suite}: {len(suite.cells())} cells ({', '.join(suite.shifts)}), "
            f"{len(picked)} images"
        )
        base = None
        for w in (int(x) for x in args.workers.split(",")):
            t = time.perf_counter()
            res = generate(suite, data, Path(tmp) / f"out{w}", workers=w, progress=False)
            dt = time.perf_counter() - t
            rate = res.samples / dt
            base = base or rate
            print(
                f"workers={w}: {res.written} files in {dt:.2f} s = {rate:.2f} images/s "
                f"({res.written / dt:.1f} files/s), x{rate / base:.2f} vs first"
            )


if __name__ == "__main__":
    main()
