"""Cost of content-hashing a data set for the run identity: first run vs cached rerun.

Usage:
    PYTHONPATH=src python benchmarks/content_hash.py [FOLDER] [--links N] [--repeats R]

FOLDER defaults to ../shared/data/imagenet-samples (500 JPEGs). ``--links N`` also times
N hard links to those files (distinct paths, so N cache entries) to show how the cached
path scales to a 50,000-image set. Each measurement uses a fresh cache folder in /tmp.
"First, cold" drops the files from the page cache first (``posix_fadvise DONTNEED``, no
root needed), so it includes reading from disk; "first, warm" reads from memory.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from robustlab.data.sources import is_image_name  # noqa: E402
from robustlab.records.content_hash import ContentHasher  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "imagenet-samples"


def _evict(paths) -> None:
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _timed(cache: Path, paths) -> tuple[float, object]:
    with ContentHasher(cache) as h:
        t = time.perf_counter()
        h.hash_files(paths)
        return time.perf_counter() - t, h.stats


def measure(label: str, paths, *, cold: bool, repeats: int) -> None:
    size = sum(os.path.getsize(p) for p in paths) / 1e6
    firsts, cached = [], []
    for _ in range(repeats):
        cache = Path(tempfile.mkdtemp(prefix="rl-hash-bench-"))
        if cold:
            _evict(paths)
        dt, stats = _timed(cache, paths)
        assert stats.read == len(paths), stats
        firsts.append(dt)
        time.sleep(0.2)  # past the "racily clean" window, as any real rerun is
        _timed(cache, paths)  # entries hashed within 0.1 s of a change are re-read once
        dt, stats = _timed(cache, paths)
        assert stats.read == 0 and stats.cached == len(paths), stats
        cached.append(dt)
    f, c = min(firsts), min(cached)
    n = len(paths)
    print(
        f"{label:<34} {n:>7} files {size:>8.1f} MB | first {f:7.3f} s "
        f"({n / f:>9,.0f} files/s, {size / f:6.0f} MB/s) | cached {c:7.3f} s "
        f"({n / c:>9,.0f} files/s) | x{f / c:.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=str(DEFAULT))
    ap.add_argument("--links", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    folder = Path(args.folder)
    paths = sorted(str(p) for p in folder.rglob("*") if p.is_file() and is_image_name(p.name))
    if not paths:
        sys.exit(f"no images under {folder}")
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    measure("first cold (disk) / cached", paths, cold=True, repeats=args.repeats)
    measure("first warm (page cache) / cached", paths, cold=False, repeats=args.repeats)
    if args.links:
        with tempfile.TemporaryDirectory(prefix="rl-hash-links-") as tmp:
            links = []
            for i in range(args.links):
                sub = Path(tmp) / f"{i // 1000:03d}"
                sub.mkdir(exist_ok=True)
                dst = sub / f"{i}.jpg"
                os.link(paths[i % len(paths)], dst)
                links.append(str(dst))
            measure(f"{args.links} hard links, warm / cached", links, cold=False, repeats=1)


if __name__ == "__main__":
    main()
