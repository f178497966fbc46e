"""``results`` and ``report`` at the benchmark's real size: wall time and peak memory.

Usage:
    python benchmarks/store_scale.py build   --dir DIR [--runs 1,3,10] [--images 50000]
    python benchmarks/store_scale.py photos  --dir DIR --from ../shared/data/imagenet-samples
    python benchmarks/store_scale.py measure --dir DIR [--runs 1,3,10]
        [--commands results,summary,compare,report,resume] [--repeats 1]

``build`` writes one database per entry of ``--runs`` (``DIR/runs-<n>.duckdb``), each
holding that many full ImageNet-C runs: ``--images`` images (50,000: ImageNet's
validation set, 1,000 classes x 50) x 76 cells (clean + 15 corruptions x 5 severities),
3.8 M prediction rows a run. The rows go through the store's own writer
(``Store.write_predictions``, one transaction per 500 images, sample-major as an
evaluation writes them) under run records shaped like ``evaluate``'s, started and finished
with ``Store.start_run`` / ``Store.finish_run``. They are realistic: a label and class
name per image, top-5 ids and descending probabilities, ``correct`` / ``correct5``
consistent with them, and accuracies that fall with severity as AlexNet's errors do,
scaled per model, over images of persistent difficulty (an image hard when clean stays
hard under a corruption, as in real runs, which the paired bootstraps depend on). The
larger databases are copies of the smaller ones plus more runs, so the 1-run database's
run is the first run of the others.

``measure`` runs each command in a child process, as a user would, and prints its wall
time, its CPU time and peak resident memory (``ru_utime + ru_stime`` and ``ru_maxrss`` of
the child, from ``os.wait4``), with the size of what it wrote. On a shared machine the
wall time measures the run queue as much as the command (at load 20 on 2 cores, wall is
several times CPU); every command is single-threaded (the store's DuckDB connections use
one thread), so its CPU time is what it takes on one idle core:

* ``results``: ``robustlab results`` (every cell of every run, CE / mCE rows).
* ``summary``: ``robustlab results --summary``.
* ``compare``: ``robustlab results --compare`` of the first two runs (the 1-run database
  compares its run with itself).
* ``report``: ``robustlab report`` with its defaults. Without ``photos`` the runs' data
  root does not exist and the example grid is left out with a note; ``photos`` puts a
  photo under every sample id (hard links to a few hundred photos), so that the grid is
  drawn as for a user.
* ``resume``: ``evaluate``'s resume check on the first run, finished (3.8 M rows): the
  runner's plan (``Store.start_run``, the stored keys, the known skips), ``execute``'s
  checks against the runs already stored, the end of the run and the per-cell table it
  returns, with the real lite0 model loaded, in a child that first builds the plan from
  the stored record (not timed: hashing 50,000 photos is not what this measures; see
  ``content_hash.py``).

Asserts nothing; prints the targets of issue 35 beside the numbers. Mind the disk: the
10-run database takes several GB (``du`` is printed after each build).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robustlab.shifts.corruptions import list_corruptions

# ImageNet-C's 15 corruptions, from the registry (the light import: no torch)
CORRUPTIONS = tuple(list_corruptions("common"))
CELLS = [("clean", "0")] + [(c, str(s)) for c in CORRUPTIONS for s in range(1, 6)]
# (model spec, seed, clean top-1, error ratio to AlexNet on the corrupted cells)
MODELS = [
    ("lite0", 0, 0.752, 0.72),
    ("lite1", 0, 0.766, 0.69),
    ("lite2", 0, 0.776, 0.66),
    ("lite0", 1, 0.751, 0.73),
    ("lite1", 1, 0.767, 0.70),
    ("lite2", 1, 0.775, 0.67),
    ("lite0", 2, 0.753, 0.72),
    ("lite1", 2, 0.765, 0.69),
    ("lite2", 2, 0.777, 0.66),
    ("lite0", 3, 0.750, 0.73),
]
CHUNK = 500  # images per write transaction
TARGETS = {
    "rss_gb": 1.5,
    "report_s": 120.0,
    "summary_s": 30.0,
    "resume_s": 10.0,
    "html_mb": 10.0,
}


def _run_id(spec: str, seed: int) -> str:
    return hashlib.blake2b(f"store-scale {spec} {seed}".encode(), digest_size=8).hexdigest()


def _record(spec: str, seed: int, data_root: str, n_images: int):
    """A run record shaped like evaluate's for an ImageNet-C run on the fly."""
    from robustlab.store import RunRecord

    prep = {
        "crop_pct": 0.875,
        "input_size": 224,
        "interpolation": "bicubic",
        "mean": [0.5, 0.5, 0.5],
        "resize_mode": "shorter",
        "std": [0.5, 0.5, 0.5],
    }
    protocol = {
        "crop": 224,
        "format": "jpeg",
        "interpolation": "bilinear",
        "jpeg_quality": 85,
        "resize": 256,
    }
    inputs = {
        "compile": None,
        "defence": None,
        "generated": None,
        "images": "0" * 32,
        "labels": "1" * 32,
        "masks": None,
        "masks_dir": None,
        "n": n_images,
        "precision": "torch.float32",
        "preprocessing": prep,
        "protocol": protocol,
        "seed": seed,
        "source": "on-the-fly",
    }
    config = {
        "cells": [list(c) for c in CELLS],
        "generated_root": "",
        "inputs": inputs,
        "labels_csv": None,
        "masks": None,
        "model": {
            "adapter": "torch",
            "architecture": f"timm:tf_efficientnet_{spec}",
            "label_space": {"kind": "full", "name": "imagenet1k", "num_classes": 1000},
            "preprocessing": prep,
            "spec": spec,
        },
        "protocol": {
            **protocol,
            "label": "imagenet-c: 256/224 bilinear, model's resize",
            "name": "imagenet-c",
            "override": None,
        },
        "source": "on-the-fly",
    }
    return RunRecord(
        run_id=_run_id(spec, seed),
        model_spec=spec,
        weights_hash=hashlib.blake2b(spec.encode(), digest_size=8).hexdigest(),
        suite="imagenet-c",
        suite_version="1",
        data_root=data_root,
        data_fingerprint="f" * 32,
        label_space="imagenet1k",
        preprocessing={"model": prep, "protocol": protocol},
        seed=seed,
        versions={"robustlab": "store-scale"},
        config=config,
    )


def _cell_accuracy(clean: float, ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Top-1 and top-5 accuracy per cell: the clean one, then 1 - ratio x AlexNet's error
    (capped below the clean accuracy); top-5 errors about half the top-1 errors."""
    from robustlab.metrics.mce import alexnet_cells

    alex = {(s, lv): e for s, lv, e in alexnet_cells().itertuples(index=False)}
    top1 = np.array(
        [clean if s == "clean" else min(clean - 0.01, 1 - ratio * alex[(s, lv)]) for s, lv in CELLS]
    )
    return top1, 1 - (1 - top1) * 0.45


def _rows(rng, ids, labels, wnids, z, top1, top5) -> dict:
    """Prediction rows of some images (sample-major, every cell of an image together)."""
    from scipy.special import ndtri

    n, k = len(ids), len(CELLS)
    # correct iff an image's difficulty plus this cell's noise is under the cell's quantile
    score = (z[:, None] + rng.standard_normal((n, k))).ravel()
    correct = score < (np.sqrt(2) * ndtri(top1))[None, :].repeat(n, 0).ravel()
    correct5 = correct | (score < (np.sqrt(2) * ndtri(top5))[None, :].repeat(n, 0).ravel())
    lab = np.repeat(labels, k)
    m = n * k
    top = rng.integers(0, 999, size=(m, 5))
    top += top >= lab[:, None]  # wrong guesses never hit the label by chance
    top[correct, 0] = lab[correct]
    slot = rng.integers(1, 5, size=m)
    hit5 = correct5 & ~correct
    top[hit5, slot[hit5]] = lab[hit5]
    probs = np.sort(rng.dirichlet(np.ones(6), size=m)[:, :5], axis=1)[:, ::-1]
    return {
        "sample_id": np.repeat(ids, k),
        "shift": [s for s, _ in CELLS] * n,
        "level": [lv for _, lv in CELLS] * n,
        "label": lab,
        "class_name": np.repeat(wnids[labels], k),
        "top5_ids": top,
        "top5_probs": probs,
        "correct": correct,
        "correct5": correct5,
    }


def _samples(n_images: int, n_classes: int):
    """(sorted sample ids, their labels, the permutation that sorted them): ImageNet
    validation names under their class folders, as many images per class."""
    from robustlab.data.labels import get_label_space

    wnids = np.asarray(get_label_space("imagenet1k").wnids)
    per_class = max(1, n_images // n_classes)
    labels = np.arange(n_images) // per_class % n_classes
    ids = np.array(
        [f"{wnids[lab]}/ILSVRC2012_val_{i + 1:08d}.JPEG" for i, lab in enumerate(labels)]
    )
    order = np.argsort(ids)
    return ids[order], labels[order], order


def photos(args) -> None:
    """Fill the runs' data root with a photo under every sample id (hard links to the
    photos of ``--from``, cycled; copies where links fail), so that ``report`` draws its
    example grid as it does for a user: scoring the samples over every run, re-rendering
    the picked ones under every cell, embedding the pictures."""
    src = sorted(p for p in Path(args.source).iterdir() if p.suffix.lower() in (".jpeg", ".jpg"))
    root = Path(args.dir) / "imagenet-val"
    ids, _, _ = _samples(args.images, 1000)
    for i, sid in enumerate(ids):
        dest = root / sid
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src[i % len(src)], dest)
        except OSError:
            shutil.copyfile(src[i % len(src)], dest)
    print(f"{root}: {len(ids):,} photos ({len(src)} distinct)")


def add_run(db: Path, index: int, n_images: int, data_root: str, n_classes: int = 1000) -> None:
    """Run ``MODELS[index]`` over ``n_images`` images of the first ``n_classes`` ImageNet
    classes (as many images each), through the store's writer, started and finished as
    evaluate does."""
    from robustlab.data.labels import get_label_space
    from robustlab.store import Store

    spec, seed, clean, ratio = MODELS[index]
    wnids = np.asarray(get_label_space("imagenet1k").wnids)
    ids, labels, order = _samples(n_images, n_classes)
    # the images' difficulty is the data's, the same for every run
    z = np.random.default_rng(12345).standard_normal(n_images)[order]
    top1, top5 = _cell_accuracy(clean, ratio)
    rng = np.random.default_rng(1000 + index)
    store = Store(db)
    record = _record(spec, seed, data_root, n_images)
    store.start_run(record)
    for lo in range(0, n_images, CHUNK):
        sl = slice(lo, lo + CHUNK)
        store.write_predictions(
            record.run_id, _rows(rng, ids[sl], labels[sl], wnids, z[sl], top1, top5)
        )
    store.finish_run(record.run_id, status="finished", n_samples=n_images, skipped=[])


def build(args) -> None:
    out = Path(args.dir)
    out.mkdir(parents=True, exist_ok=True)
    data_root = str(out / "imagenet-val")  # never created: the photos are not needed here
    done = 0
    previous: Path | None = None
    for n in sorted(args.runs):
        db = out / f"runs-{n}.duckdb"
        if db.exists():
            print(f"{db} exists; left as it is")
            previous, done = db, n
            continue
        if previous is not None:
            shutil.copyfile(previous, db)
        for i in range(done, n):
            t0 = time.perf_counter()
            add_run(db, i, args.images, data_root)
            size = db.stat().st_size / 1e9
            print(
                f"{db.name}: run {i + 1}/{n} ({MODELS[i][0]} seed {MODELS[i][1]}) "
                f"{args.images * len(CELLS):,} rows in {time.perf_counter() - t0:.0f} s, "
                f"file {size:.2f} GB",
                flush=True,
            )
        previous, done = db, n


# ----------------------------------------------------------------------------- measure
def _samples_and_labels(db: Path, run_id: str):
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT sample_id, any_value(label), any_value(class_name) FROM predictions "
            "WHERE run_id = ? AND shift = 'clean' GROUP BY sample_id ORDER BY sample_id",
            [run_id],
        ).fetchall()


def resume_child(db: str, run_id: str) -> None:
    """The body of the ``resume`` measurement (runs in its own process)."""
    from robustlab.data.sources import Sample
    from robustlab.models import load_model
    from robustlab.execution.plan import RunPlan
    from robustlab.execution.tasks import CellImages
    from robustlab.store import RunRecord, Store
    from robustlab.suites import get_suite
    from robustlab.workflows.evaluate.execute import execute, run_table
    from robustlab.workflows.evaluate.request import ExecutionSpec

    store = Store(db)
    row = store.get_run(run_id)
    record = RunRecord(**{k: row[k] for k in RunRecord.__dataclass_fields__})
    record.started_at = record.finished_at = None
    rows = _samples_and_labels(Path(db), run_id)
    root = Path(record.data_root)
    samples = [Sample(sid, root / sid, name, int(lab)) for sid, lab, name in rows]
    model = load_model("lite0")
    suite = get_suite("imagenet-c")
    protocol = suite.protocol
    plan = RunPlan(
        model=model,
        samples=samples,
        labels=[s.label for s in samples],
        cells=[(s, lv) for s, lv in CELLS],
        protocol=protocol,
        suite=suite,
        record=record,
        images=CellImages(protocol, record.seed),
        label_space=model.label_space,
    )
    t0, c0 = time.perf_counter(), time.process_time()
    summary = execute(plan, store, ExecutionSpec(workers=0, progress=False))
    table = run_table(store, run_id)
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert summary.resumed and summary.n_written == 0, summary
    assert summary.n_already_done == len(samples) * len(CELLS), summary
    print(
        json.dumps({"inner_s": round(took, 2), "inner_cpu_s": round(cpu, 2), "cells": len(table)})
    )


def _child(argv: list[str]) -> tuple[float, float, float, int, str, str]:
    """Run ``argv``; (wall s, CPU s, peak RSS GB, exit status, stdout, stderr)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024**2,
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )


def _command(name: str, db: Path, runs: list[str], tmp: Path) -> tuple[list[str], Path | None]:
    cli = [sys.executable, "-m", "robustlab.cli"]
    if name == "results":
        return [*cli, "results", "--db", str(db), "-o", str(tmp / "results.txt")], None
    if name == "summary":
        out = tmp / "summary.txt"
        return [*cli, "results", "--db", str(db), "--summary", "-o", str(out)], out
    if name == "compare":
        a, b = runs[0], runs[1 % len(runs)]
        out = tmp / "compare.txt"
        return [*cli, "results", "--db", str(db), "--compare", a, b, "-o", str(out)], out
    if name == "report":
        out = tmp / "report.html"
        return [*cli, "report", "--db", str(db), "--out", str(out), "--no-progress"], out
    if name == "resume":
        code = (
            "import sys; sys.path.insert(0, sys.argv[3]); import store_scale; "
            "store_scale.resume_child(sys.argv[1], sys.argv[2])"
        )
        here = str(Path(__file__).resolve().parent)
        return [sys.executable, "-c", code, str(db), runs[0], here], None
    raise SystemExit(f"unknown command {name}")


def _verdict(name: str, wall: float, cpu: float, rss: float, size_mb, n_runs: int) -> str:
    """The targets of issue 35 that apply to this line (time on wall and CPU clocks)."""
    marks = []
    if n_runs >= 10:
        marks.append(f"rss {'ok' if rss < TARGETS['rss_gb'] else 'OVER'} <{TARGETS['rss_gb']} GB")
    limit = {"report": "report_s", "summary": "summary_s", "resume": "resume_s"}.get(name)
    if limit:
        t = TARGETS[limit]
        marks.append(
            f"<{t:.0f} s: wall {'ok' if wall < t else 'OVER'}, cpu {'ok' if cpu < t else 'OVER'}"
        )
    if name == "report" and size_mb is not None:
        marks.append(f"html {'ok' if size_mb < TARGETS['html_mb'] else 'OVER'} <10 MB")
    return ", ".join(marks)


def measure(args) -> None:
    import duckdb

    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores", flush=True)
    header = f"{'runs':>4}  {'rows':>6}  {'command':<8} {'wall s':>7} {'cpu s':>7} {'peak GB':>8}  output"
    print(header)
    for n in sorted(args.runs):
        db = Path(args.dir) / f"runs-{n}.duckdb"
        with duckdb.connect(str(db), read_only=True) as con:
            runs = [
                r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()
            ]
            rows = con.execute("SELECT count(*) FROM predictions").fetchone()[0]
        for name in args.commands:
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="store-scale-") as t:
                    tmp = Path(t)
                    # resume writes to the database (the run's status): work on a copy
                    target = db
                    if name == "resume":
                        target = tmp / db.name
                        shutil.copyfile(db, target)
                    argv, out = _command(name, target, runs, tmp)
                    load = os.getloadavg()[0]
                    wall, cpu, rss, rc, stdout, stderr = _child(argv)
                    size = out.stat().st_size / 1e6 if out and out.exists() else None
                    extra = f"{size:.2f} MB" if size is not None else stdout.strip()[-60:]
                    check_wall, check_cpu = wall, cpu
                    if name == "resume" and rc == 0:  # the check itself, not the set-up
                        inner = json.loads(stdout.strip().splitlines()[-1])
                        check_wall, check_cpu = inner["inner_s"], inner["inner_cpu_s"]
                    if rc != 0:
                        extra = f"exit {rc}: {stderr.strip().splitlines()[-1:]}"
                    verdict = _verdict(name, check_wall, check_cpu, rss, size, n)
                    print(
                        f"{n:>4}  {rows / 1e6:>5.1f}M  {name:<8} {wall:>7.1f} {cpu:>7.1f} "
                        f"{rss:>8.2f}  {extra}  [{verdict}; load {load:.1f}]",
                        flush=True,
                    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    b = sub.add_parser("build")
    m = sub.add_parser("measure")
    ph = sub.add_parser("photos")
    for p in (b, m, ph):
        p.add_argument("--dir", required=True)
        p.add_argument("--runs", type=lambda s: [int(x) for x in s.split(",")], default=[1, 3, 10])
    for p in (b, ph):
        p.add_argument("--images", type=int, default=50_000)
    ph.add_argument("--from", dest="source", required=True, help="a folder of JPEG photos")
    m.add_argument(
        "--commands",
        type=lambda s: s.split(","),
        default=["results", "summary", "compare", "report", "resume"],
    )
    m.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    {"build": build, "measure": measure, "photos": photos}[args.what](args)


if __name__ == "__main__":
    main()
