"""Wall time and imports of ``robustlab --help`` and ``robustlab CMD --help`` (issue 23).

Usage:
    PYTHONPATH=src python benchmarks/cli_help.py [--repeats R] [--src DIR]

``--src`` times another checkout's ``src`` (e.g. one exported with ``git archive``), for a
before/after on the same machine and load.

Each measurement is a fresh interpreter (``python -m robustlab.cli ... --help``), as a user
runs it: interpreter start, imports, parser building and printing. Prints the median and
the fastest of R runs per command, the bare interpreter start for comparison, and which
heavy libraries (numba, cv2, torch, pandas, duckdb, numpy) the command imported. Target:
under 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("numba", "cv2", "torch", "pandas", "duckdb", "numpy")
PROBE = (
    "import sys\n"
    "from robustlab.cli import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    f"print(','.join(m for m in {HEAVY!r} if m in sys.modules) or 'none', file=sys.stderr)\n"
)


def _time(argv: list[str], repeats: int, env: dict) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--src", type=Path, default=SRC)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.src)}
    med, best = _time([sys.executable, "-c", "pass"], args.repeats, env)
    print(f"{'python -c pass':<28} median {med:.3f} s  min {best:.3f} s")
    for cmd in ([], ["evaluate"], ["generate"], ["report"], ["train"], ["synth"]):
        argv = [*cmd, "--help"]
        med, best = _time([sys.executable, "-m", "robustlab.cli", *argv], args.repeats, env)
        heavy = (
            subprocess.run(
                [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True
            )
            .stderr.strip()
            .splitlines()[-1]
        )
        name = " ".join(["robustlab", *argv])
        print(f"{name:<28} median {med:.3f} s  min {best:.3f} s  heavy imports: {heavy}")


if __name__ == "__main__":
    main()
