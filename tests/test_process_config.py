"""The configure_* functions of the optional tools share one way of writing process-wide
settings (robustlab.shifts.process_config): checked first, made absolute, and options left
out cleared, so an earlier call's device or dtype never lingers."""

from __future__ import annotations

import os

import pytest

from robustlab.errors import InputError
from robustlab.shifts.attributes import fill
from robustlab.shifts.process_config import (
    checked_path,
    path_setting_problem,
    set_process_config,
)
from robustlab.shifts.synth import guided_bg, inpaint

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
    """Every variable these tests may write is restored afterwards."""
    for var in ALL_VARS + ("ROBUSTLAB_TEST_A", "ROBUSTLAB_TEST_B"):
        monkeypatch.delenv(var, raising=False)


def _inpainter_folder(path):
    path.mkdir()
    (path / "model_index.json").write_text("{}")
    return path


def test_set_process_config_sets_and_clears():
    set_process_config({"ROBUSTLAB_TEST_A": 3, "ROBUSTLAB_TEST_B": "x"})
    assert os.environ["ROBUSTLAB_TEST_A"] == "3" and os.environ["ROBUSTLAB_TEST_B"] == "x"
    set_process_config({"ROBUSTLAB_TEST_A": None, "ROBUSTLAB_TEST_B": ""})
    assert "ROBUSTLAB_TEST_A" not in os.environ and "ROBUSTLAB_TEST_B" not in os.environ


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
    assert os.environ[inpaint.ENV_PATH] == str(ckpt.resolve())
    assert os.environ[inpaint.ENV_DEVICE] == "cpu" and os.environ[inpaint.ENV_DTYPE] == "float32"
    assert inpaint._check() is None
    inpaint.configure_inpainter(ckpt)
    assert inpaint.ENV_DEVICE not in os.environ and inpaint.ENV_DTYPE not in os.environ
    with pytest.raises(InputError, match="^inpainter: .* is not a folder$"):
        inpaint.configure_inpainter(tmp_path / "missing", device="cuda")
    # a refused path changes nothing
    assert os.environ[inpaint.ENV_PATH] == str(ckpt.resolve())
    assert inpaint.ENV_DEVICE not in os.environ


def test_configure_bg_diffusion_writes_checked_settings_and_clears_left_out_ones(tmp_path):
    ckpt = tmp_path / "unet.pt"
    ckpt.write_bytes(b"PK\x03\x04 a torch zip archive starts like this")
    guided_bg.configure_bg_diffusion(ckpt, device="cpu", adv_model="lite0")
    assert os.environ[guided_bg.ENV_PATH] == str(ckpt.resolve())
    assert os.environ[guided_bg.ENV_DEVICE] == "cpu" and os.environ[guided_bg.ENV_ADV] == "lite0"
    assert guided_bg._check() is None and guided_bg._check_adv() is None
    guided_bg.configure_bg_diffusion(ckpt, dtype="float16")
    assert guided_bg.ENV_DEVICE not in os.environ and guided_bg.ENV_ADV not in os.environ
    assert os.environ[guided_bg.ENV_DTYPE] == "float16"
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    with pytest.raises(InputError, match="^background diffusion: .*not a torch checkpoint") as e:
        guided_bg.configure_bg_diffusion(text)
    assert guided_bg.ENV_PATH in e.value.hint


def test_configure_hole_fill_writes_the_normalised_backend():
    fill.configure_hole_fill(" NS ")
    assert os.environ[fill.ENV_FILL] == "ns" and fill.backend_name() == "ns"
    with pytest.raises(ValueError, match="unknown hole-fill backend 'tfill'"):
        fill.configure_hole_fill("tfill")
    assert os.environ[fill.ENV_FILL] == "ns"
