"""One vocabulary across commands (issue 15): a flag that repeats also takes comma lists,
and every command that draws progress bars takes ``--no-progress`` (``--quiet`` kept)."""

from __future__ import annotations

import pytest

from robustlab.cli import build_parser


def _parse(*argv):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", [
    ["evaluate", "lite0", "--data", "d"],
    ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"],
    ["train", "lite0", "--data", "d", "--masks", "m"],
    ["generate", "imagenet-c", "--data", "d", "--out", "o"],
])
def test_shift_and_level_repeat_and_take_commas_alike(command):
    a = _parse(*command, "--shift", "fog,contrast", "--shifts", "frost", "--level", "1,3",
               "--levels", "5")
    assert a.shifts == ["fog", "contrast", "frost"]
    assert [str(v) for v in a.levels] == ["1", "3", "5"]
    assert _parse(*command).shifts is None


def test_levels_keep_their_type():
    a = _parse("evaluate", "lite0", "--data", "d", "--level", "2,default")
    assert a.levels == [2, "default"]


def test_an_empty_list_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        _parse("evaluate", "lite0", "--data", "d", "--shift", ",")
    assert exit_.value.code == 2 and "empty list" in capsys.readouterr().err


@pytest.mark.parametrize("command", [
    ["evaluate", "lite0", "--data", "d"],
    ["generate", "imagenet-c", "--data", "d", "--out", "o"],
    ["synth", "--checkpoint", "c", "--out", "o"],
])
@pytest.mark.parametrize("flag", ["--no-progress", "--quiet"])
def test_no_progress_everywhere(command, flag):
    assert _parse(*command).no_progress is False
    assert _parse(*command, flag).no_progress is True
