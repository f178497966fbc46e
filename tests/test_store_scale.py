"""``results`` and ``report`` read aggregates from the database, never a run's rows (issue
35, item 4), and ``results --summary`` tells runs apart (issue 37, item 5).

The database holds two runs written through the store's own writer by the scale
benchmark's builder (``benchmarks/store_scale.py``, at 400 images of 8 classes x 76
ImageNet-C cells instead of 50,000 x 1,000): lite0 with seed 0 and lite0 with seed 1, on
the same images, so that only the seed tells them apart. The numbers computed in DuckDB
must equal the same functions of the rows in pandas, to the last bit; and the Python
memory the commands' data takes must stay far below that of the rows themselves
(``benchmarks/README.md`` has the time and memory at 1, 3 and 10 full runs).
"""

from __future__ import annotations

import importlib.util
import io
import math
import sys
import tracemalloc
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from robustlab.cli import main as cli
from robustlab.metrics.compare import compare_runs
from robustlab.metrics.summary import summarise_run
from robustlab.store import Store
from robustlab.workflows.results import compare_table, summary_table

pytestmark = pytest.mark.xdist_group("store_scale")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "store_scale.py"
IMAGES, CLASSES = 400, 8
RUNS = (0, 3)  # the builder's lite0 seed 0 and lite0 seed 1


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("store_scale_bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
        root = tmp_path_factory.mktemp("scale")
        path = root / "scale.duckdb"
        for index in RUNS:
            bench.add_run(path, index, IMAGES, str(root / "val"), n_classes=CLASSES)
    finally:
        del sys.modules[spec.name]
    return path


def _same(a, b) -> bool:
    """Equal values, NaN and None alike (a missing number is missing in both)."""
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    return a == b


def test_summary_and_compare_from_the_database_equal_the_functions_of_the_rows(db):
    store = Store(db)
    table, _ = summary_table(store)
    runs = store.runs()
    assert len(table) == len(RUNS) and store.count() == len(RUNS) * IMAGES * 76
    for run in runs.to_dict("records"):
        want = summarise_run(run, store.predictions([run["run_id"]]))
        got = table[table["run_id"] == run["run_id"][:8]].iloc[0].to_dict()
        assert want.keys() == got.keys()
        diff = {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])}
        assert not diff
    a, b = runs["run_id"]
    got, _ = compare_table(store, a, b, seed=3, n_resamples=300)
    want = compare_runs(
        store.predictions([a]), store.predictions([b]), np.random.default_rng(3), n_resamples=300
    )
    assert len(got) == 77 and got.iloc[-1]["shift"] == "all shifted cells"
    pd.testing.assert_frame_equal(got, want)


def _csv(*argv: str) -> pd.DataFrame:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli(list(argv)) == 0, err.getvalue()
    return pd.read_csv(io.StringIO(out.getvalue()), dtype={"run_id": str})


def test_summary_and_the_reports_first_table_tell_two_seeds_apart(db):
    """Two runs of lite0 over the same cells of the same images differ only in their seed:
    the summary (and the report's first table, which shows its rows) says so."""
    from test_report import as_records, tables_of

    from robustlab.workflows.report.gather import gather
    from robustlab.workflows.report.overview import summary
    from robustlab.workflows.report.page import Page

    table = _csv("results", "--db", str(db), "--summary", "--format", "csv")
    assert list(table["model"]) == ["lite0", "lite0"]
    assert sorted(table["seed"]) == [0, 1]
    assert list(table["protocol"]) == ["imagenet-c", "imagenet-c"]
    text = io.StringIO()
    with redirect_stdout(text), redirect_stderr(io.StringIO()):
        assert cli(["results", "--db", str(db), "--summary"]) == 0
    head = text.getvalue().splitlines()[0].split()
    assert head.index("seed") < head.index("protocol") < head.index("path")

    page = Page()
    summary(page, gather(db, n_resamples=20, regression=False), "now")
    shown = as_records(tables_of("".join(page.parts))["run-summary"])
    assert {r["Run"]["text"]: r["Seed"]["text"] for r in shown} == dict(
        zip(table["run_id"], table["seed"].astype(str))
    )
    assert {r["Protocol"]["text"] for r in shown} == {"imagenet-c"}


def test_results_and_report_data_hold_aggregates_not_the_rows(db, monkeypatch):
    """The Python memory that ``results --summary``, ``--compare`` and the report's data
    take is a small fraction of what the rows they summarise take as a DataFrame: counts
    per cell, class and image come from DuckDB (a full ImageNet-C run is 3.8 M rows)."""
    from robustlab.workflows.report import fits
    from robustlab.workflows.report.gather import gather

    store = Store(db)
    a, b = store.runs()["run_id"]
    cols = ["run_id", "sample_id", "shift", "level", "correct"]
    rows = int(store.predictions(columns=cols).memory_usage(deep=True).sum())
    # The per-image logistic model reads its rows by design, up to a cap on its size
    # (MAX_LOGIT_ENTRIES, which 3.8 M rows are over); here it stays out as it does there.
    monkeypatch.setattr(fits, "MAX_LOGIT_ENTRIES", 0)
    calls = {
        "results --summary": lambda: summary_table(store),
        "results --compare": lambda: compare_table(store, a, b, n_resamples=50),
        "report data": lambda: gather(db, n_resamples=50),
    }
    peaks = {}
    for name, call in calls.items():
        call()  # imports and caches first
        tracemalloc.start()
        try:
            call()
            peaks[name] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert max(peaks.values()) < rows / 4, (peaks, rows)


def test_the_databases_reads_draw_no_progress_bar(db):
    """DuckDB draws a progress bar on the terminal for any query over 2 s (reading ten full
    runs takes longer); robustlab's connections switch it off."""
    with Store(db).connect(read_only=True) as con:
        assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False


def test_the_grid_scores_an_even_spread_of_samples_not_every_one(db, monkeypatch):
    """Choosing the example images scores samples over every run's cells; past
    SCORED_SAMPLES samples it scores every k-th sorted id only (ten full runs: 2,000 of
    50,000 images), so the pick costs the same whatever the number of images."""
    from robustlab.workflows.report import grid

    store = Store(db)
    ids = list(store.runs()["run_id"])
    every = sorted(store.predictions(ids[:1], columns=["sample_id"], shifts=["clean"])["sample_id"])
    assert len(grid._sample_scores(store, ids)) == IMAGES  # under the limit: all of them
    monkeypatch.setattr(grid, "SCORED_SAMPLES", 100)
    scores = grid._sample_scores(store, ids)
    assert sorted(scores["sample_id"]) == every[:: -(-IMAGES // 100)]
    assert (scores["n_cells"] == 76).all()
    picked = grid.pick_samples(store, ids, k=3)
    assert len(picked) == 3 and set(picked) <= set(scores["sample_id"])


@pytest.mark.slow
def test_the_page_draws_grids_up_to_its_picture_budget(db, tmp_path, monkeypatch):
    """Every group of runs (data root, seed, protocol) has its grid of its own: the two
    seeds here, ten runs over four seeds at the benchmark's size (6.5 MB of pictures).
    A group whose picture budget would take the page past PAGE_PICTURES is named in a
    note instead, so the page stops growing with the groups."""
    import shutil

    import duckdb

    from robustlab.workflows.report import grid
    from robustlab.workflows.report.gather import gather

    photos = sorted(
        (Path(__file__).parent / "fixtures" / "shared-mini" / "imagenet-samples").glob("*.JPEG")
    )
    copy = tmp_path / "scale.duckdb"
    shutil.copyfile(db, copy)
    root = tmp_path / "val"
    with duckdb.connect(str(copy)) as con:
        con.execute("UPDATE runs SET data_root = ?", [str(root)])
        ids = [r[0] for r in con.execute("SELECT DISTINCT sample_id FROM predictions").fetchall()]
    for i, sid in enumerate(sorted(ids)):
        (root / sid).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(photos[i % len(photos)], root / sid)
    monkeypatch.setattr(grid, "PAGE_PICTURES", grid.PICTURE_BUDGET)  # room for one group
    grids, notes = grid.build_grids(gather(copy, n_resamples=1, regression=False))
    assert len(grids) == 1 and sum(len(cells) for _, cells in grids[0].rows) == 76
    assert grids[0].seed == 0
    assert any("left out: the page shows 76 pictures already (at most 80)" in n for n in notes)
