"""Peak memory of ``robustlab saliency`` and ``robustlab evaluate`` on a mask suite, by size.

Issue 35 item 5: both keep a peak memory that does not grow with the number of images
(measured at 40 and 1,000 photos in the same run), saliency under 2 GB. The command is
the issue's: lite0 on the XIMAGENET-12 cells ``blur_bg`` and ``random_bg`` (its two
levels) plus the clean cell, on the CPU, every default (batch size, workers, lanes).

Every size holds the same 40 distinct photos (spread over the shared photos' pixel
counts, from the smallest, 100x100, to the largest, 1836x1377), hard-linked under new
names as often as the size needs (1,000 photos: each 25 times), so a peak that grows
between sizes grows with the number of images, not with which images came in. Each photo
has an elliptic mask (about 24 % of the image; memory does not depend on what the mask
holds), hard-linked too.
Every command runs in a fresh interpreter with its own database; a thread samples the RSS
and PSS of its whole process tree (main + workers) every 0.2 s, and each run's line also
gives the RSS peak of each tenth of the run (a flat row: nothing accumulates as it goes).

A peak is a moment, not a level: evaluate frees and trims each batch's activations after
the batch (two forward lanes on 2 cores), so the tree's RSS swings by about 700 MB within a
run and the peak is the largest swing. A 40-photo run has a few batches to show it, a
1,000-photo run a hundred and more; the smallest size therefore runs ``--repeats-small`` times
and its highest peak is the one compared. Each command's verdict also prints the median of
the RSS peaks of the 3rd to 9th tenths of a run, the level the swings reach (a tenth of a
1,000-photo evaluate holds about 12 batches of 32, a tenth of a 40-photo one half a batch).
``--src`` runs another checkout's ``src`` (a ``git archive`` of an older commit) for a
before/after; ``--lanes 1`` runs evaluate one batch at a time.

Usage:
    python benchmarks/masked_memory.py                          # 40 and 1,000 photos, both commands
    python benchmarks/masked_memory.py --sizes 40 --commands saliency --src /tmp/old/src
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import SHARED, _tree_memory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHIFTS = "blur_bg,random_bg"
SOURCES = 40
SALIENCY_LIMIT_MB = 2048
GROWTH_LIMIT_MB = 100


def spread_photos(k: int = SOURCES) -> list[dict]:
    """``k`` labelled shared photos spread evenly over their pixel counts (both ends in)."""
    from PIL import Image

    with open(SHARED / "labels.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if (SHARED / r["file"]).is_file()]
    sizes = [np.prod(Image.open(SHARED / r["file"]).size) for r in rows]
    order = np.argsort(sizes, kind="stable")
    picks = np.unique(np.round(np.linspace(0, len(rows) - 1, k)).astype(int))
    return [rows[order[i]] for i in picks]


def masked_folder(dst: Path, n: int, sources: list[dict]) -> tuple[Path, Path]:
    """``dst/data``: ``n`` photos, the sources in turn, hard-linked under new names, with
    labels.csv; ``dst/masks``: each one's elliptic mask, made once per source and linked."""
    from PIL import Image

    data, masks, shapes = dst / "data", dst / "masks", dst.parent / "shapes"
    for d in (data, masks, shapes):
        d.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        r = sources[i % len(sources)]
        shape = shapes / (r["file"] + ".png")
        if not shape.exists():
            w, h = Image.open(SHARED / r["file"]).size
            yy, xx = np.mgrid[:h, :w]
            m = ((yy - h / 2) / (0.35 * h)) ** 2 + ((xx - w / 2) / (0.22 * w)) ** 2 <= 1
            Image.fromarray(m.astype(np.uint8) * 255).save(shape)
        name = f"img{i:06d}_{r['file']}"
        os.link(SHARED / r["file"], data / name)
        os.link(shape, masks / (name + ".png"))
        rows.append({**r, "file": name})
    with open(data / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return data, masks


def command(which: str, data: Path, masks: Path, db: Path, lanes: int | None = None) -> list[str]:
    extra = ["--lanes", str(lanes)] if lanes is not None and which == "evaluate" else []
    return [
        sys.executable,
        "-m",
        "robustlab.cli",
        which,
        "lite0",
        "--data",
        str(data),
        "--masks",
        str(masks),
        "--suite",
        "ximagenet12",
        "--shift",
        SHIFTS,
        "--db",
        str(db),
        "--no-progress",
        *extra,
    ]


def sampled(cmd: list[str], interval: float = 0.2) -> tuple[list[tuple[float, int, int]], int]:
    """Run ``cmd``; its process tree's ``(seconds, RSS, PSS)`` every ``interval`` s, and
    its exit status."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    trace: list[tuple[float, int, int]] = []

    def watch():
        while proc.poll() is None:
            trace.append((time.perf_counter() - t0, *_tree_memory(proc.pid)))
            time.sleep(interval)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    _, err = proc.communicate()
    th.join()
    if proc.returncode:
        print(err.strip().splitlines()[-1] if err.strip() else "failed", file=sys.stderr)
    return trace, proc.returncode


def tenth_peaks(trace: list[tuple[float, int, int]]) -> list[float]:
    """The RSS peak (MB) of each tenth of a run: a flat row is no growth while it runs."""
    n = len(trace)
    parts = [trace[k * n // 10 : (k + 1) * n // 10] for k in range(10)]
    return [max(x[1] for x in p) / 2**20 for p in parts if p]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[40, 1000])
    ap.add_argument("--commands", default="saliency,evaluate")
    ap.add_argument(
        "--repeats-small",
        type=int,
        default=3,
        help="runs of the smallest size (its peak: the highest); larger sizes run once",
    )
    ap.add_argument(
        "--lanes",
        type=int,
        default=None,
        help="evaluate's --lanes (default: its own, 2 on a multi-core CPU); 1 runs one batch "
        "at a time, whose peak does not depend on how two batches' passes overlap",
    )
    ap.add_argument("--src", type=Path, default=ROOT / "src", help="the robustlab src to run")
    args = ap.parse_args()
    if not SHARED.exists():
        sys.exit(f"shared photos not found at {SHARED}")
    os.environ["PYTHONPATH"] = str(args.src)
    tmp = Path(tempfile.mkdtemp(prefix="rl-bench-masked-mem-"))
    sources = spread_photos()
    folders = {n: masked_folder(tmp / str(n), n, sources) for n in args.sizes}
    small = min(args.sizes)
    lanes = "default" if args.lanes is None else args.lanes
    print(
        f"# src {args.src}; {os.cpu_count()} CPUs; cells clean + {SHIFTS}; evaluate lanes "
        f"{lanes}; outputs in {tmp}"
    )
    for which in args.commands.split(","):
        peaks, levels = {}, {}
        for n in args.sizes:
            data, masks = folders[n]
            for r in range(args.repeats_small if n == small else 1):
                db = tmp / f"{which}{n}-{r}.duckdb"
                trace, rc = sampled(command(which, data, masks, db, args.lanes))
                rss, pss = max(x[1] for x in trace), max(x[2] for x in trace)
                peaks[n] = max(peaks.get(n, (0, 0)), (rss, pss))
                by_tenth = tenth_peaks(trace)
                # the middle tenths: past the model load, before the last batches drain
                levels[n] = max(levels.get(n, 0.0), float(np.median(by_tenth[2:9] or by_tenth)))
                print(
                    f"{which} {n:5d} photos: peak RSS {rss / 2**20:7.1f} MB, PSS "
                    f"{pss / 2**20:7.1f} MB (process tree), {trace[-1][0]:7.1f} s, exit {rc}, "
                    f"load average {os.getloadavg()[0]:.1f}; RSS peak by tenth of the run: "
                    f"{' '.join(f'{v:.0f}' for v in by_tenth)}",
                    flush=True,
                )
        first, last = peaks[args.sizes[0]], peaks[args.sizes[-1]]
        if len(peaks) >= 2:
            d_rss, d_pss = (last[0] - first[0]) / 2**20, (last[1] - first[1]) / 2**20
            verdict = "PASS" if d_rss < GROWTH_LIMIT_MB and d_pss < GROWTH_LIMIT_MB else "FAIL"
            print(
                f"{verdict} {which} growth {args.sizes[0]} -> {args.sizes[-1]} photos: RSS "
                f"{d_rss:+.1f} MB, PSS {d_pss:+.1f} MB (target < {GROWTH_LIMIT_MB} MB)"
            )
            lo, hi = levels[args.sizes[0]], levels[args.sizes[-1]]
            print(
                f"  {which} median of the tenths' RSS peaks (3rd-9th tenth): {lo:.0f} MB at "
                f"{args.sizes[0]}, {hi:.0f} MB at {args.sizes[-1]} photos ({hi - lo:+.0f} MB; "
                "the peak above is the run's single highest swing)"
            )
        if which == "saliency":
            top = max(r for r, _ in peaks.values()) / 2**20
            verdict = "PASS" if top < SALIENCY_LIMIT_MB else "FAIL"
            print(f"{verdict} saliency peak RSS {top:.1f} MB (target < {SALIENCY_LIMIT_MB} MB)")


if __name__ == "__main__":
    main()
