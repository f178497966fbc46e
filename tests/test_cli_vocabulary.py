"""One vocabulary across commands (issue 15): a flag that repeats also takes comma lists,
and every command that draws progress bars takes ``--no-progress`` (``--quiet`` kept)."""

from __future__ import annotations

import pytest

from robustlab.cli import build_parser


def _parse(*argv):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "lite0", "--data", "d"],
        ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"],
        ["train", "lite0", "--data", "d", "--masks", "m"],
        ["generate", "imagenet-c", "--data", "d", "--out", "o"],
    ],
)
def test_shift_and_level_repeat_and_take_commas_alike(command):
    a = _parse(
        *command, "--shift", "fog,contrast", "--shifts", "frost", "--level", "1,3", "--levels", "5"
    )
    assert a.shifts == ["fog", "contrast", "frost"]
    assert [str(v) for v in a.levels] == ["1", "3", "5"]
    assert _parse(*command).shifts is None


def test_levels_keep_their_type():
    a = _parse("evaluate", "lite0", "--data", "d", "--level", "2,default")
    assert a.levels == [2, "default"]


def test_a_blank_list_is_refused_not_read_as_everything(capsys):
    from robustlab.cli import main

    assert main(["evaluate", "lite0", "--data", "d", "--shift", ","]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "robustlab evaluate: error: --shift ',' names no shift",
        "  hint: leave --shift out for all, or name some",
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "lite0", "--data", "d"],
        ["generate", "imagenet-c", "--data", "d", "--out", "o"],
        ["synth", "--checkpoint", "c", "--out", "o"],
    ],
)
@pytest.mark.parametrize("flag", ["--no-progress", "--quiet"])
def test_no_progress_everywhere(command, flag):
    assert _parse(*command).no_progress is False
    assert _parse(*command, flag).no_progress is True


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "lite0", "--data", "d"],
        ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"],
        ["train", "lite0", "--data", "d", "--masks", "m"],
        ["generate", "imagenet-c", "--data", "d", "--out", "o"],
        ["mine", "--data", "d"],
    ],
)
def test_severity_is_an_alias_of_level_everywhere(command):
    """ImageNet-C users say severity; the code says level; both spellings work."""
    a = _parse(*command, "--severity", "2", "--severities", "4,5", "--level", "1")
    assert [str(v) for v in a.levels] == ["2", "4", "5", "1"]


@pytest.mark.parametrize(
    "command",
    [
        ["evaluate", "lite0", "--data", "d"],
        ["train", "lite0", "--data", "d", "--masks", "m"],
        ["generate", "imagenet-c", "--data", "d", "--out", "o"],
        ["mine", "--data", "d"],
    ],
)
def test_workers_zero_is_accepted_and_kept_everywhere(command):
    assert _parse(*command, "--workers", "0").workers == 0


def test_mine_takes_the_shared_flags():
    a = _parse(
        "mine",
        "--data",
        "d",
        "--shift",
        "fog,contrast",
        "--shifts",
        "frost",
        "--level",
        "3",
        "--no-progress",
    )
    assert (a.shifts, a.levels, a.no_progress) == (["fog", "contrast", "frost"], [3], True)


@pytest.mark.parametrize("flag", ["--labels", "--labels-csv"])
def test_masks_takes_labels_like_the_other_commands(flag):
    assert _parse("masks", "--data", "d", "--out", "o", flag, "l.csv").labels_csv == "l.csv"
