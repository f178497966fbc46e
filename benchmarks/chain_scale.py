"""The whole chain at growing size: generate -> evaluate from the folder -> results -> report.

Usage:
    PYTHONPATH=src python benchmarks/chain_scale.py --dir /work/scratch-chain \
        [--photos 100,1000,10000] [--shift gaussian_noise] [--level 3] [--model lite0]

Issue 35 item 6 asks how each step's cost grows with the work. For each size N the script
builds a flat folder of N photos with a labels CSV from the shared photos (hard links; past
the 500 photos each is linked again under a new name, ``r001_<file>``, so the larger sizes
repeat content), then runs, each in a child process as a user would type it:

    robustlab generate imagenet-c --data photos-N --out gen-N --shift S --level L
    robustlab evaluate MODEL --data gen-N --db chain-N.duckdb
    robustlab results --db chain-N.duckdb -o results-N.txt
    robustlab report --db chain-N.duckdb --out report-N.html

and prints per step the wall time, the CPU time of the process tree (``ru_utime +
ru_stime`` from ``os.wait4``, or the sum over the tree's processes sampled from /proc when
larger: a forkserver's workers are never reaped into the former), the peak RSS of the largest process
(``ru_maxrss``) and the peak of the summed RSS of the whole process tree (worker processes
included; /proc sampled every 0.2 s), then the slope between consecutive sizes: milliseconds
of wall and CPU time per extra photo, and the exponent k of cost ~ N^k (1: linear, 0: flat).
A Markdown table for benchmarks/README.md closes the output (``--table LOG ...`` makes it
from saved outputs of separate invocations). Asserts nothing: the machine
is shared and wall times follow its load (printed with each step).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "imagenet-samples"
STEPS = ("generate", "evaluate", "results", "report")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICK = os.sysconf("SC_CLK_TCK")


def photos(source: Path, out: Path, n: int) -> None:
    """``n`` hard links to the shared photos in ``out``, with their labels CSV."""
    rows = (source / "labels.csv").read_text().splitlines()
    header, body = rows[0], [r for r in rows[1:] if r]
    out.mkdir(parents=True)
    lines = [header]
    for i in range(n):
        row = body[i % len(body)]
        name, rest = row.split(",", 1)
        copy = i // len(body)
        new = name if copy == 0 else f"r{copy:03d}_{name}"
        os.link(source / name, out / new)
        lines.append(f"{new},{rest}")
    (out / "labels.csv").write_text("\n".join(lines) + "\n")


def _tree(root: int, cpu: dict[int, float]) -> int:
    """Bytes resident in ``root`` and its descendants now; their CPU seconds so far into ``cpu``.

    Worker processes that their parent never reaps (a forkserver's children) are missing
    from ``os.wait4``'s CPU time, so the step's CPU time is also summed from these samples.
    """
    parent: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, todo = {root}, [root]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in tree]
        tree.update(kids)
        todo.extend(kids)
    total = 0
    for p in tree:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[p] = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime
    return total


def _child(argv: list[str]) -> dict:
    """Run ``argv``: wall s, CPU s, largest process's peak RSS GB, tree's peak RSS GB."""
    import subprocess

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
        tree_peak, cpu = 0, {}
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree_peak = max(tree_peak, _tree(proc.pid, cpu))
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        proc.returncode = rc
        err.seek(0)
        tail = err.read().decode(errors="replace").strip().splitlines()[-1:]
    if rc != 0:
        raise SystemExit(f"{' '.join(argv[3:5])} failed (exit {rc}): {tail}")
    return {
        "wall": wall,
        "cpu": max(usage.ru_utime + usage.ru_stime, sum(cpu.values())),
        "rss": usage.ru_maxrss / 1024**2,
        "tree": max(tree_peak / 1024**3, usage.ru_maxrss / 1024**2),
        "load": load,
    }


def chain(work: Path, n: int, args) -> dict[str, dict]:
    data, gen = work / f"photos-{n}", work / f"gen-{n}"
    db, html = work / f"chain-{n}.duckdb", work / f"report-{n}.html"
    for p in (data, gen, db, html, work / f"results-{n}.txt"):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    photos(args.source, data, n)
    cli = [sys.executable, "-m", "robustlab.cli"]
    argvs = {
        "generate": [*cli, "generate", "imagenet-c", "--data", str(data), "--out", str(gen),
                     "--shift", args.shift, "--level", args.level, "--no-progress"],
        "evaluate": [*cli, "evaluate", args.model, "--data", str(gen), "--db", str(db),
                     "--no-progress"],
        "results": [*cli, "results", "--db", str(db), "-o", str(work / f"results-{n}.txt")],
        "report": [*cli, "report", "--db", str(db), "--out", str(html), "--no-progress"],
    }  # fmt: skip
    out = {}
    for step in STEPS:
        m = _child(argvs[step])
        out[step] = m
        print(
            f"{n:>6}  {step:<9} {m['wall']:>8.1f} {m['cpu']:>8.1f} {m['rss']:>7.2f} "
            f"{m['tree']:>7.2f}  load {m['load']:.1f}",
            flush=True,
        )
    out["report"]["html_mb"] = html.stat().st_size / 1e6
    return out


def _slope(a: float, b: float, na: int, nb: int) -> tuple[float, float]:
    """(ms per extra photo, exponent k of cost ~ N^k) between sizes na < nb."""
    per = 1000 * (b - a) / (nb - na)
    k = math.log(b / a) / math.log(nb / na) if a > 0 and b > 0 else float("nan")
    return per, k


def markdown(sizes: list[int], got: dict[int, dict[str, dict]]) -> str:
    pairs = list(zip(sizes, sizes[1:]))
    head = ["step", *(f"{n:,} photos" for n in sizes), *(f"slope {a:,}->{b:,}" for a, b in pairs)]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for step in STEPS:
        cells = [
            f"{got[n][step]['wall']:.1f} / {got[n][step]['cpu']:.1f} s, "
            f"{got[n][step]['rss']:.2f} ({got[n][step]['tree']:.2f}) GB"
            for n in sizes
        ]
        for a, b in pairs:
            wa, wb = got[a][step]["wall"], got[b][step]["wall"]
            ca, cb = got[a][step]["cpu"], got[b][step]["cpu"]
            wper, wk = _slope(wa, wb, a, b)
            cper, ck = _slope(ca, cb, a, b)
            drss = 1000 * (got[b][step]["tree"] - got[a][step]["tree"]) / (b - a)
            cells.append(
                f"{wper:.0f} / {cper:.0f} ms a photo, k {wk:.2f} / {ck:.2f}, "
                f"{drss:+.2f} GB per 1,000"
            )
        lines.append(f"| `{step}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def from_logs(paths: list[Path]) -> dict[int, dict[str, dict]]:
    """The step lines this script printed, read back from saved outputs.

    On a loaded machine the sizes can be run one invocation each (``--photos 3000``, output
    saved) and their table made at the end: ``--table run1.log run2.log``.
    """
    got: dict[int, dict[str, dict]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            f = line.split()
            if len(f) >= 6 and f[0].isdigit() and f[1] in STEPS:
                wall, cpu, rss, tree = map(float, f[2:6])
                got.setdefault(int(f[0]), {})[f[1]] = dict(wall=wall, cpu=cpu, rss=rss, tree=tree)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--table", nargs="+", type=Path, help="only the table, from saved outputs")
    ap.add_argument("--photos", default="100,1000,10000")
    ap.add_argument("--source", type=Path, default=SHARED)
    ap.add_argument("--shift", default="gaussian_noise")
    ap.add_argument("--level", default="3")
    ap.add_argument("--model", default="lite0")
    args = ap.parse_args()
    if args.table:
        got = from_logs(args.table)
        print(markdown(sorted(got), got))
        return
    if args.dir is None:
        ap.error("--dir is required (or --table)")
    sizes = sorted(int(x) for x in args.photos.split(","))
    args.dir.mkdir(parents=True, exist_ok=True)
    print(
        f"{os.cpu_count()} cores; imagenet-c --shift {args.shift} --level {args.level} "
        f"(clean + {len(args.shift.split(','))} shift(s)); model {args.model}"
    )
    print(f"{'photos':>6}  {'step':<9} {'wall s':>8} {'cpu s':>8} {'rss GB':>7} {'tree GB':>7}")
    got = {n: chain(args.dir, n, args) for n in sizes}
    for n in sizes:
        print(f"report-{n}.html: {got[n]['report']['html_mb']:.2f} MB")
    print()
    print(markdown(sizes, got))


if __name__ == "__main__":
    main()
