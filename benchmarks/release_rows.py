"""``generate cifar-c`` end to end: ``--out-layout npy`` (the arrays, written directly) against
``--out-layout folders`` (a PNG per cell, then the arrays from them), in one run.

The inputs are CIFAR-sized: the shared-mini photos squashed to 32x32 as make_cifar_c.py's
preparation does, saved as PNG (as a CIFAR-10 test set exported to folders is), repeated
under new names up to ``--images``. Each layout generates all 19 corruptions x 5
severities into a fresh folder, the layouts alternating for ``--repeats`` rounds; printed:
wall and process CPU time per photo (this process and its workers), files written, and
the ratio folders / npy. The arrays of both layouts are compared byte for byte.

    PYTHONPATH=src python benchmarks/release_rows.py [--images 1000] [--workers 0] [--repeats 3]

With ``--scaling N`` only the npy layout runs, in one process (``--workers 0``) against
``N`` worker processes, alternating; printed: wall per photo of each and the speed-up,
the arrays again compared byte for byte.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PHOTOS = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"
# Shared-mini wnids filed under CIFAR-10 classes (a label each photo can carry).
CLASSES = {"n015": "bird", "n016": "frog", "n020": "dog", "n021": "dog", "n017": "frog"}


def _inputs(folder: Path, n: int) -> None:
    from robustlab.data.images import read_image
    from robustlab.pipeline import prepare
    from robustlab.suites import PROTOCOLS

    photos = sorted(p for p in PHOTOS.iterdir() if p.suffix == ".JPEG")
    small = []
    for p in photos:
        cls = CLASSES.get(p.name[:4])
        if cls:
            small.append((cls, p.stem, prepare(read_image(p).rgb, PROTOCOLS["cifar-c"])))
    for i in range(n):
        cls, stem, img = small[i % len(small)]
        (folder / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(folder / cls / f"{i:05d}_{stem}.png")


def _cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _one(layout: str, data: Path, out: Path, workers: int) -> tuple[float, float, int]:
    from robustlab.workflows.generate import generate

    wall, cpu = time.perf_counter(), _cpu()
    res = generate("cifar-c", data, out, out_layout=layout, workers=workers, progress=False)
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    files = sum(1 for _ in out.rglob("*") if _.is_file())
    assert res.failed == 0 and not res.skipped_inputs, res
    return wall, cpu, files


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tmp", type=Path, default=None, help="where the folders go")
    ap.add_argument("--scaling", type=int, default=0, help="npy only: 0 workers against N")
    args = ap.parse_args(argv)
    from robustlab.shifts.kernels import ensure_compiled_for

    ensure_compiled_for(["gaussian_noise"], progress=False)
    if args.scaling:
        return _scaling(args)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        data = Path(tmp) / "data"
        _inputs(data, args.images)
        times: dict[str, list[tuple[float, float, int]]] = {"folders": [], "npy": []}
        for r in range(args.repeats):
            for layout in ("folders", "npy") if r % 2 == 0 else ("npy", "folders"):
                times[layout].append(_one(layout, data, Path(tmp) / f"{layout}-{r}", args.workers))
            if r == 0:
                a, b = Path(tmp) / "folders-0", Path(tmp) / "npy-0"
                for f in sorted(b.glob("*.npy")):
                    assert np.array_equal(np.load(a / f.name), np.load(f)), f.name
            for layout in times:
                shutil.rmtree(Path(tmp) / f"{layout}-{r}")
        n = args.images
        print(f"cifar-c, {n} photos of 32x32, 95 cells each, workers={args.workers}:")
        med = {}
        for layout, runs in times.items():
            wall = statistics.median(t[0] for t in runs)
            cpu = statistics.median(t[1] for t in runs)
            med[layout] = (wall, cpu)
            print(
                f"  --layout {layout:7s}  wall {wall:7.2f} s ({1e3 * wall / n:6.2f} ms/photo)"
                f"  CPU {cpu:7.2f} s ({1e3 * cpu / n:6.2f} ms/photo)  {runs[0][2]:,} files"
                f"  (runs: {', '.join(f'{t[0]:.1f}' for t in runs)} s)"
            )
        print(
            f"  folders / npy: wall x{med['folders'][0] / med['npy'][0]:.1f},"
            f" CPU x{med['folders'][1] / med['npy'][1]:.1f}; the arrays are equal byte for byte"
        )
    return 0


def _scaling(args) -> int:
    """The npy layout in one process against ``args.scaling`` worker processes."""
    counts = (0, args.scaling)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        data = Path(tmp) / "data"
        _inputs(data, args.images)
        walls: dict[int, list[float]] = {w: [] for w in counts}
        for r in range(args.repeats):
            for w in counts if r % 2 == 0 else counts[::-1]:
                walls[w].append(_one("npy", data, Path(tmp) / f"w{w}-{r}", w)[0])
            for f in sorted((Path(tmp) / f"w0-{r}").glob("*.npy")):
                other = np.load(Path(tmp) / f"w{args.scaling}-{r}" / f.name)
                assert np.array_equal(np.load(f), other), f.name
            for w in counts:
                shutil.rmtree(Path(tmp) / f"w{w}-{r}")
        n = args.images
        print(f"cifar-c --out-layout npy, {n} photos of 32x32, 95 cells each:")
        med = {w: statistics.median(walls[w]) for w in counts}
        for w in counts:
            print(
                f"  --workers {w}: wall {med[w]:7.2f} s ({1e3 * med[w] / n:6.2f} ms/photo)"
                f"  (runs: {', '.join(f'{t:.1f}' for t in walls[w])} s)"
            )
        print(f"  speed-up x{med[0] / med[args.scaling]:.2f}; the arrays are equal byte for byte")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
