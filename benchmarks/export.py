"""What ``robustlab export`` costs against copying the same files (issue 40 item 5: exporting
10,000 images takes less than twice the time of copying their files).

Usage:
    python benchmarks/export.py [--data PHOTOS] [--photos N] [--shifts LIST] [--work DIR]

Generates ImageNet-C ``--shifts`` (default: four fast corruptions) at all 5 severities on the
photos (default ``../shared/data/imagenet-samples``, 500 photos: 10,000 cell files and the
500 sources, 10,500 images; the test fixtures' 124 photos when it is absent), or reuses the
folder ``--work`` holds from an earlier run. Then, best of ``--repeat``, interleaved, each
into a fresh folder on the same disk, page cache warm:

- copy: every file the export holds (the source photos and the cell files), one
  ``shutil.copyfile`` each into the same tree;
- ``export(..., format="hf")`` and ``export(..., format="webdataset")`` in this process, from
  planning (reading the manifest and hash journals) to the dataset card: each file read
  once, checked against its recorded hash and written into 512 MiB shards, each shard
  fsynced before it is renamed into place.

Prints the seconds and each export's ratio to the copy.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"
MINI = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"
SHIFTS = "brightness,contrast,gaussian_noise,jpeg_compression"


def _photos(src: Path, n: int | None, into: Path) -> Path:
    """The first ``n`` photos of ``src`` in class folders, or ``src`` itself."""
    from robustlab.data.sources import discover

    if n is None:
        return src
    for s in list(discover(src))[:n]:
        dest = into / str(s.class_name) / Path(s.id).name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(s.path, dest)
    return into


def _copy(files: list[tuple[Path, str]], dest: Path) -> float:
    t = time.perf_counter()
    made: set[Path] = set()
    for path, rel in files:
        target = dest / rel
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        shutil.copyfile(path, target)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=SHARED if SHARED.is_dir() else MINI)
    ap.add_argument("--photos", type=int, default=None, help="first N photos (default: all)")
    ap.add_argument("--shifts", default=SHIFTS)
    ap.add_argument("--work", type=Path, default=None, help="keep the generated folder here")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from robustlab.workflows.export import export, plan_export
    from robustlab.workflows.generate import generate

    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = args.work or Path(tmp)
        gen = work / "generated"
        data = _photos(args.data, args.photos, work / "photos") if not gen.exists() else None
        if data is not None:
            t = time.perf_counter()
            shifts = args.shifts.split(",")
            res = generate("imagenet-c", data, gen, shifts=shifts, workers=0, progress=False)
            print(f"generated {res.written} files in {time.perf_counter() - t:.1f} s")
        plan = plan_export(gen)
        files = [(it.path, f"{it.shift}/{it.level}/{it.rel}") for it in plan.items]
        mb = sum(p.stat().st_size for p, _ in files) / 1e6
        print(f"{len(files)} images, {mb:.0f} MB")
        best: dict[str, float] = {}
        for k in range(args.repeat):
            runs = Path(tmp) / f"run{k}"
            took = {"copy": _copy(files, runs / "copy")}
            for fmt in ("hf", "webdataset"):
                t = time.perf_counter()
                res = export(gen, runs / fmt, format=fmt, progress=False)
                took[fmt] = time.perf_counter() - t
                assert res.rows == len(files) and not res.skipped, res
            print(f"repeat {k + 1}: " + ", ".join(f"{n} {s:.2f} s" for n, s in took.items()))
            best = {n: min(best.get(n, 1e9), s) for n, s in took.items()}
            shutil.rmtree(runs)
        copy = best["copy"]
        print(f"copy the files: {copy:.2f} s ({len(files) / copy:,.0f} files/s)")
        for fmt in ("hf", "webdataset"):
            s = best[fmt]
            print(f"export --format {fmt}: {s:.2f} s ({len(files) / s:,.0f} images/s), "
                  f"x{s / copy:.2f} the copy")  # fmt: skip


if __name__ == "__main__":
    main()
