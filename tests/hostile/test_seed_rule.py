"""One seed rule (range, type, message) for every command and function that takes a seed,
from argument parsing down to the database column; counts (``--limit``) refused at zero in
the flag's own words (issue 36, items 4 and 5)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

RULE = "must be a whole number from 0 to 2**63 - 1"
BAD_SEEDS = ["-1", str(2**70), "2**63", "1.5"]


def _parse_error(capsys, argv) -> str:
    """The one error line of a command refused while its arguments are parsed."""
    with pytest.raises(SystemExit) as info:
        h.cli(capsys, *argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["evaluate", "--seed"],
        ["generate", "--seed"],
        ["holdout", "--seed"],
        ["saliency", "--seed"],
        ["segment", "--seed"],
        ["synth", "--seed"],
        ["train", "--seed"],
        ["vlm", "--seed"],
        ["train", "--split-seed"],
        ["results", "--bootstrap-seed"],
        ["report", "--bootstrap-seed"],
        ["report", "--seed"],  # the deprecated spelling of --bootstrap-seed
    ],
)
@pytest.mark.parametrize("value", BAD_SEEDS)
def test_every_seed_flag_has_one_range_and_one_message(capsys, argv, value):
    """``generate --seed 2**70`` was accepted (and ``mine`` on its folder exited 70),
    ``holdout --seed 2**70`` exited 70 and ``holdout --seed -1`` was accepted, while
    ``evaluate`` refused both with a message of its own."""
    line = _parse_error(capsys, [*argv, value])
    assert f"argument {argv[1]}: {RULE}" in line, line


def test_a_seed_at_the_ends_of_the_range_is_taken():
    from robustlab.commands._args import seed

    assert seed("0") == 0 and seed(str(2**63 - 1)) == 2**63 - 1


# (module, class, keywords): every request part of the Python API that holds a seed.
API_SEEDS = [
    ("robustlab.workflows.generate", "GenerateCells", {"seed": 2**70}),
    ("robustlab.workflows.train.request", "TrainData", {"data": "d", "split_seed": -1}),
    ("robustlab.workflows.train.holdout", "HoldoutConfig", {"seed": 2**70}),
    ("robustlab.workflows.imagenet_d.synth.request", "SynthGrid", {"seed": 2**70}),
    ("robustlab.workflows.imagenet_d.vlm.run", "VLMAsking", {"seed": -1}),
    ("robustlab.workflows.report.build", "ReportRequest", {"db": "r", "out": "r", "seed": -1}),
    ("robustlab.workflows._masked", "MaskedCells", {"seed": True}),
]


@pytest.mark.parametrize(("module", "name", "keywords"), API_SEEDS)
def test_the_python_api_follows_the_same_rule(module, name, keywords):
    import importlib

    from robustlab.errors import InputError

    part = getattr(importlib.import_module(module), name)
    with pytest.raises(InputError, match=r"seed must be a whole number from 0 to 2\*\*63 - 1"):
        part(**keywords)


def test_a_stored_record_is_checked_before_its_bigint_column():
    """The last gate: a record with a seed no request checked is one error line, not
    DuckDB's INT128 -> BIGINT conversion error (exit 70)."""
    from robustlab.errors import InputError
    from robustlab.store import RunRecord

    with pytest.raises(InputError, match="the run's seed must be a whole number"):
        RunRecord("x", "lite0", seed=2**70).as_row()


def test_a_generated_folder_with_a_seed_out_of_range_is_one_line(tmp_path, capsys):
    """A folder generated before the rule held at ``generate`` (its manifest says seed
    2**70): evaluating it, as ``mine`` does, exited 70 where the database stores the seed."""
    data = h.flat_folder(tmp_path / "flat", 1)
    out = tmp_path / "gen"
    code, _, err = h.cli(
        capsys,
        *("generate", "imagenet-c", "--data", data, "--out", out, "--shift", "contrast"),
        *("--level", "1", "--workers", "0", "--no-progress"),
    )
    assert code == 0, err
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["seed"] = 2**70
    (out / "manifest.json").write_text(json.dumps(manifest))
    db = tmp_path / "r.duckdb"
    code, _, err = h.cli(
        capsys, "evaluate", "lite0", "--data", out, "--db", db, "--workers", "0", "--no-progress"
    )
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and "manifest: seed must be a whole number" in lines[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ["saliency", "--limit"],
        ["segment", "--limit"],
        ["generate", "--limit"],
        ["synth", "--limit"],
        ["vlm", "--limit"],
        ["data", "icons", "--limit-per-class"],
    ],
)
def test_a_limit_of_zero_is_refused_in_its_own_words(capsys, argv):
    """``saliency --limit 0`` said "no images with masks ... check --masks" although the
    masks were fine: the zero reached the selection and emptied it."""
    line = _parse_error(capsys, [*argv, "0"])
    assert f"argument {argv[-1]}: must be 1 or more, got 0" in line, line


def test_saliency_limit_zero_on_real_masks_names_the_limit(tmp_path):
    """The same through the Python API, on real photos with real masks."""
    from PIL import Image

    from robustlab.errors import InputError
    from robustlab.workflows.saliency import saliency

    data = tmp_path / "data"
    for r in h.photo_rows(2):
        (data / r["wnid"]).mkdir(parents=True)
        (tmp_path / "masks" / r["wnid"]).mkdir(parents=True)
        shutil.copyfile(h.MINI / r["file"], data / r["wnid"] / r["file"])
        w, ht = Image.open(h.MINI / r["file"]).size
        mask = Image.new("L", (w, ht), 0)
        mask.paste(255, (w // 4, ht // 4, 3 * w // 4, 3 * ht // 4))
        mask.save(tmp_path / "masks" / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png"))
    with pytest.raises(InputError, match="limit must be at least 1, got 0"):
        saliency("lite0", data, masks=tmp_path / "masks", limit=0, db=tmp_path / "s.duckdb")
    assert not (tmp_path / "s.duckdb").exists()
