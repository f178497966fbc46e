"""The optional tools' settings (robustlab.settings.ToolSettings): one value per run, each
field left out taken from its environment variable in one place (``resolved``), checked
when it is made, so a bad backend, dtype or checkpoint is one line before any work. How the
value reaches workers: tests/test_settings_travel.py; the flags: tests/test_tool_flags.py."""

from __future__ import annotations

import pytest

from robustlab.errors import InputError
from robustlab.settings import VARIABLES, ToolSettings, checked_path, path_setting_problem
from robustlab.shifts.attributes import fill
from robustlab.shifts.generative import guided_bg, inpaint
from robustlab.workflows.tools import ToolSpec


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No variable of the user's shell counts here."""
    for var in VARIABLES.values():
        monkeypatch.delenv(var, raising=False)


def _inpainter_folder(path):
    path.mkdir()
    (path / "model_index.json").write_text("{}")
    return path


def test_the_variables_are_the_documented_ones():
    assert VARIABLES == {
        "inpainter": inpaint.ENV_PATH,
        "inpainter_device": inpaint.ENV_DEVICE,
        "inpainter_dtype": inpaint.ENV_DTYPE,
        "bg_diffusion": guided_bg.ENV_PATH,
        "bg_diffusion_device": guided_bg.ENV_DEVICE,
        "bg_diffusion_dtype": guided_bg.ENV_DTYPE,
        "bg_adv_model": guided_bg.ENV_ADV,
        "edit_fill": fill.ENV_FILL,
    }


def test_resolved_takes_the_environment_for_fields_left_out_only(monkeypatch):
    monkeypatch.setenv(fill.ENV_FILL, "ns")
    monkeypatch.setenv(inpaint.ENV_DEVICE, "cpu")
    monkeypatch.setenv(inpaint.ENV_DTYPE, "")  # empty: unset, as before
    assert ToolSettings().resolved() == ToolSettings(edit_fill="ns", inpainter_device="cpu")
    # a given field beats its variable; the others still come from the environment
    assert ToolSettings(edit_fill="telea").resolved() == ToolSettings(
        edit_fill="telea", inpainter_device="cpu"
    )
    assert ToolSettings.from_environment({fill.ENV_FILL: "NS "}) == ToolSettings(edit_fill="ns")
    assert ToolSettings.from_environment({}) == ToolSettings()


def test_a_tool_called_without_settings_uses_the_environment(monkeypatch):
    assert fill.backend_name() == "patch" == fill.DEFAULT_BACKEND
    monkeypatch.setenv(fill.ENV_FILL, "ns")
    assert fill.backend_name() == "ns"
    assert fill.backend_name(settings=ToolSettings(edit_fill="telea")) == "telea"
    assert fill.backend_name(settings=ToolSettings()) == "patch"  # given: nothing set
    assert fill.backend_name(" NS ") == "ns"


@pytest.mark.parametrize(
    "field, value, flag",
    [
        ("edit_fill", "tfill", "--edit-fill"),
        ("inpainter_dtype", "float64", "--inpainter-dtype"),
        ("bg_diffusion_dtype", "half", "--bg-diffusion-dtype"),
    ],
)
def test_an_unknown_choice_is_one_line_naming_flag_and_variable(field, value, flag, monkeypatch):
    with pytest.raises(InputError) as e:
        ToolSettings(**{field: value})
    assert str(e.value).startswith(f"{flag} / {VARIABLES[field]}: unknown value {value!r}")
    assert "\n" not in str(e.value) and flag in e.value.hint
    monkeypatch.setenv(VARIABLES[field], value)  # the environment's value: the same check
    with pytest.raises(InputError, match=f"unknown value {value!r}"):
        ToolSettings().resolved()
    with pytest.raises(ValueError, match="unknown value"):  # InputError is a ValueError
        fill.backend_name("tfill")


def test_a_value_must_be_text():
    with pytest.raises(InputError, match="^--edit-fill must be text, got 3$"):
        ToolSettings(edit_fill=3)  # type: ignore[arg-type]


def test_checked_path_resolves_or_says_why(tmp_path, monkeypatch):
    ckpt = _inpainter_folder(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    assert checked_path("ckpt", inpaint._problem, what="inpainter") == str(ckpt.resolve())
    with pytest.raises(InputError, match=r"^inpainter: .*nope is not a folder$") as e:
        checked_path(tmp_path / "nope", inpaint._problem, what="inpainter", hint="make one")
    assert e.value.hint == "make one"


def test_path_setting_problem_names_the_variable(tmp_path):
    assert path_setting_problem(ToolSettings(), "inpainter", inpaint._problem, "set it") == (
        "set it"
    )
    bad = ToolSettings(inpainter=str(tmp_path / "nope"))
    why = path_setting_problem(bad, "inpainter", inpaint._problem, "set it")
    assert why == f"ROBUSTLAB_INPAINTER={tmp_path / 'nope'}: {tmp_path / 'nope'} is not a folder"
    ok = ToolSettings(inpainter=str(_inpainter_folder(tmp_path / "ok")))
    assert path_setting_problem(ok, "inpainter", inpaint._problem, "set it") is None


def test_a_request_checks_its_checkpoints_and_resolves_once(tmp_path, monkeypatch):
    ckpt = _inpainter_folder(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(inpaint.ENV_DTYPE, "float16")
    spec = ToolSpec(inpainter="ckpt", inpainter_device="cpu")
    assert spec.inpainter == str(ckpt.resolve())  # absolute: workers may run elsewhere
    assert spec.settings == ToolSettings(
        inpainter=str(ckpt.resolve()), inpainter_device="cpu", inpainter_dtype="float16"
    )
    assert type(spec.settings) is ToolSettings  # what the work carries: no spec checks again
    monkeypatch.setenv(inpaint.ENV_DTYPE, "float32")
    assert spec.settings.inpainter_dtype == "float16"  # resolved once, when the request was made
    assert inpaint._check(spec.settings) is None
    with pytest.raises(InputError, match="^inpainter: .*missing is not a folder$") as e:
        ToolSpec(inpainter=tmp_path / "missing")
    assert "--inpainter" in e.value.hint
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    with pytest.raises(InputError, match="^background diffusion: .*not a torch checkpoint") as e:
        ToolSpec(bg_diffusion=text)
    assert guided_bg.ENV_PATH in e.value.hint and "--bg-diffusion" in e.value.hint


def test_a_bad_checkpoint_in_the_environment_still_only_skips_its_shifts(tmp_path, monkeypatch):
    """As before the flags: the variable's path is checked where the shift is planned."""
    from robustlab.shifts.registry import available_shifts

    monkeypatch.setenv(inpaint.ENV_PATH, str(tmp_path / "nope"))
    spec = ToolSpec()  # no error here
    assert available_shifts(["ai_bg", "gaussian_noise"], spec.settings) == ["gaussian_noise"]


def test_checks_take_the_settings_they_are_given(tmp_path):
    ckpt = tmp_path / "unet.pt"
    ckpt.write_bytes(b"PK\x03\x04 a torch zip archive starts like this")
    tools = ToolSettings(bg_diffusion=str(ckpt), bg_adv_model="lite0")
    assert guided_bg._check(tools) is None and guided_bg._check_adv(tools) is None
    assert guided_bg._check(ToolSettings()) and guided_bg._check_adv(ToolSettings())
