"""Speed of robustlab's ImageNet-C corruptions against the original code, on one core.

Times every corruption x severity on 224x224 crops of ``../shared/data`` photos, prepared
the reference way (bilinear shorter side 256, center crop 224). Ours runs in this process;
the reference (PyPI ``imagenet-c`` 0.0.3, in the separate environment that
``setup_reference_env.sh`` builds) runs in a child process, ``_reference_worker.py``. The two
are interleaved corruption by corruption, so both see the same machine load, and both are
single-threaded (thread env vars set to 1 before numpy loads, ``cv2.setNumThreads(1)``).

Each cell's time is the median over ``--repeats`` of the mean seconds per call over the
``--images``; seeding happens outside the timed region. The first call of each corruption
(numba compilation, lazy file loads) is timed on its own and reported as first-call cost,
then one warm-up call per severity precedes the timed repeats. Times are process CPU time
by default (``--clock wall`` for elapsed time; both are recorded in ``--json``): on a
shared machine the wall clock mostly measures the run queue, while CPU time is the one-core
cost the targets are about. The summary prints the other clock's totals too.

Targets (issue 2), per 224x224 image on one core:
  * the 75 common cells (15 corruptions x 5 severities) take at most 0.25 s in total;
  * glass_blur takes at most 15 ms per call (at every severity);
  * no corruption is slower than the reference (sum of its 5 severities).
Issue 26 item 5 tightens the first: the 75 cells in at most 100 ms, and at least 55x
faster than the reference timed in the same run (SKIP without the reference).

Usage:
    python benchmarks/corruptions.py                      # all corruptions, ours vs reference
    python benchmarks/corruptions.py --corruptions glass_blur,frost --repeats 5
    python benchmarks/corruptions.py --no-reference --json ours.json

Exit status 0 unless ``--strict`` and a target fails (or cannot be checked).
"""

from __future__ import annotations

import os

# Single-threaded before numpy, scipy, numba or cv2 create thread pools.
THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "MAGICK_THREAD_LIMIT",
)
for _var in THREAD_VARS:
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_REFENV = HERE / ".refenv"
DEFAULT_DATA = ROOT.parent / "shared" / "data"

# The reference's order (imagenet_c.corruption_tuple): the index is part of the seed rule.
REFERENCE_ORDER = (
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
    "speckle_noise",
    "gaussian_blur",
    "spatter",
    "saturate",
)
COMMON = REFERENCE_ORDER[:15]
EXTRA = REFERENCE_ORDER[15:]
SEVERITIES = (1, 2, 3, 4, 5)

# Targets, as data: seconds (issue 2), then issue 26 item 5's tighter pair: the 75 cells
# in at most 100 ms and at least 55x faster than the reference timed in the same run.
TARGET_COMMON_TOTAL_S = 0.25
TARGET_GLASS_BLUR_S = 0.015
TARGET_COMMON_TOTAL_26_S = 0.100
TARGET_COMMON_SPEEDUP_26 = 55.0
# What the reference took when the targets were set (issue 2). This machine may be slower
# (load, CPU, build), so the benchmark also prints each target scaled by how much slower the
# reference ran in this very run: load and machine cancel out of that comparison.
REFERENCE_QUIET_COMMON_S = 3.3
REFERENCE_QUIET_GLASS_BLUR_S = 0.46
CROP, RESIZE = 224, 256


# ---------------------------------------------------------------------------- images


def pick_files(data_dir: Path, n: int) -> list[Path]:
    """``n`` photos spread evenly over the sorted sample folder (varied classes and sizes)."""
    folder = data_dir / "imagenet-samples"
    files = sorted(p for p in folder.glob("*") if p.suffix.lower() in (".jpeg", ".jpg", ".png"))
    if not files:
        raise SystemExit(f"error: no photos in {folder}; pass --data DIR (the shared data folder)")
    n = max(1, min(n, len(files)))
    idx = np.linspace(0, len(files) - 1, n).round().astype(int)
    return [files[i] for i in idx]


def prepare_images(files: list[Path]) -> tuple[np.ndarray, str]:
    """Bilinear resize of the shorter side to 256, center crop 224, as the reference data.

    Uses ``robustlab.pipeline.prepare`` (checked bit for bit against the reference data)
    when it exists; otherwise the same steps with Pillow directly.
    """
    from PIL import Image

    try:
        from robustlab.pipeline import prepare
        from robustlab.suites import IMAGENET_C_PROTOCOL
    except ImportError:
        prepare = None
    out = []
    for f in files:
        with Image.open(f) as im:
            rgb = np.asarray(im.convert("RGB"))
        if prepare is not None:
            out.append(prepare(rgb, IMAGENET_C_PROTOCOL))
            continue
        h, w = rgb.shape[:2]
        s = RESIZE / min(w, h)
        size = (RESIZE, round(h * s)) if w <= h else (round(w * s), RESIZE)
        im = Image.fromarray(rgb).resize(size, Image.Resampling.BILINEAR)
        left, top = (size[0] - CROP) // 2, (size[1] - CROP) // 2
        out.append(np.asarray(im.crop((left, top, left + CROP, top + CROP))))
    how = "robustlab.pipeline.prepare" if prepare is not None else "Pillow (pipeline absent)"
    return np.ascontiguousarray(np.stack(out)).astype(np.uint8), how


# ---------------------------------------------------------------------------- timing


def seed_for(i: int, name: str, s: int) -> int:
    """The reference data's seed rule: 1000*image + 10*corruption index + severity."""
    return 1000 * i + 10 * REFERENCE_ORDER.index(name) + s


def time_ours(images: np.ndarray, name: str, severities, repeats: int) -> dict:
    """Time ``robustlab.corrupt`` exactly as the worker times the reference."""
    from robustlab.seeding import make_rng
    from robustlab.shifts.corruptions import corrupt

    def call(x, s, seed):
        rng = make_rng(seed)
        w0, c0 = time.perf_counter(), time.process_time()
        corrupt(x, name, s, seed=rng)
        return time.perf_counter() - w0, time.process_time() - c0

    try:
        w, c = call(images[0], severities[0], seed_for(0, name, severities[0]))
        first = {"wall": w, "cpu": c}
        for s in severities:
            call(images[0], s, seed_for(0, name, s))
        times = {str(s): [] for s in severities}
        for _ in range(repeats):
            for s in severities:
                tw = tc = 0.0
                for i, x in enumerate(images):
                    w, c = call(x, s, seed_for(i, name, s))
                    tw += w
                    tc += c
                times[str(s)].append({"wall": tw / len(images), "cpu": tc / len(images)})
    except Exception as exc:  # one broken corruption must not hide the others' numbers
        return {"name": name, "error": f"{type(exc).__name__}: {exc}"}
    return {"name": name, "first_call": first, "times": times, "error": None}


class Reference:
    """The reference worker as a child process speaking one JSON object per line."""

    def __init__(self, python: Path, images_path: Path):
        env = dict(os.environ)
        env.pop("PYTHONPATH", None)  # keep robustlab's environment out of the reference's
        # stderr goes to a file: a pipe nobody reads could fill up and stall the worker.
        self.log = open(images_path.with_suffix(".stderr.txt"), "w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [str(python), str(HERE / "_reference_worker.py"), str(images_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=str(HERE),
        )
        hello = self._read()
        self.versions = hello.get("versions", {})

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            self.log.seek(0)
            last = (self.log.read().strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"reference worker exited ({self.proc.returncode}): {last}")
        return json.loads(line)

    def time(self, name: str, severities, repeats: int) -> dict:
        req = {
            "name": name,
            "index": REFERENCE_ORDER.index(name),
            "severities": list(severities),
            "repeats": repeats,
        }
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


# ---------------------------------------------------------------------------- summary


def cell_median(result: dict | None, s: int, clock: str) -> float | None:
    if not result or result.get("error"):
        return None
    return statistics.median(r[clock] for r in result["times"][str(s)])


def cell_spread(result: dict | None, s: int, clock: str) -> float | None:
    """(max - min) / median over repeats: how much this cell's time moved between repeats."""
    if not result or result.get("error"):
        return None
    v = [r[clock] for r in result["times"][str(s)]]
    m = statistics.median(v)
    return (max(v) - min(v)) / m if m > 0 else 0.0


def total_per_repeat(results: dict, names, clock: str) -> list[float] | None:
    """Sum over all cells of ``names`` for each repeat (None if any is missing)."""
    per = None
    for n in names:
        r = results.get(n)
        if not r or r.get("error"):
            return None
        for s in SEVERITIES:
            v = [x[clock] for x in r["times"][str(s)]]
            per = v if per is None else [a + b for a, b in zip(per, v)]
    return per


def fmt_ms(v: float | None) -> str:
    return f"{'-':>9}" if v is None else f"{v * 1e3:9.2f}"


def fmt_x(ours: float | None, ref: float | None) -> str:
    if ours is None or ref is None or ours <= 0:
        return "-"
    return f"x{ref / ours:.1f}" if ref >= ours else f"x{ref / ours:.2f} SLOWER"


def parse_names(spec: str) -> list[str]:
    groups = {"all": REFERENCE_ORDER, "common": COMMON, "extra": EXTRA}
    names: list[str] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in groups:
            names.extend(groups[part])
        elif part in REFERENCE_ORDER:
            names.append(part)
        else:
            raise SystemExit(
                f"error: unknown corruption {part!r}; use all, common, extra or "
                f"names from: {', '.join(REFERENCE_ORDER)}"
            )
    return [n for n in REFERENCE_ORDER if n in set(names)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--images", type=int, default=4, help="number of photos (default 4)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timed passes over all images per cell; the median is reported (default 3)",
    )
    ap.add_argument(
        "--corruptions",
        default="all",
        help="comma list of names, or all / common / extra (default all)",
    )
    ap.add_argument("--no-reference", action="store_true", help="time ours only")
    ap.add_argument(
        "--refenv",
        type=Path,
        default=Path(os.environ.get("ROBUSTLAB_REFENV", DEFAULT_REFENV)),
        help="reference venv built by setup_reference_env.sh (default benchmarks/.refenv)",
    )
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="shared data folder")
    ap.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default="cpu",
        help="clock for the table and targets (both are recorded): cpu = process CPU "
        "time, the one-core cost, robust to other processes on a shared machine "
        "(default); wall = elapsed time",
    )
    ap.add_argument("--json", type=Path, help="write all raw timings and the summary here")
    ap.add_argument(
        "--strict", action="store_true", help="exit 1 when a target fails or cannot be checked"
    )
    args = ap.parse_args(argv)
    if args.images < 1 or args.repeats < 1:
        ap.error("--images and --repeats must be at least 1")
    names = parse_names(args.corruptions)
    clock = args.clock

    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:
        cv2 = None
    from robustlab.shifts.corruptions import list_corruptions

    implemented = set(list_corruptions("all"))
    missing = [n for n in names if n not in implemented]

    files = pick_files(args.data, args.images)
    images, how = prepare_images(files)
    print(
        f"images: {len(images)} x {images.shape[1]}x{images.shape[2]} via {how}: "
        f"{', '.join(f.name for f in files)}"
    )
    print(f"repeats: {args.repeats}; clock: {clock}; threads: 1 (env + cv2.setNumThreads)")
    load0 = os.getloadavg()

    ref = None
    ref_note = None
    ref_versions = None
    tmp = tempfile.TemporaryDirectory(prefix="rl-bench-")
    if args.no_reference:
        ref_note = "reference not run (--no-reference): ours only, no ratios"
    else:
        py = args.refenv / "bin" / "python"
        if not py.exists():
            ref_note = (
                f"REFERENCE ENVIRONMENT NOT FOUND at {args.refenv}: ours only, no ratios. "
                f"Build it with: bash benchmarks/setup_reference_env.sh"
            )
        else:
            npy = Path(tmp.name) / "images.npy"
            np.save(npy, images)
            try:
                ref = Reference(py, npy)
                ref_versions = ref.versions
            except (RuntimeError, OSError, ValueError) as exc:
                ref_note = f"REFERENCE WORKER FAILED TO START ({exc}): ours only, no ratios"
    if ref_note:
        print(ref_note)
    elif ref is not None:
        print(
            "reference: imagenet-c 0.0.3 in "
            + str(args.refenv)
            + "; "
            + ", ".join(
                f"{k} {v.split()[0] if k != 'imagemagick' else v.split()[1]}"
                for k, v in ref.versions.items()
            )
        )
    if missing:
        print(f"not implemented yet in robustlab ({len(missing)}): {', '.join(missing)}")
    print(flush=True)

    ours: dict[str, dict] = {}
    theirs: dict[str, dict] = {}
    t_start = time.perf_counter()
    for n in names:
        if ref is not None:
            try:
                theirs[n] = ref.time(n, SEVERITIES, args.repeats)
            except (RuntimeError, OSError, ValueError) as exc:
                ref_note = f"REFERENCE WORKER DIED during {n} ({exc}): later corruptions ours only"
                print(ref_note, flush=True)
                ref.close()
                ref = None
        if n in implemented:
            ours[n] = time_ours(images, n, SEVERITIES, args.repeats)
        print(f"  timed {n}", file=sys.stderr, flush=True)
    if ref is not None:
        ref.close()
    tmp.cleanup()
    elapsed = time.perf_counter() - t_start
    load1 = os.getloadavg()

    # ------------------------------------------------------------------ table
    unit = f"ms per call, median of repeats, {'process CPU' if clock == 'cpu' else 'wall'} time"
    print(
        f"{'corruption':<18} {'sev':>3} {'ours':>9} {'reference':>9}  {'speedup':<14} "
        f"{'noise o/r':>9}   [{unit}]"
    )
    rows = []
    for n in names:
        o, r = ours.get(n), theirs.get(n)
        if o is None and r is None:
            print(f"{n:<18}   - not implemented in robustlab; reference not run")
            continue
        for tag, res in (("ours", o), ("reference", r)):
            if res and res.get("error"):
                print(f"{n:<18} ERROR in {tag}: {res['error']}")
        for s in SEVERITIES:
            mo, mr = cell_median(o, s, clock), cell_median(r, s, clock)
            so, sr = cell_spread(o, s, clock), cell_spread(r, s, clock)
            noise = "/".join("-" if v is None else f"{v * 100:.0f}%" for v in (so, sr))
            print(f"{n:<18} {s:>3} {fmt_ms(mo)} {fmt_ms(mr)}  {fmt_x(mo, mr):<14} {noise:>9}")
            rows.append(
                {
                    "corruption": n,
                    "severity": s,
                    "ours_s": mo,
                    "reference_s": mr,
                    "ours_spread": so,
                    "reference_spread": sr,
                }
            )
        so_ = [cell_median(o, s, clock) for s in SEVERITIES]
        sr_ = [cell_median(r, s, clock) for s in SEVERITIES]
        to = None if None in so_ else sum(so_)
        tr = None if None in sr_ else sum(sr_)
        print(f"{n:<18} {'sum':>3} {fmt_ms(to)} {fmt_ms(tr)}  {fmt_x(to, tr):<14}")
    print()

    # first-call cost
    print(
        "first call (compilation, lazy loads), ms:  "
        + "; ".join(
            f"{n} {fmt_ms(ours[n]['first_call'][clock]).strip()}"
            + (
                f" (ref {fmt_ms(theirs[n]['first_call'][clock]).strip()})"
                if n in theirs and not theirs[n].get("error")
                else ""
            )
            for n in names
            if n in ours and not ours[n].get("error")
        )
    )
    print()

    # ------------------------------------------------------------------ totals and targets
    common = [n for n in names if n in COMMON]
    ours_common = [n for n in common if n in ours and not ours[n].get("error")]
    tot_o = total_per_repeat(ours, ours_common, clock) if ours_common else None
    tot_r_same = total_per_repeat(theirs, ours_common, clock) if theirs and ours_common else None
    tot_r_all = total_per_repeat(theirs, common, clock) if theirs else None

    def med(v):
        return None if v is None else statistics.median(v)

    def rng_txt(v):
        return "" if not v else f" (repeats {min(v) * 1e3:.0f}..{max(v) * 1e3:.0f} ms)"

    all15 = len(ours_common) == len(COMMON)
    label = "75 common cells" if all15 else f"{len(ours_common) * 5} of 75 common cells"
    if ours_common:
        print(
            f"total, {label}, per image: ours {med(tot_o) * 1e3:.0f} ms{rng_txt(tot_o)}"
            + (
                f"; reference on the same cells {med(tot_r_same) * 1e3:.0f} ms"
                f"{rng_txt(tot_r_same)}; "
                f"speedup {fmt_x(med(tot_o), med(tot_r_same))}"
                if tot_r_same
                else ""
            )
        )
    other = "wall" if clock == "cpu" else "cpu"
    oo = total_per_repeat(ours, ours_common, other) if ours_common else None
    orr = total_per_repeat(theirs, ours_common, other) if theirs and ours_common else None
    if oo:
        print(
            f"  same cells by {other} time: ours {med(oo) * 1e3:.0f} ms"
            + (f", reference {med(orr) * 1e3:.0f} ms" if orr else "")
        )
    if tot_r_all and len(common) == len(COMMON):
        print(
            f"reference, all 75 common cells, per image: {med(tot_r_all) * 1e3:.0f} ms"
            f"{rng_txt(tot_r_all)}"
        )
    spreads = [
        v for row in rows for v in (row["ours_spread"], row["reference_spread"]) if v is not None
    ]
    if spreads:
        print(
            f"noise: per-cell (max-min)/median over {args.repeats} repeats: median "
            f"{statistics.median(spreads) * 100:.0f}%, max {max(spreads) * 100:.0f}%; "
            f"load average {load0[0]:.2f} -> {load1[0]:.2f} on {os.cpu_count()} CPUs; "
            f"run took {elapsed:.0f} s"
        )
    print()

    checks = []  # (name, status, detail); status PASS / FAIL / SKIP

    if set(COMMON) <= set(names):
        if all15:
            v = med(tot_o)
            checks.append(
                (
                    "common-75-total",
                    "PASS" if v <= TARGET_COMMON_TOTAL_S else "FAIL",
                    f"{v * 1e3:.0f} ms <= {TARGET_COMMON_TOTAL_S * 1e3:.0f} ms",
                )
            )
            checks.append(
                (
                    "common-75-total-issue26",
                    "PASS" if v <= TARGET_COMMON_TOTAL_26_S else "FAIL",
                    f"{v * 1e3:.0f} ms <= {TARGET_COMMON_TOTAL_26_S * 1e3:.0f} ms",
                )
            )
            if tot_r_same:
                x = med(tot_r_same) / v
                checks.append(
                    (
                        "common-75-speedup-issue26",
                        "PASS" if x >= TARGET_COMMON_SPEEDUP_26 else "FAIL",
                        f"x{x:.1f} >= x{TARGET_COMMON_SPEEDUP_26:.0f} (reference "
                        f"{med(tot_r_same) * 1e3:.0f} ms in this run)",
                    )
                )
            else:
                checks.append(
                    ("common-75-speedup-issue26", "SKIP", "no reference timing in this run")
                )
        else:
            checks.append(
                (
                    "common-75-total",
                    "SKIP",
                    f"only {len(ours_common)} of 15 common corruptions implemented"
                    + (f"; partial {med(tot_o) * 1e3:.0f} ms" if tot_o else ""),
                )
            )
    if "glass_blur" in names:
        g = ours.get("glass_blur")
        if g and not g.get("error"):
            worst = max(cell_median(g, s, clock) for s in SEVERITIES)
            checks.append(
                (
                    "glass_blur-per-call",
                    "PASS" if worst <= TARGET_GLASS_BLUR_S else "FAIL",
                    f"slowest severity {worst * 1e3:.1f} ms <= {TARGET_GLASS_BLUR_S * 1e3:.0f} ms",
                )
            )
        else:
            checks.append(("glass_blur-per-call", "SKIP", "glass_blur not implemented or failed"))
    for n in names:
        o, r = ours.get(n), theirs.get(n)
        if o is None or o.get("error"):
            checks.append(
                (f"{n}-vs-reference", "SKIP", "not implemented" if o is None else "ours failed")
            )
            continue
        if r is None or r.get("error"):
            checks.append((f"{n}-vs-reference", "SKIP", "no reference timing"))
            continue
        to = sum(cell_median(o, s, clock) for s in SEVERITIES)
        tr = sum(cell_median(r, s, clock) for s in SEVERITIES)
        slow = [s for s in SEVERITIES if cell_median(o, s, clock) > cell_median(r, s, clock)]
        detail = f"ours {to * 1e3:.1f} ms vs reference {tr * 1e3:.1f} ms over 5 severities"
        if slow:
            detail += f"; slower at severity {','.join(map(str, slow))}"
        checks.append((f"{n}-vs-reference", "PASS" if to <= tr else "FAIL", detail))
    for name, status, detail in checks:
        print(f"{status} {name}: {detail}")
    # Machine-independent view of the absolute targets (informational, not a check): scale
    # each by how much slower the reference ran here than when the targets were set.
    if tot_r_all and len(common) == len(COMMON):
        slow = med(tot_r_all) / REFERENCE_QUIET_COMMON_S
        line = (
            f"INFO machine factor {slow:.2f} (reference 75 cells {med(tot_r_all) * 1e3:.0f} ms "
            f"here vs {REFERENCE_QUIET_COMMON_S * 1e3:.0f} ms in issue 2): common-75-total target "
            f"scaled {TARGET_COMMON_TOTAL_S * slow * 1e3:.0f} ms"
        )
        if all15:
            line += f", ours {med(tot_o) * 1e3:.0f} ms"
        print(line)
    gr = theirs.get("glass_blur")
    if gr and not gr.get("error"):
        slow = (
            statistics.mean(cell_median(gr, s, clock) for s in SEVERITIES)
            / REFERENCE_QUIET_GLASS_BLUR_S
        )
        g = ours.get("glass_blur")
        line = (
            f"INFO glass_blur factor {slow:.2f} (reference mean "
            f"{slow * REFERENCE_QUIET_GLASS_BLUR_S * 1e3:.0f} ms/call here vs "
            f"{REFERENCE_QUIET_GLASS_BLUR_S * 1e3:.0f} in issue 2): target scaled "
            f"{TARGET_GLASS_BLUR_S * slow * 1e3:.1f} ms"
        )
        if g and not g.get("error"):
            line += f", ours worst {max(cell_median(g, s, clock) for s in SEVERITIES) * 1e3:.1f} ms"
        print(line)
    if ref_note:
        print(ref_note)

    if args.json:
        payload = {
            "clock": clock,
            "images": [f.name for f in files],
            "prepared_with": how,
            "repeats": args.repeats,
            "severities": list(SEVERITIES),
            "targets": {
                "common_total_s": TARGET_COMMON_TOTAL_S,
                "glass_blur_s": TARGET_GLASS_BLUR_S,
                "common_total_issue26_s": TARGET_COMMON_TOTAL_26_S,
                "common_speedup_issue26": TARGET_COMMON_SPEEDUP_26,
            },
            "machine": {
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "loadavg_start": load0,
                "loadavg_end": load1,
            },
            "versions": {"ours": _our_versions(cv2), "reference": ref_versions},
            "reference_note": ref_note,
            "not_implemented": missing,
            "ours": ours,
            "reference": theirs,
            "cells": rows,
            "checks": [{"name": a, "status": b, "detail": c} for a, b, c in checks],
        }
        args.json.write_text(json.dumps(payload, indent=1))
        print(f"\nwrote {args.json}")

    failed = [c for c in checks if c[1] != "PASS"]
    return 1 if args.strict and (failed or ref_note) else 0


def _our_versions(cv2) -> dict:
    import scipy
    import skimage

    v = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-image": skimage.__version__,
        "opencv": cv2.__version__ if cv2 else None,
    }
    try:
        import numba

        v["numba"] = numba.__version__
    except ImportError:
        pass
    return v


if __name__ == "__main__":
    sys.exit(main())
