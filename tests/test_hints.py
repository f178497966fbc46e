"""Errors and output a new user meets in the first hour say what to do next (issue 15):
a hint where the fix is known, defaults in every ``--help``, summaries as text."""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
from PIL import Image

import robustlab
from robustlab.cli import build_parser
from robustlab.cli import main as cli
from robustlab.errors import InputError
from robustlab.workflows.generate import generate


@pytest.fixture
def newt_folder(tmp_path):
    """Two small textured images in an ImageNet class folder (n01630670, a newt:
    an ImageNet-1k class outside ImageNet-9), with
    masks of their central box in ``masks/``."""
    rng = np.random.default_rng(0)
    folder, masks = tmp_path / "val" / "n01630670", tmp_path / "masks" / "n01630670"
    folder.mkdir(parents=True)
    masks.mkdir(parents=True)
    m = np.zeros((48, 64), np.uint8)
    m[12:36, 16:48] = 255
    for i in range(2):
        x = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
        x[12:36, 16:48] = (40 + 80 * i, 120, 200)
        Image.fromarray(x).save(folder / f"img{i}.png")
        Image.fromarray(m).save(masks / f"img{i}.png")
    return tmp_path / "val"


def _subparsers(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices


def test_every_help_shows_the_defaults():
    parser = build_parser()
    checked = 0
    for name, sub in _subparsers(parser).items():
        text = " ".join(sub.format_help().split())
        for action in sub._actions:
            d = action.default
            if (
                not action.option_strings
                or d is None
                or isinstance(d, bool)
                or d == []
                or d is argparse.SUPPRESS
            ):
                continue
            assert "default" in (action.help or "") or f"(default: {d})" in text, (
                name,
                action.option_strings,
            )
            checked += 1
    assert checked > 30  # the check saw the real options


def test_label_space_of_the_suite_hints_imagenet1k(newt_folder):
    with pytest.raises(InputError, match="not in label space 'imagenet9'") as err:
        robustlab.evaluate(
            "lite0",
            newt_folder,
            suite="imagenet9",
            masks=newt_folder.parent / "masks",
            db=newt_folder.parent / "r.duckdb",
            workers=0,
            progress=False,
        )
    assert "--label-space imagenet1k" in err.value.hint


def test_missing_generated_cells_hint_the_shifts_that_exist(newt_folder, tmp_path, capsys):
    out = tmp_path / "gen"
    generate(
        "imagenet-c", newt_folder, out, shifts=["gaussian_noise", "fog"], workers=0, progress=False
    )
    code = cli(
        [
            "evaluate",
            "lite0",
            "--data",
            str(out),
            "--suite",
            "imagenet-c",
            "--shift",
            "common",  # more than was generated (with no --shift: what was generated)
            "--db",
            str(tmp_path / "r.duckdb"),
            "--workers",
            "0",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "has no generated images for" in err
    # Runnable as printed: the shifts with their levels (tests/hostile/test_runs_generated.py
    # runs such a hint).
    assert "--shift fog,gaussian_noise --level 1,2,3,4,5" in err, err


def test_masks_says_how_it_seeds_and_prints_text(newt_folder, tmp_path, capsys):
    assert cli(["masks", "--data", str(newt_folder), "--out", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "seeding: 0 images by their box, 2 by a lite0 CAM (no box); pass --bboxes" in out
    assert not re.search(r"[{}]", out), out  # no Python dict
