"""The configure_* functions of the optional tools share one way of setting what a run is
planned with (robustlab.shifts.process_config): checked first, made absolute, and options
left out cleared, so an earlier call's device or dtype never lingers. Nothing is written to
the environment: the settings travel with the work (tests/test_settings_travel.py)."""

from __future__ import annotations

import os

import pytest

from robustlab.errors import InputError
from robustlab.shifts import process_config
from robustlab.shifts.attributes import fill
from robustlab.shifts.process_config import (
    checked_path,
    path_setting_problem,
    process_settings,
    set_process_config,
    setting,
    task_settings,
)
from robustlab.shifts.generative import guided_bg, inpaint

ALL_VARS = (
    inpaint.ENV_PATH,
    inpaint.ENV_DEVICE,
    inpaint.ENV_DTYPE,
    guided_bg.ENV_PATH,
    guided_bg.ENV_DEVICE,
    guided_bg.ENV_DTYPE,
    guided_bg.ENV_ADV,
    fill.ENV_FILL,
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    """No variable of the user's shell, and no earlier test's configuration, counts here;
    what these tests configure is forgotten afterwards."""
    for var in ALL_VARS + ("ROBUSTLAB_TEST_A", "ROBUSTLAB_TEST_B"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(process_config, "_CONFIGURED", {})


def _inpainter_folder(path):
    path.mkdir()
    (path / "model_index.json").write_text("{}")
    return path


def test_set_process_config_sets_and_clears(monkeypatch):
    set_process_config({"ROBUSTLAB_TEST_A": 3, "ROBUSTLAB_TEST_B": "x"})
    assert setting("ROBUSTLAB_TEST_A") == "3" and setting("ROBUSTLAB_TEST_B") == "x"
    assert "ROBUSTLAB_TEST_A" not in os.environ
    monkeypatch.setenv("ROBUSTLAB_TEST_B", "from the shell")
    set_process_config({"ROBUSTLAB_TEST_A": None, "ROBUSTLAB_TEST_B": ""})
    # cleared means the default, not the shell's value
    assert setting("ROBUSTLAB_TEST_A") is None and setting("ROBUSTLAB_TEST_B") is None


def test_the_environment_is_the_drivers_input_and_a_task_reads_only_its_snapshot(monkeypatch):
    monkeypatch.setenv(fill.ENV_FILL, "ns")
    monkeypatch.setenv(inpaint.ENV_DEVICE, "cpu")
    snapshot = process_settings()
    assert snapshot == {fill.ENV_FILL: "ns", inpaint.ENV_DEVICE: "cpu"}
    monkeypatch.setenv(fill.ENV_FILL, "telea")  # a worker's own environment
    monkeypatch.setenv(inpaint.ENV_DTYPE, "float16")
    with task_settings(snapshot):
        assert fill.backend_name() == "ns" and setting(inpaint.ENV_DTYPE) is None
        with task_settings({}):  # a task planned with nothing set: defaults, not the shell
            assert fill.backend_name() == "patch" == fill.DEFAULT_BACKEND
            assert setting(inpaint.ENV_DEVICE) is None
    assert fill.backend_name() == "telea"  # outside a task: this process's own input


def test_checked_path_resolves_or_says_why(tmp_path, monkeypatch):
    ckpt = _inpainter_folder(tmp_path / "ckpt")
    monkeypatch.chdir(tmp_path)
    assert checked_path("ckpt", inpaint._problem, what="inpainter") == str(ckpt.resolve())
    with pytest.raises(InputError, match=r"^inpainter: .*nope is not a folder$") as e:
        checked_path(tmp_path / "nope", inpaint._problem, what="inpainter", hint="make one")
    assert e.value.hint == "make one"


def test_path_setting_problem_names_the_variable(tmp_path, monkeypatch):
    assert path_setting_problem("ROBUSTLAB_TEST_A", inpaint._problem, "set it") == "set it"
    monkeypatch.setenv("ROBUSTLAB_TEST_A", str(tmp_path / "nope"))
    why = path_setting_problem("ROBUSTLAB_TEST_A", inpaint._problem, "set it")
    assert why == f"ROBUSTLAB_TEST_A={tmp_path / 'nope'}: {tmp_path / 'nope'} is not a folder"
    monkeypatch.setenv("ROBUSTLAB_TEST_A", str(_inpainter_folder(tmp_path / "ok")))
    assert path_setting_problem("ROBUSTLAB_TEST_A", inpaint._problem, "set it") is None


def test_configure_inpainter_writes_checked_settings_and_clears_left_out_ones(tmp_path):
    ckpt = _inpainter_folder(tmp_path / "ckpt")
    inpaint.configure_inpainter(ckpt, device="cpu", dtype="float32")
    assert setting(inpaint.ENV_PATH) == str(ckpt.resolve())
    assert setting(inpaint.ENV_DEVICE) == "cpu" and setting(inpaint.ENV_DTYPE) == "float32"
    assert not any(var in os.environ for var in ALL_VARS)  # the environment stays the user's
    assert inpaint._check() is None
    inpaint.configure_inpainter(ckpt)
    assert setting(inpaint.ENV_DEVICE) is None and setting(inpaint.ENV_DTYPE) is None
    with pytest.raises(InputError, match="^inpainter: .* is not a folder$"):
        inpaint.configure_inpainter(tmp_path / "missing", device="cuda")
    # a refused path changes nothing
    assert setting(inpaint.ENV_PATH) == str(ckpt.resolve())
    assert setting(inpaint.ENV_DEVICE) is None


def test_configure_bg_diffusion_writes_checked_settings_and_clears_left_out_ones(tmp_path):
    ckpt = tmp_path / "unet.pt"
    ckpt.write_bytes(b"PK\x03\x04 a torch zip archive starts like this")
    guided_bg.configure_bg_diffusion(ckpt, device="cpu", adv_model="lite0")
    assert setting(guided_bg.ENV_PATH) == str(ckpt.resolve())
    assert setting(guided_bg.ENV_DEVICE) == "cpu" and setting(guided_bg.ENV_ADV) == "lite0"
    assert guided_bg._check() is None and guided_bg._check_adv() is None
    guided_bg.configure_bg_diffusion(ckpt, dtype="float16")
    assert setting(guided_bg.ENV_DEVICE) is None and setting(guided_bg.ENV_ADV) is None
    assert setting(guided_bg.ENV_DTYPE) == "float16"
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    with pytest.raises(InputError, match="^background diffusion: .*not a torch checkpoint") as e:
        guided_bg.configure_bg_diffusion(text)
    assert guided_bg.ENV_PATH in e.value.hint


def test_configure_hole_fill_writes_the_normalised_backend():
    fill.configure_hole_fill(" NS ")
    assert setting(fill.ENV_FILL) == "ns" and fill.backend_name() == "ns"
    with pytest.raises(ValueError, match="unknown hole-fill backend 'tfill'"):
        fill.configure_hole_fill("tfill")
    assert setting(fill.ENV_FILL) == "ns"
