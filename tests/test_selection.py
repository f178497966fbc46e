"""One cell-selection grammar (issue 23, item 6): ``Suite.select`` reads names, families,
tags, globs, ``common``/``extra``/``all`` and level ranges, and every command and the Python
API choose their cells through it, so one selection string gives the same cells everywhere."""

from __future__ import annotations

import json
import shutil

import pytest

from robustlab.cli import build_parser
from robustlab.errors import InputError
from robustlab.suites import Cell, Selection, get_suite, match_shifts, parse_levels, select_cells

# The ImageNet-C paper's families (Hendrycks & Dietterich 2019, figure 1).
BLUR = ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"]
NOISE = ["gaussian_noise", "shot_noise", "impulse_noise"]


def test_families_globs_and_ranges_give_typed_cells_in_report_order():
    sel = get_suite("imagenet-c").select(["*_noise", "blur"], ["1-2", "5"])
    assert isinstance(sel, Selection)
    assert list(sel.shifts) == NOISE + BLUR  # the suite's order, not the request's
    assert sel.cells == tuple(Cell(s, lv) for s in NOISE + BLUR for lv in (1, 2, 5))
    assert (
        sel[0].shift == "gaussian_noise" and sel[0].level == 1 and sel[0] == ("gaussian_noise", 1)
    )
    assert sel.suite.name == "imagenet-c" and sel.suite.cells() == list(sel.cells)


def test_a_comma_string_and_a_list_are_the_same_selection():
    s = get_suite("imagenet-c")
    assert s.select("blur,fog", "1-3") == s.select(["blur", "fog"], [1, 2, 3])
    assert s.select(None, None).cells == tuple(s.cells())


def test_group_words():
    common = get_suite("imagenet-c")
    assert common.select(["common"]).shifts == common.shifts
    extra = get_suite("imagenet-c-extra")
    assert extra.select(["extra"]).shifts == extra.select(["all"]).shifts == extra.shifts
    with pytest.raises(InputError, match="no shift of suite 'imagenet-c'"):
        common.select(["extra"])  # the extra corruptions are another suite's


def test_a_misspelt_name_names_the_closest():
    with pytest.raises(InputError, match="unknown shift 'gausian_noise'") as e:
        get_suite("imagenet-c").select(["gausian_noise"])
    assert "did you mean gaussian_noise or" in str(e.value)  # the closest, not all 15 names
    with pytest.raises(InputError, match="'speckle_noise' is a shift but not part of"):
        get_suite("imagenet-c").select(["speckle_noise"])


@pytest.mark.parametrize(
    "levels, needle",
    [("3-1", "runs backwards"), (",", "names no level"), ([6], "has no level 6")],
)
def test_bad_levels_are_one_line_errors(levels, needle):
    with pytest.raises(InputError, match=needle):
        get_suite("imagenet-c").select(["fog"], levels)


def test_parse_levels_and_published_cells():
    assert parse_levels("1-3,5") == [1, 2, 3, 5]
    assert parse_levels(["2", 4, "default"]) == [2, 4, "default"]
    cells = [("fog", "1"), ("fog", "2"), ("frost", "1"), ("snow", "2")]
    assert select_cells(cells, ["weather"], "2", where="x") == [("fog", "2"), ("snow", "2")]
    assert select_cells(cells, "f*", None, where="x") == cells[:3]
    with pytest.raises(InputError, match="x has no 'contrast' folders"):
        select_cells(cells, ["contrast"], None, where="x")
    assert match_shifts(["a", "b"], None) == ["a", "b"]


# Every command that picks cells, with what it needs to parse.
COMMANDS = [
    ["evaluate", "lite0", "--data", "d", "--suite", "imagenet-c"],
    ["generate", "imagenet-c", "--data", "d", "--out", "o"],
    ["train", "lite0", "--data", "d", "--masks", "m", "--suite", "imagenet-c"],
    ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"],
    ["mine", "--data", "d"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_every_command_reads_the_same_selection(command):
    args = build_parser().parse_args([*command, "--shift", "blur,*_noise", "--level", "1-2"])
    assert (args.shifts, args.levels) == (["blur", "*_noise"], ["1-2"])
    cells = get_suite("imagenet-c").select(args.shifts, args.levels).cells
    assert cells == tuple(Cell(s, lv) for s in NOISE + BLUR for lv in (1, 2))


@pytest.mark.slow  # about 30 s: two evaluations of lite0
def test_the_workflows_choose_the_same_cells(samples_dir, tmp_path):
    """generate writes, evaluate (on the fly and from the folder) and train's test cells
    measure the same cells for one selection string."""
    from robustlab.workflows.evaluate import evaluate
    from robustlab.workflows.evaluate.plan import resolve_suite
    from robustlab.workflows.generate import generate
    from robustlab.workflows.train.methods import test_cells_for

    data = tmp_path / "data"
    (data / "n01440764").mkdir(parents=True)
    shutil.copy(samples_dir / "n01440764_tench.JPEG", data / "n01440764" / "a.JPEG")
    shifts, levels = ["*_noise"], ["1-2"]
    want = [(s, lv) for s in NOISE for lv in (1, 2)]

    res = generate(
        "imagenet-c",
        data,
        tmp_path / "gen",
        shifts=shifts,
        levels=levels,
        workers=0,
        progress=False,
    )
    manifest = json.loads(res.manifest_path.read_text())
    assert [(c["shift"], c["level"]) for c in manifest["cells"]] == want

    _, _, cells = resolve_suite("imagenet-c", shifts, levels)
    assert cells[1:] == want
    assert test_cells_for(None, get_suite("imagenet-c"), shifts, levels) == want

    for source in (data, tmp_path / "gen"):
        df = evaluate(
            "lite0",
            source,
            suite="imagenet-c" if source == data else None,
            shifts=shifts,
            levels=levels,
            db=tmp_path / "r.duckdb",
            workers=0,
            progress=False,
        ).table
        got = [(s, int(lv)) for s, lv in zip(df["shift"], df["level"]) if s != "clean"]
        assert got == want, source


def test_a_named_level_that_reads_as_a_number_is_that_level():
    """obj_direction's levels are the names "45", "90", "180", "random": ``--level 90``
    chose nothing ("has no level 90; did you mean 90?") because the grammar reads 90."""
    from robustlab.suites import get_suite

    sel = get_suite("imagenet-e").select(["obj_direction"], "90,180")
    assert [tuple(c) for c in sel.cells] == [("obj_direction", "90"), ("obj_direction", "180")]
    with pytest.raises(InputError, match="has no level 91"):
        get_suite("imagenet-e").select(["obj_direction"], "91")
