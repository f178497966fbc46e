"""The typed requests of saliency and segment (issue 23, item 1): frozen parts checked when
built, keywords of the Python functions routed to the part that owns them, an unknown one a
TypeError with a "did you mean", and the CLI building the same request as the keywords."""

from __future__ import annotations

import dataclasses

import pytest

from robustlab.cli import build_parser
from robustlab.errors import InputError
from robustlab.workflows._masked import MaskedCells, MaskedData, MaskedExecution
from robustlab.workflows.keywords import build_specs
from robustlab.workflows.saliency import (
    SaliencyExecution,
    SaliencyModel,
    SaliencyRequest,
    saliency,
)
from robustlab.workflows.segment import evaluate_segmentation, segment_to_store


def test_keywords_go_to_the_part_that_owns_them():
    req = SaliencyRequest.build(
        "lite0",
        "val/",
        masks="m/",
        shifts=["blur_bg"],
        levels=[1, 2],
        seed=3,
        method="gradcam++",
        workers=0,
        db="x.duckdb",
        limit=5,
    )
    assert req.model == SaliencyModel("lite0", method="gradcam++")
    assert req.data == MaskedData("val/", "m/", limit=5)
    assert req.cells == MaskedCells(shifts=("blur_bg",), levels=(1, 2), seed=3)
    assert req.run == SaliencyExecution(db="x.duckdb", workers=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.cells.seed = 4  # type: ignore[misc]


@pytest.mark.parametrize(
    "call, word, near",
    [
        (lambda: saliency("lite0", "d", masks="m", batchsize=4), "batchsize", "batch_size"),
        (lambda: saliency("lite0", "d", masks="m", shift=["blur_bg"]), "shift", "shifts"),
        (lambda: segment_to_store(None, "d", masks="m", sed=1), "sed", "seed"),
        (lambda: evaluate_segmentation(None, "d", masks="m", level=[1]), "level", "levels"),
    ],
)
def test_an_unknown_keyword_is_a_type_error_that_names_the_closest(call, word, near):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{word}'; did you mean"):
        call()
    with pytest.raises(TypeError, match=near):
        call()


def test_a_keyword_nothing_is_close_to_names_none():
    with pytest.raises(TypeError) as info:
        build_specs("f", {"zzz": 1}, {"data": MaskedData})
    assert str(info.value) == "f() got an unexpected keyword argument 'zzz'"


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: MaskedData("d", None), "needs foreground masks"),
        # limit=0 selected nothing and was reported as "no images with masks ... --masks"
        (lambda: MaskedData("d", "m", limit=0), "limit must be at least 1, got 0"),
        (lambda: MaskedCells(seed=-1), "seed must be a whole number from 0 to 2"),
        (lambda: MaskedCells(seed=True), "seed must be a whole number from 0 to 2"),
        (lambda: MaskedExecution(batch_size=0), "batch size must be at least 1"),
        (lambda: SaliencyModel("lite0", target="nope"), "target must be one of"),
        (lambda: SaliencyModel("lite0", method="gradcan"), "unknown saliency method"),
        (
            lambda: SaliencyModel("lite0", method="input_x_gradient", target_layer="bn2"),
            "takes no --target-layer",
        ),
    ],
)
def test_parts_are_checked_when_built(build, match):
    with pytest.raises(InputError, match=match):
        build()


def test_the_cli_builds_the_request_the_keywords_build():
    from robustlab.commands.saliency import request

    argv = ["saliency", "lite0", "--data", "val/", "--masks", "m/", "--shift", "blur_bg"]
    argv += ["--seed", "2", "--workers", "0", "--limit", "3", "--edit-fill", "ns"]
    args = build_parser().parse_args(argv)
    assert request(args) == SaliencyRequest.build(
        "lite0",
        "val/",
        masks="m/",
        shifts=["blur_bg"],
        seed=2,
        workers=0,
        limit=3,
        progress=True,
        edit_fill="ns",
    )
    assert request(args).tools.settings.edit_fill == "ns"


def test_the_cli_spells_the_library_defaults():
    """Constants spelled in the command modules (so --help imports no torch) are the
    workflows' own."""
    from robustlab.commands import segment as command
    from robustlab.store import DEFAULT_DB
    from robustlab.workflows import _masked
    from robustlab.workflows import segment as workflow

    assert command.DEFAULT_BATCH_SIZE == workflow.DEFAULT_BATCH_SIZE
    assert _masked.DEFAULT_DB == DEFAULT_DB
    argv = ["segment", "torchvision:x", "--weights", "w", "--data", "d", "--masks", "m"]
    assert build_parser().parse_args(argv).batch_size == workflow.DEFAULT_BATCH_SIZE
