"""``robustlab card``: real lite0 on real photos, every file checked against its format,
a second card computes nothing, the mCE normalisation rule both ways, skipped benchmarks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from conftest import make_masked_folder
from robustlab.store import Store
from robustlab.workflows.card import CardRequest, card
from robustlab.workflows.card.numbers import normaliser
from robustlab.workflows.card.plan import plan_card

pytestmark = pytest.mark.xdist_group("card")

# The fast card: one corruption at its five severities on two photos, no masks (so the
# scene suites and ImageNet-E are skipped, and say so).
TINY = ("fog",)
# The slow card: two corruptions and a few scenarios and edits on three photos with masks.
SHIFTS = ("gaussian_noise", "fog", "blur_bg", "segmented", "mixed_same", "mixed_rand", "obj_size")


def _twice(root, data, **options):
    """Two cards of the same request: what each returned and the runs after the first."""
    kw = dict(db=root / "r.duckdb", n_resamples=200, workers=0, progress=False, report=False)
    kw.update(options)
    first = card("lite0", data, root / "out", **kw)
    runs = Store(root / "r.duckdb").runs()
    second = card("lite0", data, root / "out", **kw)
    return {"first": first, "second": second, "root": root, "runs": runs, "data": data}


@pytest.fixture(scope="module")
def made(tmp_path_factory, samples_dir):
    root = tmp_path_factory.mktemp("card")
    data = make_masked_folder(samples_dir, root / "in", 2, 0.02)[0]
    return _twice(root, data, shifts=TINY)


@pytest.fixture(scope="module")
def masked(tmp_path_factory, samples_dir):
    root = tmp_path_factory.mktemp("card-masked")
    data, masks = make_masked_folder(samples_dir, root / "in", 5, 0.02)
    return _twice(root, data, masks=masks, shifts=SHIFTS)


def test_second_card_computes_nothing(made):
    first, second = made["first"], made["second"]
    assert first.n_computed > 0
    assert second.n_computed == 0
    assert second.run_ids == first.run_ids
    after = Store(made["root"] / "r.duckdb").runs()
    assert list(after["run_id"]) == list(made["runs"]["run_id"])
    assert set(after["status"]) == {"finished"}
    assert second.numbers == first.numbers


def test_card_json_has_robustbench_keys_and_the_stored_numbers(made):
    out = made["root"] / "out"
    doc = json.loads((out / "card.json").read_text())
    for key in ("name", "architecture", "clean_acc", "corruptions_acc", "footnote"):
        assert doc[key], key
    # not the full ImageNet val set: no mCE against AlexNet, and the footnote says why
    assert "corruptions_mce" not in doc
    assert "unnormalised" in doc["footnote"]
    store = Store(made["root"] / "r.duckdb")
    cells = store.cell_table([made["first"].run_ids["imagenet-c"]])
    clean = cells[cells["shift"] == "clean"].iloc[0]
    assert doc["clean_acc"] == f"{100 * clean['n_correct'] / clean['n']:.2f}"
    shifted = cells[cells["shift"] != "clean"]
    assert doc["corruptions_acc"] == f"{100 * shifted['top1'].mean():.2f}"
    prov = doc["robustlab"]["provenance"]["imagenet-c"]
    run = store.get_run(prov["run_id"])
    assert prov["weights_hash"] == run["weights_hash"]
    assert prov["data_fingerprint"] == run["data_fingerprint"]
    assert prov["images"] == 2 and prov["protocol"] == "imagenet-c"


def test_model_index_reads_with_huggingface_hubs_parser(made):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    text = (made["root"] / "out" / "model-index.yaml").read_text()
    name, results = model_index_to_eval_results(yaml.safe_load(text)["model-index"])
    assert name == "lite0"
    assert {r.dataset_type for r in results} == {"imagenet-c"}
    assert all(r.task_type == "image-classification" and r.dataset_split for r in results)
    by = {r.metric_type: r for r in results}
    numbers = {n["metric"]: n for n in made["first"].numbers if n["headline"]}
    assert set(by) == set(numbers) == {"clean_acc", "corruptions_acc", "mean_error"}
    for metric, r in by.items():
        assert r.metric_value == pytest.approx(numbers[metric]["value"], abs=1e-4)
        assert "95 % CI" in r.metric_name and "2 images" in r.metric_name
    run = Store(made["root"] / "r.duckdb").get_run(made["first"].run_ids["imagenet-c"])
    assert by["clean_acc"].dataset_revision == run["data_fingerprint"]
    # pasted into a model card's header, the Hub's card parser reads the same results
    parsed = ModelCard(f"---\n{text}---\n# lite0\n").data
    assert parsed.model_name == "lite0" and len(parsed.eval_results) == len(results)


def test_card_md_has_headline_rows_the_published_rows_and_the_skips(made):
    text = (made["root"] / "out" / "card.md").read_text()
    head = text.split("## Headline")[1].split("## Published")[0]
    assert head.count("| ImageNet-C |") == 3 and head.count("| 2 |") == 3
    published = text.split("## Published numbers beside yours")[1]
    assert "| ImageNet-C | ResNet-50 | mce | 76.7 | not measured here" in published
    assert "RobustBench's fixed 5,000-image subset" in published
    assert "| ImageNet-9 | ResNet-50 | bg_gap | 7.3 | benchmark skipped |" in published
    fog = next(line for line in text.splitlines() if line.startswith("| fog |"))
    assert "| 81.9324 | 66 | 79 |" in fog and "2 images" in fog
    for title in ("XIMAGENET-12", "ImageNet-9", "ImageNet-E"):
        assert f"- {title}: needs foreground masks: pass --masks DIR, or --auto-masks" in text
    assert "- ImageNet-D: needs an ImageNet-D set: pass --imagenet-d DIR" in text


@pytest.mark.slow
def test_every_benchmark_the_masks_allow(masked):
    from huggingface_hub.repocard_data import model_index_to_eval_results

    assert masked["second"].n_computed == 0
    assert masked["second"].run_ids == masked["first"].run_ids
    out = masked["root"] / "out"
    text = (out / "card.md").read_text()
    head = text.split("## Headline")[1].split("## Published")[0]
    for title in ("ImageNet-C", "XIMAGENET-12", "ImageNet-9", "ImageNet-E"):
        assert f"| {title} |" in head
    # four fish and a hen: ImageNet-9 scores superclasses, so mixed_same finds donors
    # among the fish and the card has a BG-gap
    assert "| ImageNet-9 | BG-gap (mixed_same - mixed_rand, paired images) | n/a" not in head
    assert "| ImageNet-9 | BG-gap (mixed_same - mixed_rand, paired images) |" in head
    labels = (masked["root"] / "out-inputs" / "imagenet9-labels.csv").read_text().splitlines()
    assert labels[0] == "file,class" and {r.split(",")[1] for r in labels[1:]} == {"fish", "bird"}
    _, results = model_index_to_eval_results(
        yaml.safe_load((out / "model-index.yaml").read_text())["model-index"]
    )
    assert {r.dataset_type for r in results} == {
        "imagenet-c",
        "ximagenet-12",
        "imagenet-9",
        "imagenet-e",
    }
    types = {r.metric_type for r in results}
    assert {"robustness_score_ex1", "drop:obj_size", "original_acc"} <= types


def test_one_csv_per_cell_with_every_image_and_the_provenance(made):
    out = made["root"] / "out"
    store = Store(made["root"] / "r.duckdb")
    seen = 0
    for bench, rid in made["first"].run_ids.items():
        for cell in store.cell_table([rid]).itertuples():
            path = out / "cells" / bench / cell.shift / f"{cell.level}.csv"
            rows = pd.read_csv(path)
            assert len(rows) == cell.n and rows["correct"].sum() == cell.n_correct
            assert set(rows["run_id"]) == {rid}
            assert rows[["weights_hash", "data_fingerprint", "robustlab"]].notna().all().all()
            seen += 1
    assert seen == len(made["first"].csvs)


def test_the_report_section_shows_the_card_and_the_published_rows(made):
    from robustlab.workflows.report.card import card_section
    from robustlab.workflows.report.page import Page

    record = json.loads((made["root"] / "out" / "card.json").read_text())["robustlab"]
    p = Page()
    card_section(p, record)
    html = "".join(p.parts)
    assert 'id="sec-card"' in html and "Robustness card: lite0" in html
    assert p.tables == ["card-headline", "published"]
    assert "MadryLab/backgrounds_challenge README" in html
    assert "Skipped: XIMAGENET-12: needs foreground masks" in html


@pytest.mark.slow
def test_cli_card_writes_the_report_once(masked):
    """The command on the module's stored runs: nothing to compute, the report written with
    its card section, and a second command leaves it as it is."""
    import subprocess
    import sys

    root = masked["root"]
    cmd = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "card",
        "lite0",
        "--data",
        str(masked["data"]),
        "--masks",
        str(root / "in" / "masks"),
        "--out",
        str(root / "cli"),
        "--db",
        str(root / "r.duckdb"),
        "--shift",
        ",".join(SHIFTS),
        "--resamples",
        "200",
        "--workers",
        "0",
        "--no-progress",
    ]
    for i in range(2):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert "nothing new to compute" in done.stdout
        assert "skipped imagenet-d: needs an ImageNet-D set" in done.stdout
        if i == 0:
            html = (root / "cli" / "report.html").read_text()
            stamp = (root / "cli" / "report.html").stat().st_mtime_ns
    assert "report unchanged" in done.stderr
    assert (root / "cli" / "report.html").stat().st_mtime_ns == stamp
    assert 'id="sec-card"' in html and 'id="published"' in html
    assert html.index('id="sec-card"') < html.index('id="sec-summary"')


def test_skipped_benchmarks_say_why(made, tmp_path):
    plan = plan_card(CardRequest("lite0", made["data"], tmp_path / "o"))
    assert [s.benchmark for s in plan.steps] == ["imagenet-c"]
    for suite in ("ximagenet12", "imagenet9", "imagenet-e"):
        assert plan.skipped[suite] == "needs foreground masks: pass --masks DIR, or --auto-masks"
    assert "--imagenet-d DIR" in plan.skipped["imagenet-d"]
    plan = plan_card(CardRequest("lite0", made["data"], tmp_path / "o", shifts=("fog",)))
    assert plan.steps[0].shifts == ("fog",)
    plan = plan_card(
        CardRequest("lite0", made["data"], tmp_path / "o", masks=made["data"], shifts=("fog",))
    )
    assert plan.skipped["ximagenet12"] == (
        "no shift of the suite matches the --shift/--level selection"
    )


def _cells(n: int, drop: str | None = None) -> pd.DataFrame:
    from robustlab.shifts.corruptions import list_corruptions

    rows = [("clean", "0", n)] + [
        (c, str(s), n) for c in list_corruptions("common") for s in range(1, 6)
    ]
    return pd.DataFrame(
        [r for r in rows if f"{r[0]}/{r[1]}" != drop], columns=["shift", "level", "n"]
    )


def test_mce_is_against_alexnet_only_on_what_alexnet_was_measured_on():
    assert normaliser(_cells(50_000), 1_000, None)[0] == "alexnet"
    assert normaliser(_cells(50_000), 1_000, "lite1")[0] == "alexnet"
    mode, why = normaliser(_cells(5_000), 1_000, None)
    assert mode == "none" and "5,000 images over 1,000 classes" in why
    mode, why = normaliser(_cells(50_000, drop="fog/3"), 1_000, None)
    assert mode == "none" and "lacks 1 of the 75" in why and "fog/3" in why
    mode, why = normaliser(_cells(50_000), 999, "lite1")
    assert mode == "baseline" and "normalised by lite1 on the same images" in why


def test_the_per_corruption_table_names_the_normaliser_of_each_ce():
    """ResNet-50's published CE is AlexNet-normalised: the card's own CE stands beside it
    bare only when it is AlexNet's too; a baseline's CE says which baseline."""
    from robustlab.metrics.reference import reference_table
    from robustlab.workflows.card.numbers import Number
    from robustlab.workflows.card.write import corruption_rows

    def rows(*numbers):
        got, header = corruption_rows(list(numbers), reference_table())
        assert header[-1] == "yours: CE %"
        return {r[0]: r for r in got}

    err = Number("imagenet-c", "error:fog", "fog: mean top-1 error", 40.0, 30.0, 50.0, 500)
    alex = Number("imagenet-c", "ce:fog", "fog: CE", 61.0, 58.0, 64.0, 50_000)
    base = Number("imagenet-c", "ce_vs_baseline:fog", "fog: CE vs lite1", 98.0, 89.4, 107.8, 500)
    assert rows(err, alex)["fog"][-1] == "61.0 (95 % CI 58.0–64.0, 50000 images)"
    assert rows(err, base)["fog"][-1] == "vs lite1: 98.0 (95 % CI 89.4–107.8, 500 images)"
    assert rows(err)["fog"][-1] == "" and rows(err)["fog"][2] == "66"


@pytest.mark.slow
def test_ce_against_a_baseline_run_on_the_same_images(made, tmp_path):
    from robustlab.metrics.mce import corruption_errors, mce

    result = card(
        "lite0",
        made["data"],
        tmp_path / "o",
        db=made["root"] / "r.duckdb",
        baseline="lite1",
        shifts=TINY,
        n_resamples=50,
        workers=0,
        progress=False,
        report=False,
    )
    numbers = {n["metric"]: n for n in result.numbers if n["benchmark"] == "imagenet-c"}
    assert "mce" not in numbers and "mean_error" not in numbers
    # never under the published AlexNet-normalised keys
    assert not [k for k in numbers if k.startswith("ce:")] and "ce_vs_baseline:fog" in numbers
    got = numbers["mce_vs_baseline"]
    assert "normalised by lite1 on the same images" in got["note"]
    # the model's ImageNet-C run is the module card's: reused, not recomputed
    assert result.run_ids["imagenet-c"] == made["first"].run_ids["imagenet-c"]
    store = Store(made["root"] / "r.duckdb")
    model = store.cell_table([result.run_ids["imagenet-c"]])
    base = store.cell_table([result.run_ids["imagenet-c:baseline"]])
    want = mce(corruption_errors(model, base, list(TINY)))
    assert np.isfinite(want["mce"])
    assert got["value"] == pytest.approx(100 * want["mce"])
    assert got["lo"] <= got["value"] <= got["hi"]
    # the per-corruption table names the normaliser beside ResNet-50's AlexNet-based CE
    fog = numbers["ce_vs_baseline:fog"]
    row = next(
        line
        for line in (tmp_path / "o" / "card.md").read_text().splitlines()
        if line.startswith("| fog |")
    )
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-1].startswith(f"vs lite1: {fog['value']:.1f} (95 % CI {fog['lo']:.1f}")


def test_results_reference_shows_the_published_rows_of_the_stored_benchmarks(made, capsys):
    from robustlab.cli import main

    assert (
        main(["results", "--db", str(made["root"] / "r.duckdb"), "--reference", "--format", "csv"])
        == 0
    )
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert set(rows["benchmark"]) == {"imagenet-c"}  # the database holds ImageNet-C runs only
    r50 = rows[(rows["model"] == "ResNet-50") & (rows["metric"] == "mce")].iloc[0]
    assert r50["value"] == 76.7 and "50,000" in r50["measured_on"] and r50["source"]
    sub = rows[rows["model"] == "Standard_R50"]
    assert set(sub["measured_on"]) == {
        "RobustBench's fixed 5,000-image subset of ImageNet-C (15 x 5)"
    }
    assert rows["source"].notna().all()


@pytest.mark.slow
def test_imagenet_d_set_is_scored_per_subset(made, tmp_path):
    from PIL import Image

    rng = np.random.default_rng(0)
    root = tmp_path / "ImageNet-D"
    for rel in (
        "background/alarm_clock/a.png",
        "background/backpack/b.png",
        "texture/backpack/c.png",
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)).save(root / rel)
    result = card(
        "lite0",
        made["data"],
        tmp_path / "o",
        db=made["root"] / "r.duckdb",
        imagenet_d=root,
        shifts=TINY,
        n_resamples=50,
        workers=0,
        progress=False,
        report=False,
    )
    assert "imagenet-d" not in result.skipped
    d = {n["metric"]: n for n in result.numbers if n["benchmark"] == "imagenet-d"}
    assert set(d) == {"acc:background", "acc:texture", "acc:all"}
    assert (d["acc:background"]["n_images"], d["acc:all"]["n_images"]) == (2, 3)
    csv = pd.read_csv(tmp_path / "o" / "cells" / "imagenet-d" / "background" / "0.csv")
    assert len(csv) == 2


def test_published_rows_without_a_card_have_no_yours_column():
    from robustlab.workflows.report.card import reference_table
    from robustlab.workflows.report.page import Page

    p = Page()
    reference_table(p, ["imagenet9"])
    html = "".join(p.parts)
    assert p.tables == ["published"] and "Yours" not in html
    assert html.count(">MadryLab/backgrounds_challenge README</td>") == 16  # 4 models x 4


@pytest.mark.slow
def test_report_reference_adds_the_published_rows(made, tmp_path):
    from robustlab.workflows.report import build_report

    db = made["root"] / "r.duckdb"
    build_report(db, tmp_path / "plain.html", grid=False, n_resamples=50)
    build_report(db, tmp_path / "ref.html", grid=False, n_resamples=50, reference=True)
    plain, ref = ((tmp_path / n).read_text() for n in ("plain.html", "ref.html"))
    assert 'id="published"' not in plain and 'id="sec-card"' not in plain
    assert 'id="sec-published"' in ref and "seed 004 Table 1; hendrycks/robustness README" in ref


def test_auto_masks_make_the_scene_benchmark_run_and_a_second_card_makes_none(
    tmp_path, samples_dir
):
    """``--auto-masks`` on photos without masks: GrabCut masks are written into
    ``<out>-inputs/masks``, one per photo; XIMAGENET-12 then runs on them instead of being
    skipped, and a second card keeps those masks (same bytes, same times) and computes
    nothing."""
    data = make_masked_folder(samples_dir, tmp_path / "in", 2, 0.02)[0]
    kw = dict(
        db=tmp_path / "r.duckdb",
        n_resamples=50,
        workers=0,
        progress=False,
        report=False,
        auto_masks=True,
        shifts=("blur_bg",),
    )
    first = card("lite0", data, tmp_path / "out", **kw)
    masks = sorted((tmp_path / "out-inputs" / "masks").rglob("*.png"))
    photos = sorted(p for p in data.rglob("*") if p.suffix.lower() in (".jpeg", ".jpg", ".png"))
    assert len(masks) == len(photos) == 2
    stamps = {m: (m.stat().st_mtime_ns, m.read_bytes()) for m in masks}
    for m in masks:
        mask = np.asarray(Image.open(m))
        assert 0 < (mask > 0).mean() < 1  # an object, not an empty or a full mask
    runs = Store(tmp_path / "r.duckdb").runs()
    assert "ximagenet12" in set(runs["suite"])
    text = (tmp_path / "out" / "card.md").read_text()
    assert "| XIMAGENET-12 |" in text.split("## Headline")[1]
    assert "XIMAGENET-12: needs foreground masks" not in text
    second = card("lite0", data, tmp_path / "out", **kw)
    assert second.n_computed == 0 and second.run_ids == first.run_ids
    assert {m: (m.stat().st_mtime_ns, m.read_bytes()) for m in masks} == stamps


def test_results_reference_with_an_imagenet_d_run_beside_a_suite_run(tmp_path, capsys):
    """An ImageNet-D run has no suite (NULL, which pandas reads as NaN beside a suite name):
    `results --reference` used to stop with an internal error sorting NaN with a name."""
    from robustlab.cli import main
    from robustlab.store import RunRecord

    store = Store(tmp_path / "r.duckdb")
    common = dict(model_spec="lite0", seed=0, preprocessing={}, versions={}, config={})
    store.start_run(RunRecord(run_id="c1", suite="imagenet-c", label_space="imagenet", **common))
    store.start_run(RunRecord(run_id="d1", suite=None, label_space="imagenet-d", **common))
    argv = ["results", "--db", str(store.path), "--reference", "--format", "csv"]
    assert main(argv) == 0, capsys.readouterr().err
    rows = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert set(rows["benchmark"]) == {"imagenet-c"}  # no published rows for ImageNet-D here
