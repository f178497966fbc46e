"""Fidelity and CPU speed of the batched torch corruptions against the exact path.

For every corruption x severity, on real photos prepared with the ImageNet-C protocol
(bilinear shorter side 256, centre crop 224), images are made as a model sees them on the
fly (shift, then the protocol's JPEG round trip at quality 85) and lite0 classifies them.
Three comparisons, each of an image source B against the exact path with global seed 0
(A: ``pipeline.apply_shift`` + ``pipeline.as_stored`` image by image, the reference's
bytes), can be selected with ``--compare``:

* ``null``: B is the exact path with global seed 1, an independent draw of the REFERENCE
  itself. It measures how far two draws of the same corruption land apart, i.e. what any
  implementation with its own random numbers can at best achieve per cell.
* ``matched``: B is ``batched.apply_matched``, the batched arithmetic fed the exact path's
  own draws (same seed): about 0 when the batched arithmetic is right. Random corruptions
  not yet split into draw + apply + replay (no ``parts`` on their registry entry) are "not split".
* ``torch``: B is ``batched.apply`` with its own torch draws, the path runs use.

Per cell it prints both errors, the paired difference B - A in points, its standard error
from the per-photo paired differences (sd(c_A - c_B) / sqrt(n), c = 1 if top-1 correct),
the 95 % interval, a verdict against the issue-11 contract (|difference| <= 1.5 points):
PASS when the interval lies within +-1.5, FAIL when it lies wholly outside (a demonstrated
violation), else INCONCLUSIVE (too few photos to decide), the share of photos whose
correctness differs ("flips"), the mean absolute pixel difference and each side's shift
time per image. A pooled line per corruption averages its levels, and a summary counts
verdicts and the cells that miss +-1.5 by point estimate (each cell's FAIL is a 2.5 %
one-sided test, so over 45 cells about one FAIL can come by chance). ``--draws K`` gives every photo
K sample ids (``id/draw0`` ...) and averages its correctness over them, which shrinks the
random part of the standard error. Photos are processed in chunks and the cumulative
tables are printed after each chunk, so a run stopped early still reports.

Usage:
    python benchmarks/torch_shifts.py --n 500 [--chunk 50] [--compare null,matched,torch]
        [--corruptions common|random|all|extra|a,b] [--levels 1,2,3,4,5] [--draws 1]
        [--device cpu|cuda] [--jpeg device|cpu] [--threads 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "imagenet-samples"
COMPARISONS = ("null", "matched", "torch")
BOUND = 1.5  # points of top-1 error, issue 11
Z95 = 1.959963984540054  # two-sided 95 % normal quantile
NOT_SPLIT = "not split"
VERDICTS = ("PASS", "FAIL", "INCONCLUSIVE")


# ---------------------------------------------------------------- statistics (pure numpy)


def paired_stats(c_a, c_b, bound: float = BOUND) -> dict:
    """Errors of A and B, their paired difference B - A and its 95 % interval, in points.

    Args:
        c_a, c_b: Per-photo correctness of the two sides, same photos in the same order:
            0/1, or the mean over a photo's draws.
        bound: The contract's bound on |difference|.

    The standard error is that of a mean of the n per-photo differences c_A - c_B
    (sample standard deviation / sqrt(n)): the photos are the random sample, and pairing
    removes the photo-to-photo difficulty that both sides share. When no photo flips
    (identical outcomes, as for deterministic corruptions) that estimate is 0, so the
    interval is widened to the rule of three instead: at most 3/n of the photos could flip
    at 95 % confidence, moving the difference by at most 300/n points.
    """
    a = np.asarray(c_a, dtype=np.float64)
    b = np.asarray(c_b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two 1-d arrays of the same length, got {a.shape} {b.shape}")
    n = a.size
    d = 100.0 * (a - b)  # error_B - error_A per photo, points
    diff = float(d.mean()) if n else float("nan")
    se = float(d.std(ddof=1) / np.sqrt(n)) if n > 1 else float("inf")
    lo, hi = diff - Z95 * se, diff + Z95 * se
    if se == 0.0:  # no photo flipped: a zero-width interval would claim certainty
        lo, hi = diff - 300.0 / n, diff + 300.0 / n  # rule of three on the flip rate
    return {
        "n": n,
        "error_a": 100.0 - 100.0 * float(a.mean()) if n else float("nan"),
        "error_b": 100.0 - 100.0 * float(b.mean()) if n else float("nan"),
        "diff": diff,
        "se": se,
        "lo": lo,
        "hi": hi,
        "verdict": verdict(lo, hi, bound),
        "flips": float(np.abs(a - b).mean()) * 100.0 if n else float("nan"),
    }


def verdict(lo: float, hi: float, bound: float = BOUND) -> str:
    """PASS: the interval lies within +-bound; FAIL: wholly outside it; else INCONCLUSIVE."""
    if -bound <= lo and hi <= bound:
        return "PASS"
    if lo > bound or hi < -bound:
        return "FAIL"
    return "INCONCLUSIVE"


def pooled(diffs, ses, bound: float = BOUND) -> dict:
    """Mean difference over a corruption's levels with its standard error, the levels
    taken as independent (sqrt(sum se^2) / L), and the verdict of its 95 % interval."""
    d = np.asarray(diffs, dtype=np.float64)
    s = np.asarray(ses, dtype=np.float64)
    mean = float(d.mean())
    se = float(np.sqrt((s**2).sum()) / d.size)
    lo, hi = mean - Z95 * se, mean + Z95 * se
    return {
        "levels": int(d.size),
        "diff": mean,
        "se": se,
        "lo": lo,
        "hi": hi,
        "verdict": verdict(lo, hi, bound),
    }


def summary(rows: list[dict], bound: float = BOUND) -> dict:
    """Verdict counts, cells missing +-bound by point estimate, and the spread of the
    differences against their standard errors (RMS of both: for draws of one implementation
    the differences are pure noise, so the two should agree if the SE formula is right)."""
    scored = [r for r in rows if r.get("status") != NOT_SPLIT]
    out = {v: sum(r["verdict"] == v for r in scored) for v in VERDICTS}
    out["not_split"] = len(rows) - len(scored)
    out["cells"] = len(scored)
    out["miss_point"] = sum(abs(r["diff"]) > bound for r in scored)
    if scored:
        diffs = np.array([r["diff"] for r in scored])
        ses = np.array([r["se"] for r in scored])
        out["mean_diff"] = float(diffs.mean())
        out["rms_diff"] = float(np.sqrt((diffs**2).mean()))
        out["rms_se"] = float(np.sqrt((ses**2).mean()))
        out["worst"] = float(np.abs(diffs).max())
    return out


# ---------------------------------------------------------------- accumulation


@dataclass
class Side:
    """One comparison in one cell, accumulated over chunks: per-photo correctness of A
    (exact, seed 0) and of B, pixel difference and shift CPU time of each side."""

    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    mad: float = 0.0  # sum over images of the per-image mean abs pixel difference
    t_a: float = 0.0
    t_b: float = 0.0
    images: int = 0
    status: str = ""

    def row(self, name: str, level: int) -> dict:
        base = {"corruption": name, "level": level}
        if self.status:
            return {**base, "status": self.status}
        st = paired_stats(self.a, self.b)
        per = max(self.images, 1)
        return {
            **base,
            **st,
            "mad": self.mad / per,
            "a_s": self.t_a / per,
            "b_s": self.t_b / per,
            "c_a": [round(v, 4) for v in self.a],  # per-photo correctness, to re-analyse
            "c_b": [round(v, 4) for v in self.b],
        }


def select_corruptions(spec: str) -> list[str]:
    """``common``/``all``/``extra``/a family or glob, ``random`` (the common corruptions
    that draw random numbers: the only ones whose cells can differ), or ``a,b``."""
    from robustlab.shifts.corruptions import list_corruptions
    from robustlab.shifts.registry import get_shift

    if "," in spec:
        return spec.split(",")
    if spec == "random":
        return [c for c in list_corruptions("common") if not get_shift(c).deterministic]
    return list_corruptions(spec)


def is_unsplit(name: str) -> bool:
    """A random corruption with a batched version that has no draw/apply/replay parts yet:
    ``apply_matched`` would silently fall back to torch draws."""
    from robustlab.shifts.registry import get_shift

    sh = get_shift(name, batched=True)
    return not sh.deterministic and sh.batched is not None and sh.parts is None


def draw_ids(ids: list[str], draws: int) -> list[list[str]]:
    """The sample ids of each draw (the plain ids when there is one draw)."""
    if draws == 1:
        return [ids]
    return [[f"{sid}/draw{k}" for sid in ids] for k in range(draws)]


class Bench:
    """Makes each side's images for a chunk and scores them with lite0."""

    def __init__(self, args):
        import torch

        from robustlab.models import load_model
        from robustlab.suites import IMAGENET_C_PROTOCOL

        self.torch = torch
        self.dev = torch.device(args.device)
        self.jpeg = args.jpeg
        self.protocol = IMAGENET_C_PROTOCOL
        self.model = load_model("lite0", device=args.device, batch_size=args.chunk)

    def correct(self, batch, labels) -> np.ndarray:
        _, ids = self.model.predict_topk(batch, 1)
        # predict_topk answers on the CPU whatever the model's device; the labels may be on it
        return (ids[:, 0].cpu() == labels.cpu()).numpy().astype(np.float64)

    def exact(self, prepared, ids, name, level, seed):
        from robustlab.pipeline import apply_shift, as_stored

        ex = np.stack(
            [
                as_stored(apply_shift(img, sid, name, level, seed), self.protocol)
                for img, sid in zip(prepared, ids)
            ]
        )
        return self.torch.from_numpy(ex).permute(0, 3, 1, 2).contiguous().to(self.dev)

    def batched(self, x, ids, name, level, matched: bool):
        from robustlab.shifts.batched import apply, apply_matched, jpeg_roundtrip

        fn = apply_matched if matched else apply
        out = jpeg_roundtrip(fn(name, level, x, ids, seed=0), self.protocol.jpeg_quality, self.jpeg)
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize()
        return out

    def side_b(self, comparison, prepared, x, ids, name, level):
        if comparison == "null":
            return self.exact(prepared, ids, name, level, 1)
        return self.batched(x, ids, name, level, matched=comparison == "matched")


def timed(fn, *args):
    t0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t0


def run_cell(bench, acc, comparisons, chunk_data, name, level, draws) -> None:
    """Add one chunk of one (corruption, level) cell to every selected comparison."""
    prepared, x, ids, labels = chunk_data
    n = len(ids)
    sums_a = np.zeros(n)
    sums_b = {c: np.zeros(n) for c in comparisons}
    for dids in draw_ids(ids, draws):
        ex, t_ex = timed(bench.exact, prepared, dids, name, level, 0)
        sums_a += bench.correct(ex, labels)
        for comp in comparisons:
            side = acc[comp][(name, level)]
            if side.status:
                continue
            out, t_b = timed(bench.side_b, comp, prepared, x, dids, name, level)
            sums_b[comp] += bench.correct(out, labels)
            side.mad += float((out.int() - ex.int()).abs().float().mean()) * n
            side.t_a += t_ex
            side.t_b += t_b
            side.images += n
    for comp in comparisons:
        side = acc[comp][(name, level)]
        if not side.status:
            side.a.extend(sums_a / draws)
            side.b.extend(sums_b[comp] / draws)


# ---------------------------------------------------------------- report


def fmt_cell(r: dict) -> str:
    if r.get("status"):
        return f"| {r['corruption']} | {r['level']} | {r['status']} |" + " |" * 11
    speed = r["a_s"] / r["b_s"] if r["b_s"] else float("nan")
    return (
        f"| {r['corruption']} | {r['level']} | {r['n']} | {r['error_a']:.1f} | "
        f"{r['error_b']:.1f} | {r['diff']:+.1f} | {r['se']:.2f} | "
        f"[{r['lo']:+.1f}, {r['hi']:+.1f}] | {r['verdict']} | {r['flips']:.1f} | "
        f"{r['mad']:.2f} | {r['a_s'] * 1e3:.1f} ms | {r['b_s'] * 1e3:.1f} ms | x{speed:.2f} |"
    )


def pooled_rows(rows: list[dict]) -> list[dict]:
    """One pooled line per corruption over its scored levels."""
    out = []
    for name in dict.fromkeys(r["corruption"] for r in rows):
        mine = [r for r in rows if r["corruption"] == name and not r.get("status")]
        if mine:
            p = pooled([r["diff"] for r in mine], [r["se"] for r in mine])
            out.append({"corruption": name, **p})
    return out


def report_comparison(comp: str, rows: list[dict]) -> dict:
    """Print one comparison's cell table, pooled lines and summary; return them."""
    print(f"\n### {comp}: {DESCRIBE[comp]}; diff = error B - error A")
    print(
        "| corruption | level | n | error A % | error B % | diff | SE | 95 % CI | verdict "
        "| flips % | mean abs px diff | A s/img | B s/img | A/B time |"
    )
    print("| --- " * 14 + "|")
    for r in rows:
        print(fmt_cell(r))
    pools = pooled_rows(rows)
    for p in pools:
        print(
            f"# pooled {p['corruption']} ({p['levels']} levels): {p['diff']:+.2f} "
            f"+- {p['se']:.2f} [{p['lo']:+.2f}, {p['hi']:+.2f}] {p['verdict']}"
        )
    s = summary(rows)
    line = (
        f"# {comp}: {s['cells']} cells: PASS {s['PASS']}, FAIL {s['FAIL']}, "
        f"INCONCLUSIVE {s['INCONCLUSIVE']}"
        + (f", not split {s['not_split']}" if s["not_split"] else "")
        + f"; miss +-{BOUND} by point estimate: {s['miss_point']} of {s['cells']}"
    )
    if s["cells"]:
        line += (
            f"; mean diff {s['mean_diff']:+.2f}, worst {s['worst']:.1f}, "
            f"RMS diff {s['rms_diff']:.2f} vs RMS SE {s['rms_se']:.2f}; "
            f"chance FAILs if every true difference were 0: <= {0.025 * s['cells']:.1f}"
        )
    print(line, flush=True)
    return {"rows": rows, "pooled": pools, "summary": s}


DESCRIBE = {
    "null": "B = exact, seed 1 (an independent draw of the reference); A = exact, seed 0",
    "matched": "B = batched apply on the exact path's replayed draws; A = exact, seed 0",
    "torch": "B = batched apply with its own torch draws; A = exact, seed 0",
    "torch-vs-both": "B = batched apply with its own torch draws; A = mean of exact seeds 0, 1",
}


def against_both_seeds(null_rows: list[dict], torch_rows: list[dict]) -> list[dict]:
    """The torch path against the mean of the exact path's two draws (seeds 0 and 1).

    The null and torch comparisons share side A (exact, seed 0), so a lucky or unlucky
    seed-0 draw moves both differences the same way. Averaging the two exact draws per
    photo halves the reference's own draw variance and removes that shared term; the
    paired SE stays that of the per-photo differences.
    """
    null = {(r["corruption"], r["level"]): r for r in null_rows}
    rows = []
    for t in torch_rows:
        r = null.get((t["corruption"], t["level"]))
        if r is None or t.get("status") or r.get("status"):
            continue
        ref = (np.asarray(r["c_a"], float) + np.asarray(r["c_b"], float)) / 2
        stats = paired_stats(ref, t["c_b"])
        rows.append(
            {
                **t,
                **stats,
                "c_a": ref.tolist(),
            }
        )
    return rows


def report(acc, clean_ok: int, done: int) -> dict:
    """Print the cumulative tables of every comparison; return them for --json."""
    rows = {comp: [side.row(*cell) for cell, side in cells.items()] for comp, cells in acc.items()}
    return report_rows(rows, 100 - 100 * clean_ok / done, done)


def report_rows(rows: dict[str, list[dict]], clean_error: float, done: int) -> dict:
    """Print the tables of every comparison from its cell rows (live or from --from-json)."""
    print(f"\n## {done} photos; clean error {clean_error:.2f} %", flush=True)
    out = {}
    for comp, comp_rows in rows.items():
        out[comp] = report_comparison(comp, comp_rows)
    if "null" in out and "torch" in out:
        sn, st = out["null"]["summary"], out["torch"]["summary"]
        print(
            f"# key: cells missing +-{BOUND} by point estimate: null (reference vs itself) "
            f"{sn['miss_point']} of {sn['cells']}, torch {st['miss_point']} of {st['cells']}"
        )
        out["torch-vs-both"] = report_comparison(
            "torch-vs-both", against_both_seeds(out["null"]["rows"], out["torch"]["rows"])
        )
    sys.stdout.flush()
    return out


# ---------------------------------------------------------------- main


def photos(root: Path, n: int, masks: Path | None = None):
    """``n`` labelled samples spread evenly over the sorted folder (with their masks from
    ``masks``, for torch_scenes.py)."""
    from robustlab.data.sources import discover

    samples = discover(root, labels_csv=root / "labels.csv", masks=masks)
    step = max(1, len(samples) // max(1, n))
    return list(samples)[::step][:n]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=Path, default=DATA)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--chunk", type=int, default=50, help="photos per batch and per table")
    ap.add_argument("--compare", default=",".join(COMPARISONS), help="null,matched,torch")
    ap.add_argument("--corruptions", default="common", help="common|random|all|extra|a,b")
    ap.add_argument("--levels", default="1,2,3,4,5")
    ap.add_argument("--draws", type=int, default=1, help="sample ids per photo, averaged")
    ap.add_argument("--device", default="cpu", help="where the torch shifts and lite0 run")
    ap.add_argument("--jpeg", default="cpu", choices=("device", "cpu"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        help="print the tables of saved --json runs (several: their cells merged, e.g. one "
        "process per corruption)",
    )
    args = ap.parse_args(argv)
    args.compare = [c for c in args.compare.split(",") if c]
    bad = sorted(set(args.compare) - set(COMPARISONS))
    if bad or not args.compare:
        ap.error(f"--compare takes {','.join(COMPARISONS)}, got {bad or 'nothing'}")
    if args.draws < 1:
        ap.error("--draws must be at least 1")
    return args


def load_chunk(bench, chunk, space):
    from robustlab.pipeline import load_prepared

    torch = bench.torch
    prepared = [load_prepared(s, bench.protocol).rgb for s in chunk]
    ids = [s.id for s in chunk]
    labels = torch.as_tensor([space.index_of(s.class_name) for s in chunk]).to(bench.dev)
    x = torch.from_numpy(np.stack(prepared)).permute(0, 3, 1, 2).contiguous().to(bench.dev)
    return prepared, x, ids, labels


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.from_json:
        records = [json.loads(f.read_text()) for f in args.from_json]
        saved: dict[str, list[dict]] = {}
        for record in records:
            for c in COMPARISONS:
                saved.setdefault(c, []).extend(record["comparisons"].get(c, {}).get("rows", []))
        # Each file's clean error is over the photos it reached; the table gives the first.
        report_rows(
            {c: rows for c, rows in saved.items() if rows},
            records[0]["clean_error"],
            min(r["photos"] for r in records),
        )
        return 0
    import torch

    from robustlab.data.labels import get_label_space
    from robustlab.shifts.batched import codec_name

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.photos.is_dir():
        print(f"SKIP: no photos at {args.photos}")
        return 0
    names = select_corruptions(args.corruptions)
    levels = [int(v) for v in args.levels.split(",")]
    samples = photos(args.photos, args.n)
    space = get_label_space("imagenet1k")
    bench = Bench(args)
    print(
        f"# {len(samples)} photos x {args.draws} draws, {len(names)} corruptions x {levels}, "
        f"compare {','.join(args.compare)}, device {bench.dev}, "
        f"JPEG {codec_name(bench.dev, args.jpeg)}, torch threads {torch.get_num_threads()}",
        flush=True,
    )
    cells = [(c, lv) for c in names for lv in levels]
    acc = {comp: {cell: Side() for cell in cells} for comp in args.compare}
    if "matched" in acc:
        for (name, _), side in acc["matched"].items():
            side.status = NOT_SPLIT if is_unsplit(name) else ""
    clean_ok = done = 0
    for start in range(0, len(samples), args.chunk):
        chunk = samples[start : start + args.chunk]
        data = load_chunk(bench, chunk, space)
        clean_ok += int(bench.correct(data[1], data[3]).sum())
        for name, lv in cells:
            run_cell(bench, acc, args.compare, data, name, lv, args.draws)
        done += len(chunk)
        tables = report(acc, clean_ok, done)
        if args.json:
            record = {
                "photos": done,
                "draws": args.draws,
                "device": str(bench.dev),
                "clean_error": 100 - 100 * clean_ok / done,
                "comparisons": tables,
            }
            args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
