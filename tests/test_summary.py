"""``robustlab results --summary``: one row per run, checked against numbers recomputed here
by hand from the predictions table of real lite0 / lite1 runs on the bundled demo photos.

The database holds lite0 and lite1 on ImageNet-C (two corruptions, two severities; lite1 is
the CE baseline), lite0 on two XIMAGENET-12 scenarios and lite0 on ImageNet-9's
mixed_same / mixed_rand pair (a mirrored copy of the motorcycle gives its class the second
photo that mixed_same needs).
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import numpy as np
import pandas as pd
import pytest
from PIL import Image, ImageOps

import robustlab
from robustlab.cli import main as cli
from robustlab.workflows.demo import DEMO_LABEL_SPACE, materialise
from robustlab.store import Store

# One xdist worker runs this module: its module-scoped `world` costs seconds, and
# each worker that ran some of its tests would build it again.
pytestmark = pytest.mark.xdist_group("summary")

PHOTOS = ["rocket/rocket.jpg", "motorcycle/motorcycle_left.png", "cat/chelsea.png"]
CORRUPTIONS = ["gaussian_noise", "contrast"]
LEVELS = [1, 3]
SCENARIOS = ["blur_bg", "segmented"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from robustlab.models import load_model

    root = tmp_path_factory.mktemp("summary")
    data, masks = materialise(root / "demo", PHOTOS)
    # A second motorcycle (mirrored photo and mask) so mixed_same has a same-class donor.
    for folder, ext in ((data, ".png"), (masks, ".png")):
        src = folder / "motorcycle" / f"motorcycle_left{ext}"
        ImageOps.mirror(Image.open(src)).save(folder / "motorcycle" / f"motorcycle_mirror{ext}")
    db = root / "results.duckdb"
    models = {s: load_model(s, label_space=DEMO_LABEL_SPACE) for s in ("lite0", "lite1")}
    runs = {}
    common = {
        "db": db,
        "masks": masks,
        "label_space": DEMO_LABEL_SPACE,
        "workers": 0,
        "progress": False,
    }
    for spec, model in models.items():
        runs[(spec, "imagenet-c")] = robustlab.evaluate(
            model, data, suite="imagenet-c", shifts=CORRUPTIONS, levels=LEVELS, **common
        ).run_id
    runs[("lite0", "ximagenet12")] = robustlab.evaluate(
        models["lite0"], data, suite="ximagenet12", shifts=SCENARIOS, **common
    ).run_id
    runs[("lite0", "imagenet9")] = robustlab.evaluate(
        models["lite0"], data, suite="imagenet9", shifts=["mixed_same", "mixed_rand"], **common
    ).run_id
    return {"root": root, "db": db, "runs": runs, "data": data}


@pytest.fixture(scope="module")
def report_lite1(world, tmp_path_factory):
    """The report of the module's database with lite1 as the baseline, grid included: built
    once for the tests that read its first table and lay it out in Chromium."""
    from robustlab.workflows.report import build_report

    out = tmp_path_factory.mktemp("report-lite1") / "r.html"
    return out, build_report(world["db"], out, baseline="lite1", n_resamples=20)


@pytest.fixture(scope="module")
def report_plain(world, tmp_path_factory):
    """The report of the module's database without a baseline or grid, built once for the
    tests of its leaderboard and regression tables."""
    from robustlab.workflows.report import build_report

    out = tmp_path_factory.mktemp("report-plain") / "r.html"
    return out, build_report(world["db"], out, grid=False, n_resamples=20)


def _summary_cli(db, *extra) -> pd.DataFrame:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli(["results", "--db", str(db), "--summary", "--format", "csv", *extra]) == 0
    return pd.read_csv(io.StringIO(out.getvalue()), dtype={"run_id": str})


def _cell_acc(p: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(shift, level) -> fraction correct, by plain counting."""
    acc = {}
    for (shift, level), g in p.groupby(["shift", "level"]):
        acc[(shift, str(level))] = sum(bool(c) for c in g["correct"]) / len(g)
    return acc


def test_summary_rows_equal_numbers_recomputed_from_predictions(world):
    store = Store(world["db"])
    table = _summary_cli(world["db"], "--baseline", "lite1")
    assert len(table) == 4
    rows = {r["run_id"]: r for r in table.to_dict("records")}
    base = _cell_acc(store.predictions([world["runs"][("lite1", "imagenet-c")]]))
    for (spec, suite), rid in world["runs"].items():
        row = rows[rid[:8]]
        p = store.predictions([rid])
        acc = _cell_acc(p)
        shifted = [v for k, v in acc.items() if k[0] != "clean"]
        assert (row["model"], row["suite"]) == (spec, suite)
        assert row["images"] == p["sample_id"].nunique() == 4
        assert row["data"] == "data"
        assert row["path"] == "on-the-fly"
        assert row["precision"] == "float32"
        assert row["clean_top1"] == pytest.approx(acc[("clean", "0")])
        assert row["shifted_top1"] == pytest.approx(sum(shifted) / len(shifted))
        if suite == "imagenet-c":
            # CE_c = sum_s E_s,c / sum_s E^base_s,c; mCE is their mean; relative CE subtracts
            # the clean errors first.
            ce, rel = [], []
            for c in CORRUPTIONS:
                e = [1 - acc[(c, str(s))] for s in LEVELS]
                b = [1 - base[(c, str(s))] for s in LEVELS]
                ce.append(sum(e) / sum(b))
                db_ = sum(x - (1 - base[("clean", "0")]) for x in b)
                rel.append(sum(x - (1 - acc[("clean", "0")]) for x in e) / db_ if db_ else np.nan)
            assert row["mce"] == pytest.approx(np.mean(ce))
            if np.all(np.isfinite(rel)):
                assert row["relative_mce"] == pytest.approx(np.mean(rel))
            assert row["baseline"].startswith("lite1 (")
        else:
            assert np.isnan(row["mce"]) and not isinstance(row["baseline"], str)
        if suite == "ximagenet12":
            mu = acc[("clean", "0")]
            var = np.mean([(acc[(s, lv)] - mu) ** 2 for s, lv in acc if s in SCENARIOS])
            assert row["s_partial"] == pytest.approx(1 - var)
            assert np.isnan(row["s_robust"])  # EX2 is never in the database
        else:
            assert np.isnan(row["s_partial"])
        if suite == "imagenet9":
            same = p[p["shift"] == "mixed_same"].set_index("sample_id")["correct"]
            rand = p[p["shift"] == "mixed_rand"].set_index("sample_id")["correct"]
            both = same.index.intersection(rand.index)
            assert len(both) > 0
            want = same[both].astype(float).mean() - rand[both].astype(float).mean()
            assert row["bg_gap"] == pytest.approx(want)
        else:
            assert np.isnan(row["bg_gap"])


def test_summary_without_baseline_leaves_mce_blank_and_says_why(world):
    err = io.StringIO()
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert cli(["results", "--db", str(world["db"]), "--summary"]) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:6] == ["model", "suite", "run_id", "data", "images", "clean_top1"]
    assert len(lines) == 5
    assert "AlexNet errors are only valid" in err.getvalue()
    table = _summary_cli(world["db"])
    assert table["mce"].isna().all()


def test_summary_marks_the_generated_path(world, tmp_path):
    """A run from a `robustlab generate` folder says so; the on-the-fly run of the same
    cells does not, though their accuracies agree."""
    from robustlab.workflows.generate import generate
    from robustlab.models import load_model

    gen = tmp_path / "gen"
    generate(
        "imagenet-c", world["data"], gen, shifts=["contrast"], levels=[1], workers=0, progress=False
    )
    db = tmp_path / "g.duckdb"
    model = load_model("lite0", label_space=DEMO_LABEL_SPACE)
    robustlab.evaluate(
        model,
        gen,
        suite="imagenet-c",
        shifts=["contrast"],
        levels=[1],
        db=db,
        label_space=DEMO_LABEL_SPACE,
        workers=0,
        progress=False,
    )
    robustlab.evaluate(
        model,
        world["data"],
        suite="imagenet-c",
        shifts=["contrast"],
        levels=[1],
        db=db,
        label_space=DEMO_LABEL_SPACE,
        workers=0,
        progress=False,
    )
    table = _summary_cli(db)
    assert sorted(table["path"]) == ["generated", "on-the-fly"]
    assert table["clean_top1"].nunique() == 1


def test_summary_of_an_empty_selection_is_a_clear_error(world, capsys):
    assert cli(["results", "--db", str(world["db"]), "--summary", "--model", "nope"]) != 0
    err = capsys.readouterr().err
    assert "no runs match" in err and "Traceback" not in err


def test_report_first_table_is_the_summary(world, report_lite1):
    """The report opens with the same numbers `results --summary` prints."""
    from test_report import as_records, tables_of

    out, res = report_lite1
    assert res.tables[0] == "run-summary"
    shown = {r["Run"]["text"]: r for r in as_records(tables_of(out.read_text())["run-summary"])}
    table = _summary_cli(world["db"], "--baseline", "lite1")
    assert set(shown) == set(table["run_id"])
    heads = {
        "clean_top1": "Clean top-1 %",
        "shifted_top1": "Shifted top-1 %",
        "mce": "mCE %",
        "relative_mce": "Rel. mCE %",
        "s_partial": "S partial (EX1)",
        "bg_gap": "BG-gap %",
        "images": "Images",
    }
    for row in table.to_dict("records"):
        cells = shown[row["run_id"]]
        for col, head in heads.items():
            got = cells[head]["sort"]
            if pd.isna(row[col]):
                assert got == ""
            else:
                assert float(got) == pytest.approx(row[col])
        assert cells["Path"]["text"] == row["path"]


def test_compare_two_real_runs_cell_by_cell(world):
    """lite0 vs lite1 on the same demo photos: each cell's difference is lite1's accuracy
    minus lite0's, both counted here from the predictions table."""
    store = Store(world["db"])
    a, b = world["runs"][("lite0", "imagenet-c")], world["runs"][("lite1", "imagenet-c")]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert (
            cli(
                [
                    "results",
                    "--db",
                    str(world["db"]),
                    "--compare",
                    a[:8],
                    b[:8],
                    "--format",
                    "csv",
                    "--resamples",
                    "300",
                ]
            )
            == 0
        )
    table = pd.read_csv(io.StringIO(out.getvalue()), dtype={"level": str})
    acc_a, acc_b = _cell_acc(store.predictions([a])), _cell_acc(store.predictions([b]))
    cells = table[table["level"] != "all"]
    assert len(cells) == 1 + len(CORRUPTIONS) * len(LEVELS)
    for row in cells.to_dict("records"):
        key = (row["shift"], row["level"])
        assert row["n_shared"] == 4
        assert row["diff"] == pytest.approx(acc_b[key] - acc_a[key])
        assert row["diff_lo"] <= row["diff"] <= row["diff_hi"]


@pytest.mark.long
def test_report_layout_in_chromium_at_1280_and_1920(report_lite1, browser):
    """No horizontal page overflow; every plot fits the content column at its natural size
    (never shrunk below its text size, never scrolling); at 1920 no table scrolls sideways
    either (at 1280 a table may still scroll inside its own box); long tables scroll
    vertically in their own box; alt text on every image, one scenario table per suite."""
    from robustlab.workflows.report.plots import MIN_TEXT_PT, text_px

    out, res = report_lite1
    assert {"scenarios-ximagenet12", "scenarios-imagenet9"} <= set(res.tables)
    assert text_px(MIN_TEXT_PT) >= 10
    sideways = (
        "Array.from(document.querySelectorAll(SEL))"
        ".filter(b => b.scrollWidth > b.clientWidth + 1)"
        ".map(b => (b.id || b.querySelector('[id]').id) + ' ' + b.scrollWidth)"
    )
    for width in (1280, 1920):
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(out.resolve().as_uri(), wait_until="load")
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, (width, overflow)
        # plots are shown at natural size (never shrunk below their text size)
        scales = page.evaluate(
            "Array.from(document.querySelectorAll('figure.plot img'))"
            ".map(i => i.clientWidth / i.naturalWidth)"
        )
        assert scales and min(scales) >= 0.999, scales
        assert page.evaluate(sideways.replace("SEL", "'figure.plot'")) == []
        if width == 1920:
            assert page.evaluate(sideways.replace("SEL", "'.table-wrap'")) == []
        # the long cells table scrolls in its own box, its header kept in view
        box = page.evaluate(
            "(() => { const w = document.getElementById('cells').parentElement;"
            " return [w.clientHeight, w.scrollHeight]; })()"
        )
        assert box[0] < min(600, box[1]), box
        assert page.evaluate("Array.from(document.images).filter(i => !i.alt).length") == 0
        ids = page.evaluate("Array.from(document.querySelectorAll('[id]')).map(e => e.id)")
        assert len(ids) == len(set(ids))  # every id once (tables and sections)
        page.close()


def test_leaderboard_ranks_only_runs_over_the_same_cells(world, report_plain):
    """lite0 and lite1 over the same 4 ImageNet-C cells are ranked; the XIMAGENET-12 and
    ImageNet-9 runs (other cells) are listed apart with their cell counts, unranked. The
    leaderboard's "Shifted top-1 %" is the summary's, whose definition both state."""
    from test_report import as_records, tables_of

    from robustlab.workflows.report.columns import SHIFTED_TOP1

    out, _ = report_plain
    page = out.read_text()
    tabs = tables_of(page)
    summary = {r["Run"]["text"]: r for r in as_records(tabs["run-summary"])}
    ranked = as_records(tabs["leaderboard"])
    apart = as_records(tabs["leaderboard-unranked"])
    assert "leaderboard-2" not in tabs
    runs = world["runs"]
    assert {r["Run"]["text"] for r in ranked} == {
        runs[("lite0", "imagenet-c")][:8],
        runs[("lite1", "imagenet-c")][:8],
    }
    assert {r["Run"]["text"] for r in apart} == {
        runs[("lite0", "ximagenet12")][:8],
        runs[("lite0", "imagenet9")][:8],
    }
    assert "Rank" not in apart[0]
    store = Store(world["db"])
    for r in ranked + apart:
        preds = store.predictions(
            [next(v for v in runs.values() if v.startswith(r["Run"]["text"]))]
        )
        shifted = preds[preds["shift"] != "clean"]
        n_cells = len(set(zip(shifted["shift"], shifted["level"].astype(str))))
        assert int(r["Shifted cells"]["text"]) == n_cells
        # one definition: the same number as the summary's, to the last digit
        assert r["Shifted top-1 %"]["sort"] == summary[r["Run"]["text"]]["Shifted top-1 %"]["sort"]
    assert int(ranked[0]["Shifted cells"]["text"]) == len(CORRUPTIONS) * len(LEVELS)
    best = max(ranked, key=lambda r: float(r["Shifted top-1 %"]["sort"]))
    assert best["Rank"]["text"] == "1"
    # the definition is stated where the number appears: under the summary and the leaderboard
    from html import escape

    shown = escape(SHIFTED_TOP1, quote=True)
    assert page.count(shown) >= 2
    assert page.index(shown) < page.index('id="leaderboard"')


def test_fits_with_fewer_images_than_terms_show_no_p_values(report_plain):
    """4 photos explain a Model x Shift x Class fit of many more terms: the regression
    tables keep the estimates and say why there is no inference, with no p or stars."""
    from test_report import tables_of

    out, res = report_plain
    page = out.read_text()
    tabs = tables_of(page)
    fits = [t for t in ("regression", "regression-logit") if t in res.tables]
    assert fits[0] == "regression"
    for t in fits:
        heads = tabs[t]["head"]
        assert not [h for h in heads if h.startswith(("p", "Signif", "Std", "SE", "95"))], heads
    # each fit says why: too few images for its terms, or (the logistic model, once the
    # Model factor is the checkpoint and lite0's runs pool into one level) no convergence
    reasons = page.count("fewer independent observations than terms") + page.count(
        "the fit did not converge"
    )
    assert reasons == len(fits) and "fewer independent observations than terms" in page
    assert "****" not in page.split('id="regression"')[1].split("</table>")[0]


def test_withheld_inference_on_real_fits():
    """A logistic fit that does not converge (one shift always right) and an OLS on fewer
    images than terms get a reason; a fit on enough images gets none."""
    from robustlab.metrics.regression import cell_accuracy, logit_correctness, regress_accuracy
    from robustlab.workflows.report.analysis import withheld_inference

    rng = np.random.default_rng(0)
    n = 60
    data = pd.DataFrame(
        {
            "sample_id": np.repeat([f"img{i}" for i in range(n)], 3),
            "shift": ["clean", "a", "b"] * n,
        }
    )
    data["correct"] = rng.random(len(data)) < 0.6
    fit = logit_correctness(data, {"Shift": "shift"}, reference={"Shift": "clean"})
    fit.table.attrs["n_images"] = n
    assert withheld_inference(fit) == ""
    data.loc[data["shift"] == "a", "correct"] = True  # separation: "a" is always right
    bad = logit_correctness(data, {"Shift": "shift"}, reference={"Shift": "clean"})
    bad.table.attrs["n_images"] = n
    assert not bad.table.attrs["converged"]
    assert withheld_inference(bad).startswith("the fit did not converge")
    cells = cell_accuracy(data.assign(cls=data["sample_id"]), by=["shift", "cls"])
    ols = regress_accuracy(cells, {"Shift": "shift", "Class": "cls"}, reference={"Shift": "clean"})
    ols.table.attrs["n_images"] = n
    assert withheld_inference(ols).startswith(f"{len(ols.table)} terms fitted on {n} images")


def test_plots_never_draw_text_below_the_minimum():
    from matplotlib.text import Text

    from robustlab.workflows.report.plots import MIN_TEXT_PT, _figure, to_png

    fig = _figure(3, 2)
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "tiny", fontsize=4)
    ax.set_title("title", fontsize=12)
    to_png(fig)
    sizes = {t.get_text(): t.get_fontsize() for t in fig.findobj(Text) if t.get_text()}
    assert sizes["tiny"] == MIN_TEXT_PT and sizes["title"] == 12


@pytest.mark.long
def test_wide_plot_fits_and_wide_table_scrolls_in_its_own_box_at_1280(tmp_path, browser):
    """A 12-scenario x 2-run bar chart (2,500 px wide when its bars stood side by side) and a
    40-column table: the page itself never scrolls sideways, the plot fits at its natural
    size (so its text stays at least 10 px), the table scrolls inside its own box."""
    from robustlab.workflows.report import plots
    from robustlab.workflows.report.html import Column, Table, figure, page, render_table

    names = [f"scenario_{i}" for i in range(12)]
    scen = pd.DataFrame(
        [
            {"run_full": r, "scenario": n, "top1": 0.5 + 0.03 * i, "top1_lo": 0.4, "top1_hi": 0.7}
            for r in ("r1", "r2")
            for i, n in enumerate(names)
        ]
    )
    png = plots.scenario_bars(scen, {"r1": "model one", "r2": "model two"}, {"r1": 0.8, "r2": 0.7})
    cols = [Column(f"c{i}", f"a long column title {i}") for i in range(40)]
    table = Table("wide", cols, [{f"c{i}": f"value {i}" for i in range(40)}] * 3)
    out = tmp_path / "wide.html"
    out.write_text(
        page(
            "wide", figure("fig-wide", png, "wide plot", "bars per scenario") + render_table(table)
        ),
        encoding="utf-8",
    )
    pg = browser.new_page(viewport={"width": 1280, "height": 900})
    pg.goto(out.resolve().as_uri(), wait_until="load")
    assert (
        pg.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        <= 0
    )
    img = pg.evaluate(
        "(() => { const i = document.querySelector('figure.plot img');"
        " return [i.clientWidth, i.naturalWidth]; })()"
    )
    assert img[1] <= 1200 and img[0] == pytest.approx(img[1])
    boxes = pg.evaluate(
        "Array.from(document.querySelectorAll('figure.plot, .table-wrap'))"
        ".map(b => [b.scrollWidth > b.clientWidth,"
        " b.getBoundingClientRect().right <= 1280])"
    )
    assert boxes == [[False, True], [True, True]]
