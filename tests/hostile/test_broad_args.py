"""Numbers a user can mistype in any command: each is one line and exit 2, decided before
any model loads or any process starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402


@pytest.mark.parametrize("command", ["evaluate", "generate", "mine", "saliency", "train"])
@pytest.mark.parametrize("count", ["-1", "100000000", "2.5", "lots"])
def test_workers_out_of_range_is_one_line_before_any_work(tmp_path, capsys, command, count):
    """``--workers 100000000`` used to reach the data loader, which forked until the
    machine stalled; every command shares one ``--workers`` type with a ceiling."""
    data = h.flat_folder(tmp_path / "d", 1)
    argv = {
        "evaluate": ["evaluate", "lite0", "--data", data, "--db", tmp_path / "e.duckdb"],
        "generate": ["generate", "imagenet-c", "--data", data, "--out", tmp_path / "g"],
        "mine": ["mine", "--data", data, "--db", tmp_path / "m.duckdb", "--surrogates", "lite0"],
        "saliency": ["saliency", "lite0", "--data", data, "--db", tmp_path / "s.duckdb"],
        "train": ["train", "lite0", "--data", data, "--db", tmp_path / "t.duckdb"],
    }[command]
    with pytest.raises(SystemExit) as info:
        h.cli(capsys, *argv, "--workers", count)
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "argument --workers" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if ": error:" in line]) == 1
    assert not (tmp_path / "g").exists()  # nothing was started


def test_the_workers_ceiling_follows_the_machine():
    from robustlab.commands._args import max_workers, workers

    assert workers(str(max_workers())) == max_workers() >= 64
