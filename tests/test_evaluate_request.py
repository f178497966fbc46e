"""The typed request of ``evaluate`` (:mod:`robustlab.workflows.evaluate.request`): each
keyword lands in the spec that owns it, an unknown one is a TypeError naming the closest,
bad values fail once, in one line with a hint, before any work, and the command line
builds the same request as the Python API. No model is loaded here."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import robustlab
from robustlab.cli import build_parser, main
from robustlab.errors import InputError, MissingResourceError
from robustlab.workflows.evaluate import (
    CellSpec,
    DataSpec,
    EvaluateRequest,
    ExecutionSpec,
    ModelSpec,
    keywords,
)
from robustlab.workflows.evaluate.execute import run_options
from robustlab.workflows.evaluate.request import ToolSpec


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "photos"
    d.mkdir()
    return d


def test_each_keyword_lands_in_the_spec_that_owns_it(folder, tmp_path):
    req = EvaluateRequest.build(
        "lite0",
        folder,
        suite="imagenet-c",
        shifts=["gaussian_noise"],
        levels=[1, 3],
        seed=7,
        labels_csv="labels.csv",
        label_space="imagenet9",
        weights="w.pt",
        device="cpu",
        batch_size=8,
        workers=3,
        prefetch=4,
        cells_per_task=2,
        progress=False,
        db=tmp_path / "r.duckdb",
    )
    assert req.data == DataSpec(folder, labels_csv="labels.csv", label_space="imagenet9")
    assert req.cells == CellSpec("imagenet-c", ["gaussian_noise"], [1, 3], seed=7)
    assert req.model == ModelSpec("lite0", weights="w.pt", device="cpu", batch_size=8)
    assert req.execution == ExecutionSpec(workers=3, prefetch=4, cells_per_task=2, progress=False)
    assert req.db == tmp_path / "r.duckdb"
    with pytest.raises(dataclasses.FrozenInstanceError):
        req.cells.seed = 1  # type: ignore[misc]


def test_every_field_is_one_keyword_of_one_spec():
    """Routing by name needs each keyword owned once; ``model`` and ``data`` are the fields
    whose metadata names their keyword."""
    known = keywords()
    owned = [
        f.metadata.get("keyword", f.name)
        for spec in (DataSpec, CellSpec, ModelSpec, ExecutionSpec, ToolSpec)
        for f in dataclasses.fields(spec)
        if f.init
    ]
    assert len(owned) == len(set(owned)) == len(known) - 1  # and db, the request's own
    assert known["model"] == ("model", "spec") and known["data"] == ("data", "folder")
    assert known["db"] == (None, "db") and known["shift_jpeg"] == ("execution", "shift_jpeg")
    assert known["edit_fill"] == ("tools", "edit_fill")  # the tools' settings (robustlab.settings)
    # robustlab.evaluate's docstring lists them all, from the same table
    doc = robustlab.evaluate.__doc__ or ""
    assert all(k in doc for k in known)


def test_an_unknown_keyword_is_a_type_error_naming_the_closest(folder, tmp_path):
    with pytest.raises(TypeError, match=r"argument 'sufte'; did you mean suite\?"):
        EvaluateRequest.build("lite0", folder, sufte="imagenet-c")
    db = tmp_path / "r.duckdb"
    with pytest.raises(TypeError, match=r"'worker'; did you mean workers\?"):
        robustlab.evaluate("lite0", folder, db=db, worker=2)
    assert not db.exists()
    with pytest.raises(TypeError, match=r"argument 'xyzzy'$"):
        EvaluateRequest.build("lite0", folder, xyzzy=1)


@pytest.mark.parametrize(
    ("options", "message", "hint"),
    [
        ({"seed": -1}, "seed must be a whole number from 0 to 2**63 - 1", "--seed 0"),
        ({"seed": True}, "seed must be a whole number", "--seed 0"),
        ({"batch_size": 0}, "batch size must be at least 1, got 0", "--batch-size"),
        ({"workers": -2}, "workers must be 0 (in the main process) or more", "--workers"),
        ({"address": "h:1"}, "--address h:1 names a Ray cluster", "--backend ray"),
        (
            {"shift_device": "cpu", "preprocess": "clahe"},
            "--shift-device does not combine with --preprocess",
            "leave --shift-device out",
        ),
    ],
)
def test_a_bad_value_fails_in_one_line_with_a_hint(folder, tmp_path, options, message, hint):
    db = tmp_path / "r.duckdb"
    with pytest.raises(InputError) as info:
        robustlab.evaluate("lite0", folder, db=db, **options)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert info.value.hint and hint in info.value.hint
    assert not db.exists()


def test_a_missing_folder_is_named_in_one_line(tmp_path):
    with pytest.raises(MissingResourceError, match="data folder .*nope does not exist") as info:
        EvaluateRequest.build("lite0", tmp_path / "nope")
    assert "\n" not in str(info.value)
    (tmp_path / "file").write_text("x")
    with pytest.raises(MissingResourceError, match="data folder .*file is not a folder"):
        EvaluateRequest.build("lite0", tmp_path / "file")


def test_the_command_line_builds_the_request_the_python_api_does(folder, tmp_path):
    db = str(tmp_path / "r.duckdb")
    argv = ["evaluate", "lite0", "--data", str(folder), "--db", db, "--suite", "imagenet-c"]
    argv += ["--shift", "gaussian_noise,fog", "--level", "1,3", "--seed", "3"]
    argv += ["--labels", "l.csv", "--masks", "m", "--label-space", "imagenet9"]
    argv += ["--weights", "w.pt", "--device", "cpu", "--batch-size", "8"]
    argv += ["--preprocess", "clahe", "--tta", "ten-crop", "--precision", "bf16", "--compile"]
    argv += ["--workers", "2", "--no-progress", "--protocol", "view=model"]
    from_cli = EvaluateRequest.from_args(build_parser().parse_args(argv))
    from_python = EvaluateRequest.build(
        "lite0",
        folder,
        db=db,
        suite="imagenet-c",
        shifts=["gaussian_noise", "fog"],
        levels=[1, 3],
        seed=3,
        labels_csv="l.csv",
        masks="m",
        label_space="imagenet9",
        weights="w.pt",
        device="cpu",
        batch_size=8,
        preprocess="clahe",
        tta="ten-crop",
        precision="bf16",
        compile=True,
        workers=2,
        progress=False,
        protocol="view=model",
    )
    assert from_cli == from_python
    # and without flags: the Python defaults (the command line's --seed defaults to 0)
    plain = build_parser().parse_args(["evaluate", "lite0", "--data", str(folder)])
    assert EvaluateRequest.from_args(plain) == EvaluateRequest.build(
        "lite0", folder, db=plain.db, seed=0
    )


def test_every_evaluate_flag_is_a_request_field():
    """A flag added to the parser without a field would be read by nobody: each option of
    ``robustlab evaluate`` is a keyword of the request, or the argument a field names."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    evaluate = sub.choices["evaluate"]
    read = set(keywords())
    for spec in (DataSpec, CellSpec, ModelSpec, ExecutionSpec):
        read |= {f.metadata["arg"][0] for f in dataclasses.fields(spec) if "arg" in f.metadata}
    dests = {a.dest for a in evaluate._actions if a.dest not in ("help", "func")}
    assert dests <= read, dests - read


def test_the_cli_prints_a_request_error_in_one_line(folder, tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    argv = ["evaluate", "lite0", "--data", str(folder), "--db", str(db), "--batch-size", "0"]
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not db.exists()
    assert "batch size must be at least 1, got 0" in err[0] and len(err) <= 2, err


def test_execution_fields_pass_through_to_the_runner_options():
    """A field of ExecutionSpec named like a RunOptions field reaches the runner as it is;
    evaluate's defaults fill the rest (the model's batch size, progress on)."""

    class Model:
        batch_size = 16

    opts = run_options(ExecutionSpec(workers=1, prefetch=5, cells_per_task=3), Model())
    assert (opts.prefetch, opts.cells_per_task, opts.workers) == (5, 3, 1)
    assert (opts.batch_size, opts.progress, opts.backend, opts.shift_device) == (
        16,
        True,
        "local",
        None,
    )
    assert run_options(ExecutionSpec(workers=0), Model(), batch_size=4).batch_size == 4
