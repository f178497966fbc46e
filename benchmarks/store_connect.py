"""What opening the results database costs per operation: a DuckDB instance per operation
(``duckdb.connect`` and ``close``) with the file's tables checked on every read (robustlab
before 2026-11-29) against one instance per process that ATTACHes the file for each
operation (:mod:`robustlab.store.engine`) and checks a file again only when it changed.

Usage:
    PYTHONPATH=src python benchmarks/store_connect.py [--db FILE] [--repeats 5] [--ops 50]

Without ``--db`` it first stores a small run (lite0 on the repository's compact photos,
clean and one corruption at one severity) in a temporary database. It times, in this
process, both ways interleaved, the median of the repeats:

- one read operation (``Store.runs()``), ``--ops`` times;
- one write operation (``Store.finish_run`` of the stored run, as a resumed run does);
- ``robustlab results`` and ``robustlab report`` on the database, in-process (``main``).

Process CPU time and wall time; the ratio is instance-per-operation / attach.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import robustlab.store.connection as connection  # noqa: E402
from robustlab.cli import main  # noqa: E402
from robustlab.store import Store  # noqa: E402

PHOTOS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "shared-mini"
PHOTOS = PHOTOS / "imagenet-samples"


def _instance_per_operation(duckdb, path, *, read_only, threads=1):
    """The old way: a whole DuckDB instance for the one operation."""
    con = duckdb.connect(str(path), read_only=read_only, config={"threads": threads})
    con.execute("SET enable_progress_bar = false").fetchall()
    return con, con.close


class _Forgetful(dict):
    """The old way checked the file's tables on every read: remember no passed check."""

    def __setitem__(self, key, value) -> None:
        pass


# way -> (how the file is opened, the memory of passed read checks)
WAYS = {
    "instance per operation": (_instance_per_operation, _Forgetful()),
    "attach": (connection.attach, connection._PASSED),
}


def _quiet(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    if rc:
        raise SystemExit(f"robustlab {' '.join(argv)} failed with {rc}")


def _time(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main_(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ops", type=int, default=50)
    args = ap.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="store_connect-"))
    db = args.db
    if db is None:
        db = scratch / "bench.duckdb"
        _quiet(
            ["evaluate", "lite0", "--data", str(PHOTOS), "--suite", "imagenet-c"]
            + ["--shift", "gaussian_noise", "--level", "3", "--db", str(db)]
            + ["--workers", "0", "--no-progress"]
        )
    store = Store(db)
    run = store.runs().iloc[0]
    tasks = {
        f"read (Store.runs) x{args.ops}": lambda: [store.runs() for _ in range(args.ops)],
        "write (finish_run)": lambda: store.finish_run(run["run_id"], status="finished"),
        "robustlab results": lambda: _quiet(["results", "--db", str(db)]),
        "robustlab report": lambda: _quiet(
            ["report", "--db", str(db), "--out", str(scratch / "report.html")]
        ),
    }
    print(f"database: {db} ({db.stat().st_size / 1e6:.1f} MB)")
    print("| operation | instance per operation (wall / CPU) | attach (wall / CPU) | ratio (CPU) |")
    print("| --- | --- | --- | --- |")
    for name, task in tasks.items():
        got: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
        for _ in range(args.repeats + 1):  # the first round warms both up and is dropped
            for way, (opener, passed) in WAYS.items():
                connection.attach, connection._PASSED = opener, passed  # type: ignore[assignment]
                got[way].append(_time(task))
        connection.attach, connection._PASSED = WAYS["attach"]  # type: ignore[assignment]
        med = {
            w: (statistics.median(t[0] for t in v[1:]), statistics.median(t[1] for t in v[1:]))
            for w, v in got.items()
        }
        old, new = med["instance per operation"], med["attach"]
        print(
            f"| {name} | {old[0] * 1e3:.1f} / {old[1] * 1e3:.1f} ms "
            f"| {new[0] * 1e3:.1f} / {new[1] * 1e3:.1f} ms | x{old[1] / new[1]:.1f} |"
        )


if __name__ == "__main__":
    main_()
