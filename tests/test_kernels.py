"""The corruption kernels compile once per installation, and the first run says so."""

from __future__ import annotations

import numpy as np
from PIL import Image

from robustlab.cli import main
from robustlab.shifts.kernels import ensure_compiled, kernel_shifts, marker_path, warm


def test_every_imagenet_c_corruption_is_a_kernel_shift():
    names = {s.name for s in kernel_shifts()}
    assert {"gaussian_noise", "glass_blur", "fog", "frost", "speckle_noise", "saturate"} <= names
    assert len(names) == 19 and not {"only_fg", "bg_complexity"} & names


def test_warm_compiles_every_kernel_without_failures():
    assert warm() == {}


def test_first_call_says_compiling_and_leaves_a_marker(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROBUSTLAB_CACHE_DIR", str(tmp_path / "cache"))
    assert not marker_path().exists()
    assert ensure_compiled() is True
    err = capsys.readouterr().err
    assert "compiling 19 corruption kernels (first run only" in err and "kernels compiled in" in err
    assert marker_path().exists()
    assert ensure_compiled() is False and capsys.readouterr().err == ""


def test_marker_follows_the_kernel_sources(tmp_path, monkeypatch):
    """numba recompiles when a kernel source changes; so the marker key changes too."""
    import robustlab.shifts.kernels as kernels

    monkeypatch.setenv("ROBUSTLAB_CACHE_DIR", str(tmp_path))
    before = marker_path()
    src = tmp_path / "fake_kernel.py"
    src.write_text("from numba import njit\n")
    sources = kernels._kernel_sources()
    monkeypatch.setattr(kernels, "_kernel_sources", lambda: [*sources, src])
    assert marker_path() != before


def test_generate_cli_announces_the_compile_only_the_first_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROBUSTLAB_CACHE_DIR", str(tmp_path / "cache"))
    data = tmp_path / "data" / "n01440764"
    data.mkdir(parents=True)
    rgb = np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(data / "a.png")
    argv = [
        "generate",
        "imagenet-c",
        "--data",
        str(tmp_path / "data"),
        "--shifts",
        "contrast",
        "--level",
        "1",
        "--workers",
        "0",
        "--quiet",
    ]
    assert main([*argv, "--out", str(tmp_path / "o1")]) == 0
    assert "first run only" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "o2")]) == 0
    assert "first run only" not in capsys.readouterr().err
    # a run without corruptions never compiles them
    marker_path().unlink()
    assert (
        main(
            [
                "evaluate",
                "lite0",
                "--data",
                str(tmp_path / "data"),
                "--db",
                str(tmp_path / "r.duckdb"),
                "--workers",
                "0",
                "--quiet",
            ]
        )
        == 0
    )
    assert "first run only" not in capsys.readouterr().err and not marker_path().exists()
