"""The HTML report, end to end: real lite0 / lite1 evaluations of a few real photos through
``robustlab.evaluate``, then ``build_report`` / ``robustlab report`` on that database, and a
headless Chromium that opens the file, sorts a table and takes a screenshot.

The database holds two models on the same 4 photos x 3 corruptions x 2 severities (lite1
is the CE baseline), so every table, the leaderboard and the plots have something to show.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
from contextlib import redirect_stdout
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from conftest import report_widths, too_wide

import robustlab
from robustlab.cli import main as cli
from robustlab.workflows.report import build_report
from robustlab.store import Store

# One xdist worker runs this module: its module-scoped `world` costs seconds, and
# each worker that ran some of its tests would build it again.
pytestmark = pytest.mark.xdist_group("report")

N_PHOTOS = 4
LEVELS = [1, 3]
CORRUPTIONS = ["gaussian_noise", "brightness", "contrast"]


def _make_folder(src: Path, dst: Path, n: int) -> Path:
    """A flat folder of ``n`` real photos (copies) plus their labels.csv rows."""
    dst.mkdir(parents=True)
    with open(src / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for r in rows:
        shutil.copy(src / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


@pytest.fixture(scope="module")
def models():
    from robustlab.models import load_model

    return {"lite0": load_model("lite0"), "lite1": load_model("lite1")}


@pytest.fixture(scope="module")
def world(samples_dir, tmp_path_factory, models):
    """Two real runs (lite0, lite1) on the same photos, in one database."""
    root = tmp_path_factory.mktemp("report")
    data = _make_folder(samples_dir, root / "photos", N_PHOTOS)
    db = root / "results.duckdb"
    runs = {}
    for spec, model in models.items():
        res = robustlab.evaluate(
            model,
            data,
            suite="imagenet-c",
            shifts=CORRUPTIONS,
            levels=LEVELS,
            db=db,
            workers=0,
            progress=False,
        )
        runs[spec] = res.run_id
    out = root / "report.html"
    result = build_report(db, out, baseline="lite1", n_resamples=200)
    return {
        "root": root,
        "data": data,
        "db": db,
        "runs": runs,
        "out": out,
        "result": result,
        "html": out.read_text(encoding="utf-8"),
    }


@pytest.fixture(scope="module")
def plain_report(world, tmp_path_factory):
    """The report of ``world``'s database without a baseline or grid, built once for the
    tests that read it."""
    out = tmp_path_factory.mktemp("plain") / "r.html"
    return out, build_report(world["db"], out, grid=False, n_resamples=50)


# ---------------------------------------------------------------------------- HTML parsing
class _Tables(HTMLParser):
    """Collects every <table id=...>: header texts and rows of (text, data-sort)."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, dict] = {}
        self._t = None
        self._cell = None
        self._row = None
        self._in_head = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "id" in a:
            self._t = self.tables.setdefault(
                a["id"], {"head": [], "rows": [], "class": a.get("class", "")}
            )
        elif self._t is None:
            return
        elif tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr" and not self._in_head:
            self._row = []
        elif tag in ("td", "th"):
            self._cell = {"text": "", "sort": a.get("data-sort")}

    def handle_endtag(self, tag):
        if self._t is None:
            return
        if tag == "table":
            self._t = None
        elif tag in ("td", "th") and self._cell is not None:
            if self._in_head:
                self._t["head"].append(self._cell["text"].strip())
            elif self._row is not None:
                self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._t["rows"].append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data


def tables_of(html_text: str) -> dict[str, dict]:
    p = _Tables()
    p.feed(html_text)
    return p.tables


def as_records(table: dict) -> list[dict]:
    return [{h: c for h, c in zip(table["head"], row)} for row in table["rows"]]


# ---------------------------------------------------------------------------- content
def test_report_numbers_equal_robustlab_results(world):
    """Every per-cell and CE/mCE number in the report is the one `robustlab results` prints."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert (
            cli(["results", "--db", str(world["db"]), "--baseline", "lite1", "--format", "csv"])
            == 0
        )
    import pandas as pd

    expected = pd.read_csv(io.StringIO(buf.getvalue()), dtype={"level": str})
    got = as_records(tables_of(world["html"])["cells"])
    assert len(got) == len(expected) > 0
    cols = {
        "n": "n",
        "top1": "top1 %",
        "top5": "top5 %",
        "error": "error %",
        "ce": "ce %",
        "relative_ce": "relative_ce %",
    }
    for want, row in zip(expected.to_dict("records"), got):
        assert row["Model"]["text"] == want["model"] and row["Shift"]["text"] == want["shift"]
        assert row["Run"]["text"] == want["run_id"] and row["Level"]["text"] == str(want["level"])
        for col, head in cols.items():
            v, cell = want[col], row[head]
            if pd.isna(v):
                assert cell["sort"] == "" and cell["text"] == ""
            else:
                assert float(cell["sort"]) == pytest.approx(float(v), rel=1e-12, abs=1e-12)
                if col != "n":
                    assert cell["text"] == f"{100 * float(v):.2f}"
    # The mCE shown in the paper table and the leaderboard is results' mCE row.
    mce = expected[expected["shift"].str.startswith("mCE")]
    assert len(mce) == 2
    ce_rows = as_records(tables_of(world["html"])["ce-table"])
    by_run = {r["Run"]["text"]: r for r in ce_rows}
    for m in mce.itertuples():
        assert float(by_run[m.run_id]["mCE %"]["sort"]) == pytest.approx(m.ce)
        assert float(by_run[m.run_id]["Rel. mCE %"]["sort"]) == pytest.approx(m.relative_ce)
    # The baseline's own CE is 1 for every corruption, by definition.
    lite1 = by_run[world["runs"]["lite1"][:8]]
    assert float(lite1["mCE %"]["sort"]) == pytest.approx(1.0)


def test_report_has_every_section(world):
    res, page = world["result"], world["html"]
    for t in (
        "runs",
        "leaderboard",
        "corruption-errors",
        "ce-table",
        "relative-ce-table",
        "regression",
        "regression-logit",
        "cells",
    ):
        assert t in res.tables, t
        assert f'id="{t}"' in page
    for f in (
        "fig-severity-corruption",
        "fig-severity-family",
        "fig-class-drop-0",
        "fig-class-drop-1",
        "fig-intervals",
        "fig-regression-residuals",
        "fig-regression-qq",
    ):
        assert f in res.figures, f
    # informative examples: one grid per sample (7 cells each: three fit the budget), each of
    # another class, the first one where the two models disagree most
    assert res.grids == 3 and 'id="grid-2"' in page and 'id="grid-3"' not in page
    heads = re.findall(r"<h3>([^<:]+): true class ([^<]+)</h3>", page)
    assert len(heads) == 3 and len({cls for _, cls in heads}) == 3
    preds = Store(world["db"]).predictions(list(world["runs"].values()))
    flips = preds.groupby(["sample_id", "shift", "level"])["correct"].nunique().gt(1)
    per_sample = flips.groupby(level="sample_id").sum()
    assert per_sample[heads[0][0]] == per_sample.max()
    tabs = tables_of(page)
    board = as_records(tabs["leaderboard"])
    assert {r["Model"]["text"] for r in board} == {"lite0", "lite1"}
    summary = as_records(tabs["runs"])
    assert {r["Seed"]["text"] for r in summary} == {"0"}
    assert all(r["Data root"]["text"] == str(world["data"].resolve()) for r in summary)
    # mean error per corruption = the mean of the stored severities' errors
    cells = as_records(tabs["cells"])
    for row in as_records(tabs["corruption-errors"]):
        for c in CORRUPTIONS:
            errs = [
                float(x["error %"]["sort"])
                for x in cells
                if x["Run"]["text"] == row["Run"]["text"]
                and x["Shift"]["text"] == c
                and x["Level"]["text"] in {str(lv) for lv in LEVELS}
            ]
            head = next(h for h in row if h.startswith(c.replace("_", " ")))
            assert float(row[head]["sort"]) == pytest.approx(np.mean(errs))


def test_report_is_self_contained(world):
    page = world["html"]
    assert 'http-equiv="Content-Security-Policy"' in page and "default-src 'none'" in page
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), [
        r for r in refs if not r.startswith(("data:", "#"))
    ]
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_grid_shows_exactly_what_the_model_saw(world, models):
    """Re-rendered grid pixels, fed to the model again, give the stored top-1 for every cell."""
    import torch

    from robustlab.workflows.report.grid import pick_sample, render_cells

    store = Store(world["db"])
    rid = world["runs"]["lite0"]
    record = store.get_run(rid)
    sid = pick_sample(store, [rid])
    preds = store.predictions([rid])
    preds = preds[preds["sample_id"] == sid]
    keys = [(s, str(lv)) for s, lv in zip(preds["shift"], preds["level"])]
    images, errors = render_cells(record, sid, keys)
    assert not errors and len(images) == 1 + len(CORRUPTIONS) * len(LEVELS)
    model = models["lite0"]
    batch = torch.stack([model.transform(images[k]) for k in keys])
    top1 = model.predict(batch).argmax(1).numpy()
    stored = np.array([int(ids[0]) for ids in preds["top5_ids"]])
    np.testing.assert_array_equal(top1, stored)
    # One mark per (run, cell) in the page, with symbol and text, not colour alone.
    page = world["html"]
    grid = page[page.index('id="grid-0"') :]
    grid = grid[: grid.index("</table>")]
    n_marks = grid.count('aria-label="correct"') + grid.count('aria-label="wrong"')
    assert n_marks == 2 * len(keys)
    assert grid.count("<img ") == len(keys)


def test_no_baseline_shows_errors_and_says_why(world, plain_report):
    out, res = plain_report
    page = out.read_text()
    assert "ce-table" not in res.tables and "corruption-errors" in res.tables
    assert "No mCE for" in page
    assert page.count("full ImageNet validation set") == len(world["runs"])  # once per run
    assert "grid-0" not in page and any("--no-grid" in n for n in res.notes)


def test_family_plot_pools_only_runs_with_the_same_cells(world, models, plain_report, tmp_path):
    """A run over one corruption must not be pooled next to runs over three (issue 13)."""
    db = tmp_path / "r.duckdb"
    shutil.copy(world["db"], db)
    robustlab.evaluate(
        models["lite0"],
        world["data"],
        suite="imagenet-c",
        shifts=CORRUPTIONS[:1],
        levels=LEVELS,
        db=db,
        seed=1,
        workers=0,
        progress=False,
    )
    res = build_report(db, tmp_path / "r.html", grid=False, n_resamples=50)
    page = (tmp_path / "r.html").read_text()
    caption = page[page.index('id="fig-severity-family"') :]
    caption = caption[: caption.index("</figure>")]
    assert "left out (other cells)" in caption
    [note] = [n for n in res.notes if n.startswith("family plot")]
    assert re.fullmatch(
        r"family plot: left out lite0 \[\w+\] \(evaluated other corruption "
        r"cells than the runs drawn\)",
        note,
    ), note
    # the original pair shares its cells: nothing left out
    _, plain = plain_report
    assert not [n for n in plain.notes if n.startswith("family plot")]


def test_runs_sharing_cells_picks_the_largest_identical_group():
    import pandas as pd

    from robustlab.workflows.report.figures import runs_sharing_cells

    rows = [(r, s, lv) for r in ("a", "b") for s in ("fog", "snow") for lv in ("1", "2")]
    rows += [
        ("c", "fog", "1"),
        ("c", "fog", "2"),
        ("d", "fog", "1"),
        ("d", "snow", "1"),
        ("d", "snow", "2"),
        ("d", "fog", "3"),
        ("a", "clean", "0"),
        ("c", "clean", "0"),
    ]
    cells = pd.DataFrame(rows, columns=["run_full", "shift", "level"])
    assert runs_sharing_cells(cells, ["fog", "snow"]) == (["a", "b"], ["c", "d"])
    assert runs_sharing_cells(cells, ["frost"]) == ([], [])


def test_grid_skipped_with_note_when_data_root_is_gone(world, models, tmp_path):
    data = _make_folder(world["data"], tmp_path / "gone", 2)
    db = tmp_path / "r.duckdb"
    robustlab.evaluate(models["lite0"], data, db=db, workers=0, progress=False)
    shutil.rmtree(data)
    res = build_report(db, tmp_path / "r.html", n_resamples=50)
    assert res.grids == 0
    assert any("skipped" in n and "not readable" in n for n in res.notes)
    assert "not readable" in (tmp_path / "r.html").read_text()


def test_run_selection_and_bad_input(world, tmp_path, capsys):
    one = world["runs"]["lite0"]
    out = tmp_path / "one.html"
    assert (
        cli(
            [
                "report",
                "--db",
                str(world["db"]),
                "--run",
                one[:6],
                "--out",
                str(out),
                "--no-grid",
                "--resamples",
                "50",
            ]
        )
        == 0
    )
    tabs = tables_of(out.read_text())
    assert [r["Run"]["text"] for r in as_records(tabs["runs"])] == [one[:8]]
    assert "leaderboard" not in tabs  # a single run has no leaderboard
    # a line as each stage starts (stderr is not a terminal here, as in a CI log)
    err = capsys.readouterr().err
    stages = [ln for ln in err.splitlines() if re.match(r"report( \d/5)?:", ln)]
    # 4 images: two classes always right or always wrong, and statsmodels sees perfect
    # separation; the user gets a note, not its raw warning
    assert "note: per-image logistic model: perfect separation (" in err
    assert [re.sub(r" \(.*", "", ln) for ln in stages[:-1]] == [
        "report 1/5: read 1 run(s) and their bootstrap intervals",
        "report 2/5: regression models",
        "report 3/5: plots",
        "report 4/5: example images",
        "report 5/5: tables and page",
    ]
    assert re.fullmatch(r"report: done in [0-9.]+ s", stages[-1])
    assert cli(["report", "--db", str(tmp_path / "none.duckdb"), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("robustlab report: error: no results database")
    assert len(err) == 2 and err[1].startswith("  hint: ")  # one line, plus the hint
    assert cli(["report", "--db", str(world["db"]), "--run", "zzzz", "--out", str(out)]) == 2
    assert "no run 'zzzz'" in capsys.readouterr().err
    assert cli(["report", "--db", str(world["db"]), "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    # a baseline no run can use is refused, as `robustlab results` refuses it
    assert cli(["report", "--db", str(world["db"]), "--out", str(out), "--baseline", "lite2"]) == 2
    err = capsys.readouterr().err
    assert "no run of baseline 'lite2'" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------- browser


@pytest.mark.long
def test_every_table_fits_a_1280_and_a_1920_window(world, browser):
    """No table wider than its box (no sideways scrolling inside it), no page wider than
    the window (issue 37: the runs table was 1,399 px in a 1,240 px box at 1280)."""
    for width, layout in report_widths(browser, world["out"]).items():
        assert layout["window"] == width and len(layout["tables"]) >= 5
        assert too_wide(layout) == [], width


def test_report_in_a_real_browser(world, tmp_path, browser):
    res = world["result"]
    problems, requests = [], []
    page = browser.new_page(viewport={"width": 1366, "height": 860})
    page.on(
        "console",
        lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(world["out"].resolve().as_uri(), wait_until="load")
    assert problems == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    # every table and every plot is there, and every image decoded
    for t in res.tables:
        assert page.locator(f"table#{t}").count() == 1, t
    for f in res.figures:
        assert page.locator(f"figure#{f} img").count() == 1, f
    n_plots = page.locator("figure.plot img").count()
    assert n_plots == len(res.figures)
    broken = page.evaluate(
        "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).length"
    )
    assert broken == 0
    assert page.locator("img").count() == n_plots + page.locator("table.grid img").count()

    # clicking a header sorts the table (ascending, then descending)
    def column(name):
        idx = page.evaluate(
            "([t, n]) => Array.from(document.querySelectorAll(`table#${t} thead th`))"
            ".findIndex(th => th.textContent.trim().startsWith(n))",
            ["cells", name],
        )
        assert idx >= 0
        vals = page.evaluate(
            "([t, i]) => Array.from(document.querySelectorAll(`table#${t} tbody tr`))"
            ".map(r => r.cells[i].getAttribute('data-sort'))",
            ["cells", idx],
        )
        return idx, [float(v) if v else None for v in vals]

    idx, before = column("top1 %")
    header = page.locator("table#cells thead th").nth(idx)
    header.locator("button").click()
    _, up = column("top1 %")
    nums = [v for v in up if v is not None]
    assert nums == sorted(nums) and up[len(nums) :] == [None] * (len(up) - len(nums))
    assert header.get_attribute("aria-sort") == "ascending"
    header.locator("button").click()
    _, down = column("top1 %")
    nums = [v for v in down if v is not None]
    assert nums == sorted(nums, reverse=True)
    assert header.get_attribute("aria-sort") == "descending"
    assert sorted(v for v in before if v is not None) == sorted(nums)
    # text columns sort too
    board = page.locator("table#leaderboard thead th").nth(0)
    board.locator("button").click()
    names = page.evaluate(
        "Array.from(document.querySelectorAll('table#leaderboard tbody tr'))"
        ".map(r => r.cells[0].textContent)"
    )
    assert names == sorted(names)
    assert problems == []
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000


# ---------------------------------------------------------------------------- scenarios
def _ellipse_masks(data: Path, dst: Path) -> Path:
    """A centred elliptical foreground mask per photo (same size as the photo)."""
    from PIL import Image, ImageDraw

    dst.mkdir()
    for f in sorted(data.glob("*.JPEG")):
        w, h = Image.open(f).size
        m = Image.new("L", (w, h), 0)
        ImageDraw.Draw(m).ellipse((w * 0.2, h * 0.15, w * 0.8, h * 0.85), fill=255)
        m.save(dst / f"{f.stem}.png")
    return dst


@pytest.mark.slow
def test_scenario_tables_robustness_and_bars(world, models, tmp_path):
    """XIMAGENET-12 scenarios: Table-1 style accuracies, the (EX1-only) robustness score and
    the scenario bar plot, all from the metrics module's functions."""
    from robustlab.metrics.scenes import robustness_score, scenario_accuracies

    scen = ["blur_bg", "color_grey", "segmented"]
    masks = _ellipse_masks(world["data"], tmp_path / "masks")
    db = tmp_path / "scen.duckdb"
    for spec in ("lite0", "lite1"):
        robustlab.evaluate(
            models[spec],
            world["data"],
            suite="ximagenet12",
            shifts=scen,
            masks=masks,
            db=db,
            workers=0,
            progress=False,
        )
    res = build_report(db, tmp_path / "s.html", n_resamples=50)
    page = (tmp_path / "s.html").read_text()
    assert {"scenarios-ximagenet12", "robustness", "leaderboard"} <= set(res.tables)
    assert "fig-scenarios" in res.figures and "fig-severity-corruption" not in res.figures
    store = Store(db)
    tabs = tables_of(page)
    rows = {r["Run"]["text"]: r for r in as_records(tabs["scenarios-ximagenet12"])}
    scores = {r["Run"]["text"]: r for r in as_records(tabs["robustness"])}
    for rid in store.runs()["run_id"]:
        preds = store.predictions([rid])
        mu, acc = scenario_accuracies(preds)
        assert set(acc) == set(scen)
        row = rows[rid[:8]]
        assert float(row["Original %"]["sort"]) == pytest.approx(mu)
        for s in scen:
            head = next(h for h in row if h.startswith(s.replace("_", " ")))
            assert float(row[head]["sort"]) == pytest.approx(acc[s])
        rs = robustness_score(mu, acc)
        assert float(scores[rid[:8]]["S partial"]["sort"]) == pytest.approx(rs.s_partial)
        assert scores[rid[:8]]["S_robust"]["sort"] == ""  # EX2 is not in the database
    assert "sigma2_inner needs EX2" in page
    # the grid shows the clean picture; scene cells are drawn or say why not (their mask)
    grid = page[page.index('id="grid-0"') :]
    grid = grid[: grid.index("</table>")]
    assert grid.count("<img ") >= 1
    assert grid.count("<img ") + grid.count("not rendered") == 1 + len(scen)


@pytest.mark.slow
def test_bg_gap_table_for_imagenet9(samples_dir, models, tmp_path):
    """ImageNet-9 mixed_same / mixed_rand on a class-folder tree of dog and bird photos: the
    BG-gap row is the metrics module's paired bg_gap, and no XIMAGENET-12 score is shown."""
    from PIL import Image, ImageDraw

    from robustlab.metrics.scenes import bg_gap

    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    pick = {
        "dog": [r for r in rows if 151 <= int(r["index"]) <= 268][:3],
        "bird": [r for r in rows if 10 <= int(r["index"]) <= 24][:3],
    }
    data, masks = tmp_path / "in9", tmp_path / "in9-masks"
    for cls, chosen in pick.items():
        (data / cls).mkdir(parents=True)
        (masks / cls).mkdir(parents=True)
        for r in chosen:
            shutil.copy(samples_dir / r["file"], data / cls / r["file"])
            w, h = Image.open(samples_dir / r["file"]).size
            m = Image.new("L", (w, h), 0)
            ImageDraw.Draw(m).ellipse((w * 0.2, h * 0.15, w * 0.8, h * 0.85), fill=255)
            m.save(masks / cls / f"{Path(r['file']).stem}.png")
    db = tmp_path / "in9.duckdb"
    robustlab.evaluate(
        models["lite0"],
        data,
        suite="imagenet9",
        shifts=["mixed_same", "mixed_rand"],
        masks=masks,
        db=db,
        workers=0,
        progress=False,
    )
    res = build_report(db, tmp_path / "in9.html", n_resamples=50, grid=False)
    assert "bg-gap" in res.tables and "scenarios-imagenet9" in res.tables
    assert "robustness" not in res.tables
    want = bg_gap(Store(db).predictions()).iloc[0]
    row = as_records(tables_of((tmp_path / "in9.html").read_text())["bg-gap"])[0]
    assert float(row["BG-gap %"]["sort"]) == pytest.approx(want["bg_gap"])
    assert int(row["Paired images"]["sort"].split(".")[0]) == want["n"] == 6


# ---------------------------------------------------------------------------- headline


def test_benchmark_names_of_runs_without_a_suite_are_never_nan():
    """An ImageNet-D run stores no suite (NaN once read back through pandas): the report
    named it ``nan vnan`` (issue 37); it is ImageNet-D, and a run with neither is clean only."""
    from robustlab.workflows.report.headline import benchmark_title

    nan = float("nan")
    assert benchmark_title({"suite": "imagenet-c", "suite_version": "1"}) == "ImageNet-C v1"
    assert benchmark_title({"suite": nan, "suite_version": nan, "label_space": "imagenet-d"}) == (
        "ImageNet-D"
    )
    assert benchmark_title({"suite": None, "label_space": "imagenet1k"}) == "clean only"


def test_a_synth_folder_is_known_drawn_by_random_weights_from_its_manifest(tmp_path):
    """The report flags a run whose data root is a synth folder made by a checkpoint that
    carries the tiny-checkpoints marker; another checkpoint, or no manifest, is not flagged."""
    import json

    from robustlab.shifts.generative.tiny import MARKER, drawn_by_random

    tiny, real = tmp_path / "tiny" / "text2image", tmp_path / "sd15"
    tiny.mkdir(parents=True)
    real.mkdir()
    (tiny / MARKER).write_text('{"random_weights": true}')
    for name, ckpt in (("noise", tiny), ("photos", real)):
        (tmp_path / name).mkdir()
        manifest = {"format": "robustlab-synth/1", "checkpoint": {"path": str(ckpt)}}
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))
    assert drawn_by_random(tmp_path / "noise") == str(tiny)
    assert drawn_by_random(tmp_path / "photos") is None
    assert drawn_by_random(tmp_path / "tiny") is None  # no manifest


def test_random_bg_variants_have_a_heat_map_column_each(world, models, tmp_path):
    """The per-class heat map showed random_bg's add and paste in one column while the
    scenario table shows them apart: the per-class counts are now read per cell, named
    variants get a column each, and what the regression reads is still pooled per shift."""
    from robustlab.store.aggregates import pool_levels
    from robustlab.workflows.report import gather

    masks = _ellipse_masks(world["data"], tmp_path / "masks")
    db = tmp_path / "rbg.duckdb"
    robustlab.evaluate(
        models["lite0"],
        world["data"],
        suite="ximagenet12",
        shifts=["random_bg", "blur_bg"],
        masks=masks,
        db=db,
        workers=0,
        progress=False,
    )
    d = gather(db, n_resamples=20, regression=False)
    assert set(d.class_drops["shift"]) == {"random_bg add", "random_bg paste", "blur_bg"}
    store = Store(db)
    _, classes = store.cell_and_class_counts(list(store.runs()["run_id"]))
    per_level = classes[classes["shift"] == "random_bg"]
    assert set(per_level["level"]) == {"add", "paste"}
    pooled = pool_levels(classes)
    rbg = pooled[pooled["shift"] == "random_bg"]
    # one row per class, holding both variants' predictions
    assert not rbg.duplicated(["run_id", "label"]).any()
    assert rbg["n"].sum() == per_level["n"].sum() == 2 * store.count(d.runs[0].run_id) // 4
