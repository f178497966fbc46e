"""The ImageNet-C paper's test-time defences, measured offline on real photos.

Evaluates the bundled ``lite0`` on ImageNet-C's 15 common corruptions plain, behind CLAHE,
behind NL-means and with ten-crop TTA (``robustlab.evaluate(..., preprocess=, tta=)``),
all in one DuckDB file, and prints one Markdown table: clean error, mean corruption
error, mCE and relative mCE against the plain model (100 % by definition), and the
evaluation time of each configuration. The paper's direction to compare with (ResNet-50
on ImageNet-C): NL-means raised mCE from 76.7 to 82.1, and 10-crop's clean-accuracy gain
did not carry over to corruptions. Rerunning with the same arguments resumes each run.

Photos: every k-th of ``../shared/data/imagenet-samples`` (one photo per class, so the
subset spans the classes), hard-linked into a flat folder with its labels CSV.

A second part (``--part pixels``) measures what the pixel defences do to the photos
themselves: the mean absolute change of a clean photo, the wavelet noise estimate, and the
RMSE to the clean photo of a copy with added Gaussian noise before and after NL-means.

Usage:
    python benchmarks/defences.py                       # 100 photos, severities 1..5
    python benchmarks/defences.py --photos 40 --levels 1,3,5 --configs plain,clahe
    python benchmarks/defences.py --part pixels --photos 64
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"
# name -> (preprocess, tta) passed to robustlab.evaluate
CONFIGS = {
    "plain": (None, None),
    "clahe": ("clahe", None),
    "nlmeans": ("nlmeans", None),
    "ten-crop": (None, "ten-crop"),
}


def make_subset(dst: Path, n: int, src: Path = SHARED) -> Path:
    """``n`` photos spread over the classes (every k-th row of labels.csv), hard-linked."""
    with open(src / "labels.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if (src / r["file"]).is_file()]
    step = max(1, len(rows) // n)
    picked = rows[::step][:n]
    dst.mkdir(parents=True, exist_ok=True)
    for r in picked:
        target = dst / r["file"]
        if not target.exists():
            try:
                os.link(src / r["file"], target)
            except OSError:
                target.symlink_to(src / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(picked[0]))
        w.writeheader()
        w.writerows(picked)
    return dst


def protocol_crop(path: Path):
    """The ImageNet-C protocol's image: bilinear shorter side 256, centre crop 224."""
    import numpy as np
    from PIL import Image

    img = Image.open(path).convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return np.asarray(img.crop((left, top, left + 224, top + 224))).copy()


def pixel_effects(data: Path) -> None:
    """Print what CLAHE and NL-means do to clean photos and to noisy copies of them."""
    import numpy as np

    from robustlab.defences import Clahe, NLMeans, noise_sigma

    photos = [protocol_crop(p) for p in sorted(data.glob("*.JPEG"))]
    rng = np.random.default_rng(0)
    nlm, clahe = NLMeans(), Clahe()
    rows = {k: [] for k in ("sigma", "nlm_clean", "nlm_big", "clahe_clean")}
    noisy = {10: [], 20: []}
    for x in photos:
        rows["sigma"].append(noise_sigma(x))
        d = np.abs(nlm(x).astype(int) - x.astype(int))
        rows["nlm_clean"].append(d.mean())
        rows["nlm_big"].append(np.mean(d > 8))
        rows["clahe_clean"].append(np.abs(clahe(x).astype(int) - x.astype(int)).mean())
        for sd, out in noisy.items():
            n = np.clip(x + rng.normal(0, sd, x.shape), 0, 255).astype(np.uint8)
            before = np.sqrt(np.mean((n.astype(float) - x) ** 2))
            after = np.sqrt(np.mean((nlm(n).astype(float) - x) ** 2))
            out.append((noise_sigma(n), before, after))
    print(f"\n{len(photos)} photos, 224x224 (ImageNet-C protocol crop), values in 0..255\n")
    print("| measure | median | 90th percentile |")
    print("| --- | ---: | ---: |")

    def q(v) -> str:
        return f"{np.median(v):.2f} | {np.percentile(v, 90):.2f}"

    print(f"| noise estimate of the clean photo | {q(rows['sigma'])} |")
    print(f"| NL-means: mean abs change of the clean photo | {q(rows['nlm_clean'])} |")
    print(f"| NL-means: fraction of clean pixels changed by more than 8 | {q(rows['nlm_big'])} |")
    print(f"| CLAHE: mean abs change of the clean photo | {q(rows['clahe_clean'])} |")
    for sd, out in noisy.items():
        est, before, after = (np.array(c) for c in zip(*out))
        print(f"| Gaussian noise sd {sd}: noise estimate | {q(est)} |")
        print(
            f"| Gaussian noise sd {sd}: RMSE to clean after / before NL-means | "
            f"{q(after / before)} |"
        )


def common_cells(store, run_ids: dict[str, str]):
    """Per-run cell tables (shift, level, n, error) over the predictions every run has, so
    an interrupted run is compared on the same images as the others."""
    preds = store.predictions(
        list(run_ids.values()), columns=["run_id", "sample_id", "shift", "level", "correct"]
    )
    keys = ["sample_id", "shift", "level"]
    counts = preds.groupby(keys)["run_id"].nunique()
    shared = counts[counts == len(run_ids)].index
    preds = preds.set_index(keys).loc[lambda d: d.index.isin(shared)].reset_index()
    out = {}
    for name, rid in run_ids.items():
        mine = preds[preds["run_id"] == rid]
        cells = mine.groupby(["shift", "level"], sort=False)["correct"].agg(["size", "mean"])
        cells = cells.reset_index().rename(columns={"size": "n"})
        cells["error"] = 1.0 - cells.pop("mean")
        out[name] = cells
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=["table", "pixels"], default="table")
    ap.add_argument("--photos", type=int, default=100)
    ap.add_argument("--levels", default="1,2,3,4,5")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--model", default="lite0")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument(
        "--work",
        default=str(ROOT / ".bench-defences"),
        help="folder for the photo subset and the database",
    )
    ap.add_argument(
        "--tabulate-only",
        action="store_true",
        help="evaluate nothing: tabulate the runs already in the database (an "
        "interrupted run counts on the predictions every run has)",
    )
    args = ap.parse_args(argv)
    if not SHARED.is_dir():
        print(f"needs the shared photos at {SHARED}", file=sys.stderr)
        return 1
    import torch

    import robustlab
    from robustlab.metrics.mce import corruption_errors, mce
    from robustlab.store import Store

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - args.workers))
    work = Path(args.work)
    data = make_subset(work / f"photos-{args.photos}", args.photos)
    if args.part == "pixels":
        pixel_effects(data)
        return 0
    db = work / "defences.duckdb"
    levels = [int(x) for x in args.levels.split(",")]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if "plain" not in configs:
        configs.insert(0, "plain")
    run_ids, seconds = {}, {}
    if args.tabulate_only:
        from robustlab.defences import defence_label

        runs = Store(db).runs().sort_values("started_at")
        for rec in runs.to_dict("records"):
            name = defence_label((rec["config"] or {}).get("defence")) or "plain"
            if name in configs and rec["model_spec"] == args.model:
                run_ids[name] = rec["run_id"]
                seconds[name] = float("nan")
        configs = [c for c in configs if c in run_ids]
    for name in configs:
        if args.tabulate_only:
            break
        preprocess, tta = CONFIGS[name]
        start = time.perf_counter()
        res = robustlab.evaluate(
            args.model,
            data,
            suite="imagenet-c",
            levels=levels,
            db=db,
            labels_csv=data / "labels.csv",
            preprocess=preprocess,
            tta=tta,
            workers=args.workers,
            progress=False,
        )
        seconds[name] = time.perf_counter() - start
        run_ids[name] = res.run_id
        print(f"{name}: run {res.run_id} in {seconds[name]:.0f} s", file=sys.stderr)
    tables = common_cells(Store(db), run_ids)
    base = tables["plain"]
    n = int(base.loc[base["shift"] == "clean", "n"].iloc[0])
    n_cells = int(base.loc[base["shift"] != "clean", "n"].sum())
    print(
        f"\n{args.model}, {n} photos x 15 corruptions x severities {args.levels} "
        f"({n_cells} corrupted images in every configuration); CE baseline: the plain "
        f"{args.model} on the same images\n"
    )
    print(
        "| configuration | clean error % | mean corruption error % | mCE % | relative mCE % "
        "| evaluation time s |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in configs:
        cells = tables[name]
        ce = corruption_errors(
            cells[["shift", "level", "error"]], base[["shift", "level", "error"]]
        )
        m = mce(ce)
        clean = float(cells.loc[cells["shift"] == "clean", "error"].iloc[0])
        shifted = float(cells.loc[cells["shift"] != "clean", "error"].mean())
        print(
            f"| {name} | {100 * clean:.1f} | {100 * shifted:.1f} | {100 * m['mce']:.1f} | "
            f"{100 * m['relative_mce']:.1f} | {seconds[name]:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
