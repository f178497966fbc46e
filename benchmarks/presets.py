"""Speed of the presets against the official generators' code, on one core, in one run.

For each preset (and ImageNet-C itself, at 224 px, as the yardstick) every corruption x
severity is timed on photos prepared with the preset's protocol: robustlab's
``corrupt(x, name, s, seed=Generator, preset=...)`` in this process, the official
script's own function (``make_cifar_c.py`` ..., executed as ``presets_reference.py``
does) in a child process under the reference environment (``_presets_worker.py``;
build it with ``bash benchmarks/setup_reference_env.sh``). Both are single-threaded and
timed in process CPU time, one after the other corruption by corruption (never both at
once), so they share the machine's load. A cell's time is the median over ``--repeats`` of the mean per image.

The issue's target: every preset at least as much faster than its original code as the
ImageNet-C suite is than its own (the ratio of the 75 common cells' totals). Two more
aggregates are printed because that total is mostly one corruption's: the reference's
glass blur is a Python loop over every pixel (three quarters of its ImageNet-C time, a
third of its CIFAR-10-C time), so the ratio of totals weighs how many passes that loop
makes at each preset's constants. The ratio of the 14 others' totals and the geometric
mean of the 15 per-corruption ratios show the rest.

Usage:
    python benchmarks/presets.py                        # every preset and imagenet-c
    python benchmarks/presets.py --presets cifar-c --images 8 --repeats 5
"""

from __future__ import annotations

import os

for _var in (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PHOTOS = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"
SCRIPTS = {
    "imagenet-c": "make_imagenet_c.py",
    "cifar-c": "make_cifar_c.py",
    "tiny-imagenet-c": "make_tinyimagenet_c.py",
    "imagenet-64-c": "make_imagenet_64_c.py",
    "imagenet-c-299": "make_imagenet_c_inception.py",
}
FROST = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")


def _prepare(preset: str, n: int) -> np.ndarray:
    from robustlab.data.images import read_image
    from robustlab.pipeline import prepare
    from robustlab.suites import PROTOCOLS

    files = sorted(p for p in PHOTOS.iterdir() if p.suffix == ".JPEG")[:n]
    return np.stack([prepare(read_image(f).rgb, PROTOCOLS[preset]) for f in files])


def _time_ours(images, name: str, preset: str | None, index: int, repeats: int) -> dict:
    import robustlab
    from robustlab.seeding import make_rng

    for s in range(1, 6):  # warm-up: compiled kernels, textures, per-severity tables
        robustlab.corrupt(images[0], name, s, seed=0, preset=preset)
    times = {}
    for s in range(1, 6):
        runs = []
        for _ in range(repeats):
            total = 0.0
            for i, x in enumerate(images):
                rng = make_rng(1000 * i + 10 * index + s)
                t0 = time.process_time()
                robustlab.corrupt(x, name, s, seed=rng, preset=preset)
                total += time.process_time() - t0
            runs.append(total / len(images))
        times[str(s)] = runs
    return times


def _total(times: dict[str, dict], names) -> float:
    return sum(statistics.median(times[n][str(s)]) for n in names for s in range(1, 6))


def main(argv=None) -> int:
    import robustlab

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(SCRIPTS))
    ap.add_argument("--images", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--refenv", type=Path, default=HERE / ".refenv")
    ap.add_argument("--mirror", type=Path, default=Path("/work/.mirror/hendrycks+robustness/repo"))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from presets_reference import NAMES, _show  # the canonical order (seed rule's c)

    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    common = robustlab.list_corruptions("common")
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for f in FROST:
            (Path(tmp) / f).write_bytes(_show(args.mirror, f))
        worker = subprocess.Popen(
            [
                str(args.refenv / "bin" / "python"),
                str(HERE / "_presets_worker.py"),
                str(args.mirror),
                tmp,
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(worker.stdout.readline())["ready"]
        try:
            for preset in presets:
                images = _prepare(preset, args.images if preset != "imagenet-c-299" else 2)
                npy = Path(tmp) / f"{preset}.npy"
                np.save(npy, images)
                ours, ref = {}, {}
                for c, name in enumerate(NAMES):
                    request = {
                        "script": SCRIPTS[preset],
                        "images": str(npy),
                        "name": name,
                        "index": c,
                        "repeats": args.repeats,
                    }
                    worker.stdin.write(json.dumps(request) + "\n")
                    worker.stdin.flush()
                    # the reference first, to the end, then ours: never both at once
                    reply = json.loads(worker.stdout.readline())
                    if reply.get("error"):
                        raise RuntimeError(f"{preset} {name}: {reply['error']}")
                    ref[name] = reply["times"]
                    ours[name] = _time_ours(
                        images, name, None if preset == "imagenet-c" else preset, c, args.repeats
                    )
                side = images.shape[1]
                row = {
                    "side": side,
                    "images": len(images),
                    "common_ours_ms": 1e3 * _total(ours, common),
                    "common_ref_ms": 1e3 * _total(ref, common),
                    "all_ours_ms": 1e3 * _total(ours, NAMES),
                    "all_ref_ms": 1e3 * _total(ref, NAMES),
                    "per_corruption": {
                        n: [1e3 * _total(ours, [n]), 1e3 * _total(ref, [n])] for n in NAMES
                    },
                }
                rest = [n for n in common if n != "glass_blur"]
                row["without_glass_ratio"] = _total(ref, rest) / _total(ours, rest)
                row["geomean_ratio"] = float(
                    np.exp(np.mean([np.log(_total(ref, [n]) / _total(ours, [n])) for n in common]))
                )
                results[preset] = row
                print(
                    f"{preset:16s} {side:3d} px  75 common cells: {row['common_ours_ms']:8.1f} ms"
                    f" vs {row['common_ref_ms']:9.1f} ms (x{row['common_ref_ms'] / row['common_ours_ms']:.1f});"
                    f"  all 95: x{row['all_ref_ms'] / row['all_ours_ms']:.1f};"
                    f"  14 without glass_blur: x{row['without_glass_ratio']:.1f};"
                    f"  geometric mean of the 15: x{row['geomean_ratio']:.1f}",
                    flush=True,
                )
        finally:
            worker.stdin.write(json.dumps({"quit": True}) + "\n")
            worker.stdin.close()
            worker.wait()
    if "imagenet-c" in results:
        base = results["imagenet-c"]["common_ref_ms"] / results["imagenet-c"]["common_ours_ms"]
        for preset, row in results.items():
            ratio = row["common_ref_ms"] / row["common_ours_ms"]
            verdict = "ok" if ratio >= base else "BELOW"
            print(f"{preset:16s} x{ratio:.1f} against imagenet-c's x{base:.1f}: {verdict}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
