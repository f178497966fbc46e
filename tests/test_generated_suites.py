"""Every built-in suite, generated whole (no --shift, no --level) on real photos with
masks, then evaluated from the folder without a flag: the run holds exactly the cells the
manifest lists, each shift at its own levels (ImageNet-E's edits and the scene scenarios
each have their own level names), every photo in every cell the folder has a file for,
and the cells generate could not make as the manifest's skips with its reasons."""

from __future__ import annotations

import json

import pytest
from conftest import make_masked_folder

from robustlab.cli import main
from robustlab.store import Store

pytestmark = pytest.mark.xdist_group("generated-suites")

N_PHOTOS = 2


@pytest.fixture(scope="module")
def photos(tmp_path_factory, samples_dir):
    return make_masked_folder(samples_dir, tmp_path_factory.mktemp("suites"), N_PHOTOS, 0.05)


@pytest.mark.parametrize(
    "suite",
    [
        pytest.param("imagenet-c", marks=pytest.mark.slow),  # 75 cells: about 15 s of CPU
        "imagenet-c-extra",
        "ximagenet12",
        "imagenet9",
        "imagenet-e",
    ],
)
def test_a_whole_generated_suite_is_evaluated_from_its_folder_without_flags(
    suite, photos, tmp_path, capsys
):
    data, masks = photos
    out, db = tmp_path / suite, tmp_path / "r.duckdb"
    argv = ["generate", suite, "--data", str(data), "--masks", str(masks), "--out", str(out)]
    assert main([*argv, "--workers", "0", "--no-progress"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    held = {(c["shift"], str(c["level"])) for c in manifest["cells"]}
    failed = {(f["id"], f["shift"], str(f["level"])): f["reason"] for f in manifest["failures"]}
    by_shift: dict[str, set[str]] = {}
    for sh, lv in held:
        by_shift.setdefault(sh, set()).add(lv)
    if suite in ("imagenet-e", "ximagenet12"):  # shifts with levels of their own
        assert len({frozenset(v) for v in by_shift.values()}) > 1

    capsys.readouterr()
    argv = ["evaluate", "lite0", "--data", str(out), "--db", str(db), "--workers", "0"]
    assert main([*argv, "--no-progress"]) == 0, capsys.readouterr().err
    (run,) = Store(db).runs().to_dict("records")
    cells = [tuple(c) for c in run["config"]["cells"]]
    assert cells[0] == ("clean", "0") and set(cells[1:]) == held and len(cells) == len(held) + 1
    preds = Store(db).predictions([run["run_id"]], columns=["sample_id", "shift", "level"])
    got = preds.groupby(["shift", "level"]).size().to_dict()
    ids = sorted(preds.loc[preds["shift"] == "clean", "sample_id"])
    assert len(ids) == N_PHOTOS
    for shift, level in held:
        made = sum((sid, shift, level) not in failed for sid in ids)
        assert got.get((shift, level), 0) == made, (shift, level)
    skipped = {tuple(s) for s in run["skipped"]}
    assert skipped == {(sid, f"{sh}/{lv}: {why}") for (sid, sh, lv), why in failed.items()}
