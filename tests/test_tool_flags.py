"""Every setting that changes pixels is a flag (issue 38, item 3): ``--inpainter``,
``--bg-diffusion``, ``--edit-fill``... in ``--help``, in the request's specs, recorded with
the run, beating the ``ROBUSTLAB_*`` variable that stays their default.

The hole-fill backend is the setting whose pixels are compared (``ns`` and ``telea`` are
OpenCV, no weights); the inpainter's record is compared with a tiny random checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustlab.cli import build_parser, main
from robustlab.workflows.demo import materialise
from robustlab.settings import VARIABLES, flag
from robustlab.workflows.generate import MANIFEST

pytestmark = pytest.mark.xdist_group("tool_flags")

PHOTOS = ["rocket/rocket.jpg", "cat/chelsea.png"]
TOOL_COMMANDS = ("evaluate", "generate", "segment", "saliency", "train")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No variable of the user's shell counts here."""
    for var in VARIABLES.values():
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory):
    return materialise(tmp_path_factory.mktemp("demo"), PHOTOS)


def _subparser(command: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[command]


@pytest.mark.parametrize("command", TOOL_COMMANDS)
def test_every_tool_setting_is_a_flag_in_help(command):
    p = _subparser(command)
    text = p.format_help()
    for name, var in VARIABLES.items():
        action = next(a for a in p._actions if flag(name) in a.option_strings)
        assert action.dest == name and action.default is None  # None: the variable decides
        assert f"${var}" in action.help and "\n" not in action.help
        assert flag(name) in text
    assert " ".join(text.split()).count("ROBUSTLAB_") >= len(VARIABLES)


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.suffix.lower() in (".png", ".jpg", ".jpeg")
    }


def _generate(demo_data, out: Path, *flags: str) -> tuple[dict[str, bytes], dict]:
    data, masks = demo_data
    argv = ["generate", "imagenet-e", "--data", str(data), "--masks", str(masks)]
    argv += ["--shift", "obj_position", "--out", str(out), "--workers", "0", "--no-progress"]
    assert main([*argv, *flags]) == 0
    files = _files(out)
    assert len(files) == len(PHOTOS)
    return files, json.loads((out / MANIFEST).read_text())


def test_generate_edit_fill_flag_draws_what_the_variable_drew_and_beats_it(
    demo_data, tmp_path, monkeypatch
):
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "ns")
    by_env, env_manifest = _generate(demo_data, tmp_path / "env")
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "telea")
    by_flag, flag_manifest = _generate(demo_data, tmp_path / "flag", "--edit-fill", "ns")
    assert by_flag == by_env
    assert flag_manifest["hole_fill"] == env_manifest["hole_fill"]
    assert flag_manifest["hole_fill"]["backend"] == "opencv-ns"
    assert flag_manifest["cells"] == env_manifest["cells"]  # the same cell identities
    telea, telea_manifest = _generate(demo_data, tmp_path / "telea")  # the variable again
    assert telea.keys() == by_env.keys() and telea != by_env  # so the comparison can fail
    assert telea_manifest["hole_fill"]["backend"] == "opencv-telea"


@pytest.fixture(scope="module")
def lite0():
    """One loaded model for every plan here (a spec would load it once per plan)."""
    from robustlab.models import load_model

    return load_model("lite0", device="cpu", label_space="demo")


def _plan(model, argv: list[str]):
    """``robustlab evaluate``'s plan for ``argv`` (the model given loaded)."""
    import dataclasses

    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    argv = ["evaluate", "lite0", "--device", "cpu", "--label-space", "demo", *argv]
    request = EvaluateRequest.from_args(build_parser().parse_args(argv))
    return make_plan(
        dataclasses.replace(request, model=dataclasses.replace(request.model, spec=model))
    )


def test_evaluate_records_the_flag_as_it_recorded_the_variable(demo_data, lite0, monkeypatch):
    data, masks = demo_data
    argv = ["--data", str(data), "--masks", str(masks), "--suite", "imagenet-e"]
    argv += ["--shift", "obj_position"]
    default = _plan(lite0, argv)
    assert default.record.config["hole_fill"]["backend"] == "patchmatch"
    explicit = _plan(lite0, [*argv, "--edit-fill", "patch"])  # the default named: the same run
    assert explicit.record.run_id == default.record.run_id
    assert explicit.record.config == default.record.config
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "ns")
    by_env = _plan(lite0, argv)
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "telea")
    by_flag = _plan(lite0, [*argv, "--edit-fill", "ns"])
    assert by_flag.record.config["hole_fill"] == by_env.record.config["hole_fill"]
    assert by_flag.record.config["hole_fill"]["backend"] == "opencv-ns"
    assert by_flag.record.run_id == by_env.record.run_id
    assert by_flag.record.config != default.record.config
    # the work the plan ships carries the settings the record describes
    assert by_flag.images.settings.edit_fill == "ns" == by_env.images.settings.edit_fill


def test_the_python_keywords_are_the_flags(demo_data, lite0, monkeypatch):
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    data, masks = demo_data
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "telea")
    request = EvaluateRequest.build(
        lite0,
        data,
        masks=masks,
        suite="imagenet-e",
        shifts=["obj_position"],
        label_space="demo",
        edit_fill="ns",
    )
    assert request.tools.edit_fill == "ns" and request.tools.settings.edit_fill == "ns"
    assert make_plan(request).record.config["hole_fill"]["backend"] == "opencv-ns"
    with pytest.raises(TypeError, match="did you mean edit_fill"):
        EvaluateRequest.build("lite0", data, edit_fil="ns")


def test_inpainter_flag_is_recorded_like_the_variable(demo_data, lite0, tmp_path, monkeypatch):
    from robustlab.errors import MissingResourceError

    ckpt = _inpainter_folder(tmp_path / "sd-inpaint")
    data, masks = demo_data
    argv = ["--data", str(data), "--masks", str(masks), "--suite", "ximagenet12"]
    argv += ["--shift", "ai_bg"]
    with pytest.raises(MissingResourceError, match="ai_bg: no usable inpainter"):
        _plan(lite0, argv)  # nothing configured: ai_bg is skipped, so nothing is left to run
    monkeypatch.setenv("ROBUSTLAB_INPAINTER", str(ckpt))
    monkeypatch.setenv("ROBUSTLAB_INPAINTER_DEVICE", "cpu")
    by_env = _plan(lite0, argv)
    monkeypatch.setenv("ROBUSTLAB_INPAINTER", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("ROBUSTLAB_INPAINTER_DEVICE", "cuda")
    by_flag = _plan(lite0, [*argv, "--inpainter", str(ckpt), "--inpainter-device", "cpu"])
    assert by_flag.record.config["inpainter"] == by_env.record.config["inpainter"]
    assert by_flag.record.config["inpainter"]["path"] == str(ckpt.resolve())
    assert by_flag.record.config["inpainter"]["device"] == "cpu"
    assert by_flag.record.run_id == by_env.record.run_id
    assert by_flag.images.settings.inpainter == str(ckpt.resolve())


def _inpainter_folder(path: Path) -> Path:
    """What a plan reads of a checkpoint folder: its model_index.json (no weights loaded)."""
    path.mkdir()
    index = {"_class_name": "StableDiffusionInpaintPipeline", "scheduler": ["diffusers", "PNDM"]}
    (path / "model_index.json").write_text(json.dumps(index))
    return path


def test_masked_runs_draw_and_record_with_the_requests_tools(demo_data, tmp_path, monkeypatch):
    """segment and saliency: the cells their workers draw and the record's description."""
    from robustlab.workflows._masked import (
        MaskedCells,
        MaskedData,
        cell_images,
        masked_record,
        select,
    )
    from robustlab.workflows.tools import ToolSpec

    ckpt = _inpainter_folder(tmp_path / "sd-inpaint")
    data, masks = demo_data
    cells = MaskedCells(suite="ximagenet12", shifts=["ai_bg", "blur_bg"])
    monkeypatch.setenv("ROBUSTLAB_INPAINTER", str(tmp_path / "elsewhere"))
    sel = select(MaskedData(data, masks), cells, ToolSpec(inpainter=ckpt, inpainter_device="cpu"))
    assert sorted(n for n, _ in sel.cells) == ["ai_bg", "blur_bg", "clean"]
    assert cell_images(sel, 0).settings == sel.tools
    assert sel.tools.inpainter == str(ckpt.resolve())
    record = masked_record(
        "saliency", sel, MaskedData(data, masks), 0, model={}, preprocessing={}, config={}
    )
    assert record.config["inpainter"]["path"] == str(ckpt.resolve())
    assert record.config["inpainter"]["device"] == "cpu"
    plain = select(MaskedData(data, masks), cells)  # the environment's: no usable inpainter
    assert [n for n, _ in plain.cells] == ["clean", "blur_bg"]
    record = masked_record(
        "saliency", plain, MaskedData(data, masks), 0, model={}, preprocessing={}, config={}
    )
    assert "inpainter" not in record.config  # the default settings record what they did


def test_train_takes_the_flags_and_the_keywords(demo_data, monkeypatch):
    """train draws its scenario cells through evaluate's plan, with its request's tools."""
    from robustlab.commands.train_methods import train_request
    from robustlab.workflows.train.request import TrainRequest

    data, masks = demo_data
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "telea")
    args = build_parser().parse_args(
        ["train", "lite0", "--data", str(data), "--masks", str(masks), "--edit-fill", "ns"]
    )
    by_flag = train_request(args)
    by_keyword = TrainRequest.from_keywords("run_protocol", "lite0", data, {"edit_fill": "ns"})
    assert by_flag.tools == by_keyword.tools
    assert by_flag.tools.settings.edit_fill == "ns" == by_keyword.tools.settings.edit_fill
    default = TrainRequest.from_keywords("run_protocol", "lite0", data, {})
    assert default.tools.settings.edit_fill == "telea"  # the variable, as before


@pytest.mark.parametrize("command", ("evaluate", "generate"))
def test_a_bad_checkpoint_flag_is_one_line(command, demo_data, tmp_path, capsys):
    data, _ = demo_data
    head = ["evaluate", "lite0"] if command == "evaluate" else ["generate", "imagenet-e"]
    tail = ["--db", str(tmp_path / "r.duckdb")] if command == "evaluate" else []
    if command == "generate":
        tail = ["--out", str(tmp_path / "out")]
    argv = [*head, "--data", str(data), *tail, "--inpainter", str(tmp_path / "nope")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == f"robustlab {command}: error: inpainter: {tmp_path / 'nope'} is not a folder"
    assert err[1].startswith("  hint: pass --inpainter") and len(err) == 2


def test_a_bad_backend_is_one_line_from_the_flag_or_the_variable(
    demo_data, tmp_path, capsys, monkeypatch
):
    data, masks = demo_data
    argv = ["generate", "imagenet-e", "--data", str(data), "--masks", str(masks)]
    argv += ["--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as e:
        main([*argv, "--edit-fill", "tfill"])
    assert e.value.code == 2
    assert "--edit-fill: invalid choice: 'tfill'" in capsys.readouterr().err
    monkeypatch.setenv("ROBUSTLAB_EDIT_FILL", "tfill")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (
        "robustlab generate: error: --edit-fill / ROBUSTLAB_EDIT_FILL: unknown value 'tfill'; "
        "use one of patch, telea, ns, diffusers"
    )
    assert not (tmp_path / "out").exists()  # refused before any work


def test_a_checkpoint_flag_is_an_input_no_output_may_enter(demo_data, tmp_path, capsys):
    """The safety rule for inputs holds for the tools' folders named on the command line."""
    data, masks = demo_data
    ckpt = _inpainter_folder(tmp_path / "sd-inpaint")
    argv = ["generate", "ximagenet12", "--data", str(data), "--masks", str(masks)]
    assert main([*argv, "--inpainter", str(ckpt), "--out", str(ckpt / "out")]) == 2
    err = capsys.readouterr().err
    assert "--inpainter" in err and "--out" in err
    assert not (ckpt / "out").exists()
