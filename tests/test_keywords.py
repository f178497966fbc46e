"""The one keyword rule of every workflow (robustlab.workflows.keywords): Python keywords
and parsed command-line arguments reach the spec that owns each field by its name."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from robustlab.workflows.keywords import build_specs, route_keywords, specs_from_args


@dataclass(frozen=True)
class Cells:
    shifts: tuple | None = None
    seed: int = 0


@dataclass(frozen=True)
class Run:
    workers: int | None = None
    progress: bool = False
    folder: str | None = field(default=None, metadata={"keyword": "data"})


PARTS = {"cells": Cells, "run": Run}


def test_keywords_go_to_their_spec_and_an_unknown_one_names_the_closest():
    assert route_keywords("f", {"seed": 3, "data": "d"}, PARTS) == {
        "cells": {"seed": 3},
        "run": {"folder": "d"},
    }
    with pytest.raises(
        TypeError, match=r"f\(\) got an unexpected keyword argument 'sed'; did you mean seed\?"
    ):
        build_specs("f", {"sed": 3}, PARTS)


def test_a_spec_passed_whole_cannot_also_take_keywords():
    given = {"cells": Cells(seed=1)}
    assert build_specs("f", {}, PARTS, given)["cells"] == Cells(seed=1)
    with pytest.raises(TypeError, match="both as keywords and in cells="):
        build_specs("f", {"seed": 2}, PARTS, given)


def test_parsed_arguments_fill_every_field_of_the_same_name():
    """A new option is a field and a flag of the same name: no command code reads it."""
    args = argparse.Namespace(
        shifts=("blur",), seed=7, workers=2, no_progress=True, data="photos", unrelated=1
    )
    specs = specs_from_args("cmd", args, PARTS)
    assert specs == {
        "cells": Cells(shifts=("blur",), seed=7),
        "run": Run(workers=2, progress=False, folder="photos"),
    }
    # what a command derives itself wins; a derived value no spec owns is a bug
    assert specs_from_args("cmd", args, PARTS, seed=9)["cells"].seed == 9
    with pytest.raises(TypeError, match="'sede'"):
        specs_from_args("cmd", args, PARTS, sede=9)


def test_generate_builds_from_its_flags_the_specs_its_keywords_build():
    from robustlab.cli import build_parser
    from robustlab.workflows.generate import GenerateCells, GenerateExecution, GenerateInputs

    argv = ["generate", "imagenet-c", "--data", "d", "--out", "o", "--shift", "blur"]
    argv += ["--level", "1-2", "--seed", "3", "--workers", "0", "--no-progress", "--limit", "5"]
    args = build_parser().parse_args(argv)
    parts = {"cells": GenerateCells, "inputs": GenerateInputs, "execution": GenerateExecution}
    from_flags = specs_from_args("generate", args, parts)
    from_keywords = build_specs(
        "generate",
        {
            "shifts": ["blur"],
            "levels": ["1-2"],
            "seed": 3,
            "workers": 0,
            "progress": False,
            "limit": 5,
        },
        parts,
    )
    assert from_flags == from_keywords
