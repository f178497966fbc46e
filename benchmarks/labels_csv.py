"""Cost of a huge labels CSV for a few images (issue 36 item 9): ``evaluate --labels``.

Usage:
    python benchmarks/labels_csv.py [--rows N] [--images K] [--src SRC ...]

Builds a flat folder of K real photos (``tests/fixtures/shared-mini``) and a labels CSV of
N rows (default 1,000,000: the K photos' rows spread through an ImageNet-sized list of
files that are not there), then runs ``robustlab evaluate lite0 --data DIR --labels CSV``
(clean cell only: K predictions) once per ``--src`` (a ``src`` folder of a robustlab
checkout, put first on PYTHONPATH; default this checkout's), each in a fresh process, and
prints its wall time and peak RSS. The same run also times a plain ``csv.reader`` pass over
the file (the floor of any reader of it) and the import and evaluation of the K photos
with a K-row CSV, so the numbers say what the N - K rows cost on top.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHOTOS = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"


def build(where: Path, rows: int, images: int) -> tuple[Path, Path, Path]:
    """(data folder, big CSV, small CSV): K photos and their rows among N."""
    with open(PHOTOS / "labels.csv", newline="") as fh:
        chosen = list(csv.DictReader(fh))[:images]
    data = where / "flat"
    data.mkdir()
    for r in chosen:
        shutil.copy(PHOTOS / r["file"], data / r["file"])
    wnids = [r["wnid"] for r in chosen]
    big, small = where / "big.csv", where / "small.csv"
    step = max(1, rows // max(1, images))
    with open(big, "w", newline="") as fh, open(small, "w", newline="") as fs:
        w, ws = csv.writer(fh), csv.writer(fs)
        w.writerow(["file", "wnid"])
        ws.writerow(["file", "wnid"])
        k = 0
        for i in range(rows):
            if k < len(chosen) and i == k * step:
                w.writerow([chosen[k]["file"], chosen[k]["wnid"]])
                ws.writerow([chosen[k]["file"], chosen[k]["wnid"]])
                k += 1
            else:
                w.writerow([f"val/ILSVRC2012_val_{i:08d}.JPEG", wnids[i % len(wnids)]])
    return data, big, small


def run(src: Path, data: Path, labels: Path, where: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS GB, exit code) of one evaluate in a fresh process."""
    db = where / f"r-{time.monotonic_ns()}.duckdb"
    env = {**os.environ, "PYTHONPATH": str(src)}
    cmd = [sys.executable, "-m", "robustlab.cli", "evaluate", "lite0", "--data", str(data)]
    cmd += ["--labels", str(labels), "--db", str(db), "--workers", "0", "--no-progress"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        print(err.strip().splitlines()[-1] if err.strip() else "(no output)")
    return wall, usage.ru_maxrss / 1e6, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--src", action="append", default=None, help="robustlab src folder(s)")
    args = ap.parse_args()
    srcs = [Path(s).resolve() for s in (args.src or [ROOT / "src"])]
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="rl-labels-bench-") as tmp:
        where = Path(tmp)
        data, big, small = build(where, args.rows, args.images)
        t = time.perf_counter()
        with open(big, newline="") as fh:
            n = sum(1 for _ in csv.reader(fh)) - 1
        floor = time.perf_counter() - t
        size = big.stat().st_size / 1e6
        print(f"{n:,} rows ({size:.0f} MB) for {args.images} images; csv.reader pass {floor:.2f} s")
        for src in srcs:
            base, base_rss, _ = run(src, data, small, where)
            wall, rss, code = run(src, data, big, where)
            print(
                f"{str(src):<40} {args.images}-row CSV {base:6.1f} s {base_rss:5.2f} GB | "
                f"{n:,}-row CSV {wall:7.1f} s {rss:5.2f} GB (exit {code}) | "
                f"extra {wall - base:6.1f} s = x{(wall - base) / floor:.1f} the csv.reader pass"
            )


if __name__ == "__main__":
    main()
