"""ImageNet-D's two mining claims, measured offline on real photos with the bundled models.

Candidate pool: N photos of ../shared/data/imagenet-samples (every k-th, so the classes
spread over ImageNet), their 15 ImageNet-C corruptions at severities 3-5, and their
XIMAGENET-12 background scenarios (masks made here by ``robustlab masks --method
cam-grabcut``; ``ai_bg`` is left out: no inpainting checkpoint offline). The three bundled
models (lite0, lite1, lite2) are evaluated once on the pool (stored runs); then each model
is held out in turn and the other two are the surrogates:

1. the surrogate curve: kept fraction and the held-out model's accuracy on the kept set for
   n = 1, 2 surrogates (averaged over the n-subsets), and the kept fraction with all 3;
2. transfer: the held-out model's accuracy on the set both surrogates get wrong, against
   random subsets of the same size drawn from the pool (2,000 draws; 95 % range and a
   one-sided p-value).

Usage:
    PYTHONPATH=src python benchmarks/mining.py [--photos 60] [--work /tmp/mining-bench]
Prints a markdown table and, last, one JSON line. Rerunning resumes every step.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "data" / "imagenet-samples"
MODELS = ("lite0", "lite1", "lite2")
COMMON = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
)


def pick_photos(samples: Path, data: Path, n: int) -> int:
    """Copy every (500 // n)-th photo into an ImageFolder tree ``data/<wnid>/<file>``."""
    with open(samples / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))
    step = max(1, len(rows) // n)
    chosen = rows[::step][:n]
    for r in chosen:
        dest = data / r["wnid"] / r["file"]
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(samples / r["file"], dest)
    return len(chosen)


def build_pool(
    work: Path,
    n_photos: int,
    *,
    corruptions=COMMON,
    levels=(3, 4, 5),
    scenarios: bool = True,
    workers: int = 2,
) -> list[Path]:
    """The generated folders of the candidate pool (created or resumed)."""
    from robustlab.workflows.generate import generate

    data = work / "data"
    pick_photos(SAMPLES, data, n_photos)
    folders = []
    gen_c = work / "imagenet-c"
    generate(
        "imagenet-c",
        data,
        gen_c,
        shifts=list(corruptions),
        levels=list(levels),
        workers=workers,
        progress=False,
    )
    folders.append(gen_c)
    if scenarios:
        masks = work / "masks"
        if not (masks / "masks_quality.json").exists():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "robustlab.cli",
                    "masks",
                    "--data",
                    str(data),
                    "--out",
                    str(masks),
                    "--method",
                    "cam-grabcut",
                ],
                check=True,
            )
        gen_x = work / "ximagenet12"
        generate("ximagenet12", data, gen_x, masks=masks, workers=workers, progress=False)
        folders.append(gen_x)
    return folders


def measure(folders, db: Path, *, models=MODELS, draws: int = 2000, workers: int = 1) -> dict:
    """Evaluate the models on every folder (stored, resumable) and compute both claims."""
    from robustlab.workflows.imagenet_d.mine import mine
    from robustlab.workflows.imagenet_d.mine.analysis import (
        leave_one_out,
        stored_correctness,
        surrogate_curve,
    )
    from robustlab.models import load_model
    from robustlab.store import Store

    loaded = [load_model(m, device="cpu") for m in models]
    run_ids = [[] for _ in models]
    all_kept = 0
    for folder in folders:
        res = mine(folder, surrogates=loaded, db=db, workers=workers, progress=False)
        for i, rid in enumerate(res.run_ids):
            run_ids[i].append(rid)
        all_kept += len(res.kept)
    table, correct = stored_correctness(Store(db), run_ids, list(models))
    rotations = leave_one_out(correct, list(models), draws=draws, seed=0)
    by_source = {}
    for name, sel in (
        ("imagenet-c", table["shift"].isin(COMMON)),
        ("scenarios", ~table["shift"].isin(COMMON)),
    ):
        if sel.any():
            by_source[name] = {
                "n": int(sel.sum()),
                "acc": {m: float(correct[sel.to_numpy(), i].mean()) for i, m in enumerate(models)},
                "all_wrong": float((~correct[sel.to_numpy()]).all(axis=1).mean()),
            }
    return {
        "candidates": int(len(table)),
        "all3_kept": int(all_kept),
        "all3_kept_fraction": float((~correct).all(axis=1).mean()),
        "curve_all3": surrogate_curve(correct, None),
        "rotations": rotations,
        "by_source": by_source,
    }


def print_tables(r: dict) -> None:
    print(
        f"\ncandidates: {r['candidates']}  kept by all 3 models: {r['all3_kept']} "
        f"({100 * r['all3_kept_fraction']:.1f} %)"
    )
    for name, s in r["by_source"].items():
        accs = ", ".join(f"{m} {100 * a:.1f} %" for m, a in s["acc"].items())
        print(
            f"  {name}: {s['n']} candidates, accuracy {accs}; all wrong {100 * s['all_wrong']:.1f} %"
        )
    print("\nClaim 1: kept fraction and held-out accuracy on the kept set vs number of surrogates")
    print("| held out | n | kept fraction | held-out acc on kept | held-out acc on pool |")
    print("| --- | --- | --- | --- | --- |")
    for rot in r["rotations"]:
        for row in rot["curve"]:
            print(
                f"| {rot['heldout']} | {row['n']} | {100 * row['kept_fraction']:.1f} % | "
                f"{100 * row['heldout_acc']:.1f} % | {100 * row['heldout_acc_all']:.1f} % |"
            )
    print(
        "| (all 3 as surrogates) | "
        + " / ".join(f"n={row['n']}: {100 * row['kept_fraction']:.1f} %" for row in r["curve_all3"])
        + " | | |"
    )
    print("\nClaim 2: held-out accuracy on the mined set vs random subsets of the same size")
    print(
        "| held out | surrogates | mined | acc on mined | random subsets: mean [95 % range] | p |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for rot in r["rotations"]:
        t = rot["transfer"]
        if t is None:
            continue
        print(
            f"| {rot['heldout']} | {'+'.join(rot['surrogates'])} | {t['n_mined']} | "
            f"{100 * t['mined_acc']:.1f} % | {100 * t['random_mean']:.1f} % "
            f"[{100 * t['random_lo']:.1f}, {100 * t['random_hi']:.1f}] | {t['p_value']:.4f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=60)
    ap.add_argument("--work", default="/tmp/robustlab-mining-bench")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-scenarios", action="store_true")
    ap.add_argument("--draws", type=int, default=2000)
    args = ap.parse_args()
    if not SAMPLES.is_dir():
        sys.exit(f"needs {SAMPLES}")
    work = Path(args.work)
    t0 = time.perf_counter()
    folders = build_pool(work, args.photos, scenarios=not args.no_scenarios, workers=args.workers)
    t1 = time.perf_counter()
    r = measure(folders, work / "bench.duckdb", draws=args.draws, workers=max(1, args.workers - 1))
    t2 = time.perf_counter()
    print_tables(r)
    r.update(photos=args.photos, pool_seconds=round(t1 - t0, 1), measure_seconds=round(t2 - t1, 1))
    print(json.dumps(r, default=float))


if __name__ == "__main__":
    main()
