"""What checking a generated folder's files costs (issue 35 item 3): planning an evaluation
of the folder, and a ``generate`` rerun that finds every file there.

Usage:
    python benchmarks/generated_check.py [--photos N] [--shifts LIST]

Generates ``--shifts`` (default: the 15 common ImageNet-C corruptions) at every severity on
N real photos (``tests/fixtures/shared-mini``, default 40: 3,000 files), then times, each
first with a fresh content-hash cache and the folder's files dropped from the page cache
(``posix_fadvise``: read from disk, as on a first rerun), then again with both warm:

- planning ``evaluate lite0`` on the folder (``make_plan``, which builds the run's
  identity): from the recorded hashes (this version) and by hashing every file, as before
  (the folder's manifest with its ``output_hashes`` key removed: the path an earlier
  version's folder takes, and the only path before this change);
- a ``generate`` rerun that finds every file: checking each against its recorded hash,
  against a rerun that only looks whether each file exists (its manifest without
  ``output_hashes``: files are adopted, not checked, as before this change it looked);
- the per-file check as ``evaluate`` reads a cell: BLAKE2b of its bytes against the decode
  it does anyway.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
PHOTOS = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"


def _fresh_cache() -> None:
    """Forget every content hash (the cache folder also marks the kernels compiled)."""
    from robustlab.records.content_hash import CACHE_FILE, cache_dir

    (cache_dir() / CACHE_FILE).unlink(missing_ok=True)


def _evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (no root needed): "first" reads disk."""
    for p in folder.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _strip_hashes(gen: Path) -> None:
    """The folder as an earlier robustlab left it: no output_hashes, no journals."""
    m = json.loads((gen / "manifest.json").read_text())
    m.pop("output_hashes", None)
    (gen / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    shutil.rmtree(gen / ".hashes", ignore_errors=True)


def _plan_seconds(gen: Path) -> float:
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    t = time.perf_counter()
    make_plan(EvaluateRequest.build("lite0", gen, device="cpu"))
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=40)
    ap.add_argument("--shifts", default="common")
    args = ap.parse_args()
    from robustlab.files.hashes import digest
    from robustlab.pipeline import decode
    from robustlab.workflows.generate import generate

    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="rl-check-") as tmp:
        where = Path(tmp)
        os.environ.setdefault("ROBUSTLAB_CACHE_DIR", str(where / "cache"))
        data = where / "photos"
        data.mkdir()
        with open(PHOTOS / "labels.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))[: args.photos]
        for r in rows:
            shutil.copy(PHOTOS / r["file"], data / r["file"])
        with open(data / "labels.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        gen = where / "gen"
        _fresh_cache()
        t = time.perf_counter()
        res = generate("imagenet-c", data, gen, shifts=args.shifts, workers=0, progress=False)
        made = time.perf_counter() - t
        files = sorted(p for p in gen.rglob("*.JPEG") if ".hashes" not in p.parts)
        size = sum(p.stat().st_size for p in files) / 1e6
        print(f"generated {res.written} files ({size:.0f} MB) in {made:.1f} s")

        kw = dict(shifts=args.shifts, workers=0, progress=False)
        _plan_seconds(gen)  # imports and the model's first load are no part of either path
        old = where / "old"
        shutil.copytree(gen, old)
        _strip_hashes(old)
        for label, folder in (("recorded hashes", gen), ("hashing every file (before)", old)):
            _fresh_cache()
            _evict(folder)
            first = _plan_seconds(folder)
            second = _plan_seconds(folder)
            print(f"plan evaluate, {label:<28}: first {first:6.2f} s, cached {second:6.2f} s")

        _fresh_cache()
        _evict(gen)
        t = time.perf_counter()
        generate("imagenet-c", data, gen, **kw)
        check_first = time.perf_counter() - t
        t = time.perf_counter()
        generate("imagenet-c", data, gen, **kw)
        check_cached = time.perf_counter() - t
        _strip_hashes(old)
        _fresh_cache()
        _evict(old)
        t = time.perf_counter()
        generate("imagenet-c", data, old, **kw)  # adopts: reads each file once, no check
        adopt = time.perf_counter() - t
        _strip_hashes(old)
        t = time.perf_counter()
        generate("imagenet-c", data, old, **kw)  # cached: what "exists" costs and no more
        exists = time.perf_counter() - t
        print(
            f"generate rerun, every file there: checked {check_first:.2f} s first, "
            f"{check_cached:.2f} s cached; an earlier version's folder: {adopt:.2f} s "
            f"(hashes recorded), then {exists:.2f} s"
        )

        blobs = [p.read_bytes() for p in files]
        t = time.perf_counter()
        for b in blobs:
            digest(b)
        hashing = time.perf_counter() - t
        t = time.perf_counter()
        for b in blobs:
            decode(b)
        decoding = time.perf_counter() - t
        print(
            f"per cell read: BLAKE2b {1e3 * hashing / len(blobs):.3f} ms, decode "
            f"{1e3 * decoding / len(blobs):.3f} ms ({100 * hashing / decoding:.1f} % on top)"
        )


if __name__ == "__main__":
    main()
