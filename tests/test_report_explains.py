"""The report explains itself (issue 37 item 4), on a database like a new user's: lite0 on
ImageNet-C and XIMAGENET-12 cells of real photos, lite0 on ImageNet-D images drawn by a
tiny random-weight checkpoint (``robustlab data tiny-checkpoints``'s builder, real
``robustlab synth``), and a ``robustlab saliency`` run; the page is opened in a real
Chromium at 1280 and 1920 px.

Checked: one headline line per benchmark with its interval and image count; the
random-weight run flagged in every table it appears in; the saliency section; no "nan"
in the text; every table as wide as its box at most (no sideways scrolling) and the page
no wider than the window.
"""

from __future__ import annotations

import re

import pytest
from conftest import make_masked_folder, report_widths, save_tiny_text2image, too_wide

from robustlab.workflows.report import build_report
from robustlab.workflows.report.headline import RANDOM_MARK

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report-explains")]


@pytest.fixture(scope="module")
def world(samples_dir, tmp_path_factory):
    from robustlab.models import load_model
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.imagenet_d.synth.run import synth
    from robustlab.workflows.saliency import saliency

    root = tmp_path_factory.mktemp("explains")
    data, masks = make_masked_folder(samples_dir, root, 4, 0.05)
    db = root / "results.duckdb"
    lite0 = load_model("lite0", device="cpu")
    runs = {}
    for suite, shifts in (("imagenet-c", ["contrast"]), ("ximagenet12", ["random_bg", "blur_bg"])):
        res = evaluate(
            lite0,
            data,
            masks=masks,
            suite=suite,
            shifts=shifts,
            levels=None if suite != "imagenet-c" else [1],
            db=db,
            workers=0,
            progress=False,
        )
        runs[suite] = res.run_id
    ckpt = save_tiny_text2image(root / "tiny" / "text2image")
    drawn = root / "imagenet-d"
    synth(
        drawn,
        ckpt,
        classes=["backpack", "banana"],
        nuisances=["background"],
        max_nuisances=1,
        per_pair=1,
        steps=1,
        height=32,
        width=32,
    )
    res = evaluate(lite0, drawn, label_space="imagenet-d", db=db, workers=0, progress=False)
    runs["imagenet-d"] = res.run_id
    saliency(lite0, data, masks=masks, shifts=["color_grey"], method="gradcam", db=db, workers=0)
    out = root / "report.html"
    result = build_report(db, out, n_resamples=100)
    return {"db": db, "out": out, "result": result, "runs": runs, "html": out.read_text()}


def _text(html: str) -> str:
    return re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", html, flags=re.S))


def test_headline_one_line_per_benchmark_with_interval_and_images(world):
    head = re.search(r'<ul class="headline" id="headline">(.*?)</ul>', world["html"], re.S)
    assert head, "no headline list"
    lines = re.findall(r"<li>(.*?)</li>", head.group(1), re.S)
    names = [re.sub(r"<[^>]+>", "", ln).split(":")[0] for ln in lines]
    assert [n.split(" v")[0] for n in names] == ["ImageNet-C", "XIMAGENET-12", "ImageNet-D"]
    for ln in lines:
        assert re.search(
            r"clean top-1 \d+\.\d % \(95 % CI \d+\.\d\u2013\d+\.\d\) on \d+ images", ln
        ), ln
    assert "shifted top-1" in lines[0] and "shifted top-1" in lines[1]
    # defined where they first appear
    assert "clean top-1: share of the unshifted images" in world["html"]


def test_random_weight_run_flagged_in_every_table_it_appears_in(world):
    rid = world["runs"]["imagenet-d"]
    html = world["html"]
    tables = re.findall(
        # a table, then the notes under it (a data table's paragraphs, a grid's list)
        r'<table class="[^"]*" id="([^"]+)".*?</table></div>'
        r'((?:<p class="note">.*?</p>|<ul class="notes">.*?</ul>)*)',
        html,
        re.S,
    )
    seen = 0
    for tid, notes in tables:
        body = re.search(rf'id="{re.escape(tid)}".*?</table>', html, re.S).group(0)
        if rid[:8] not in body:
            continue
        seen += 1
        assert RANDOM_MARK in body, f"table {tid} shows run {rid[:8]} without the flag"
        assert "random weights" in notes, f"table {tid} does not say what the flag means"
    assert seen >= 3  # summary, runs, ImageNet-D subsets, all cells...
    line = re.search(r"<li><strong>ImageNet-D[^<]*</strong>.*?</li>", html, re.S).group(0)
    assert RANDOM_MARK in line
    # the runs on real photos are not flagged
    for suite in ("imagenet-c", "ximagenet12"):
        row = re.search(
            rf"<tr>(?:(?!</tr>).)*{world['runs'][suite][:8]}.*?</tr>", html, re.S
        ).group(0)
        assert RANDOM_MARK not in row


def test_saliency_section_kept_when_the_report_selects_evaluation_runs(world, tmp_path):
    """The demo's report names its own runs (``--run``): the stored saliency run of the
    same model is still shown."""
    out = tmp_path / "some.html"
    res = build_report(
        world["db"], out, run_ids=[world["runs"]["imagenet-c"]], grid=False, n_resamples=50
    )
    assert "saliency-cells" in res.tables
    assert "Saliency and foreground reliance" in out.read_text()


def test_saliency_section_and_no_nan(world):
    assert "Saliency and foreground reliance" in world["html"]
    assert "saliency-cells" in world["result"].tables
    words = re.findall(r"[A-Za-z]+", _text(world["html"]))
    assert "nan" not in {w.lower() for w in words}


@pytest.mark.long
def test_every_table_fits_its_box_and_the_window_at_1280_and_1920(world, browser):
    for width, layout in report_widths(browser, world["out"]).items():
        assert layout["window"] == width
        assert too_wide(layout) == [], width
        assert len(layout["tables"]) >= 8
