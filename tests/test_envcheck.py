"""A torch/torchvision pair that does not fit together is one line naming both and the fix.

The failure is made for real: a subprocess imports a torchvision whose compiled extension
cannot be loaded (an overlay of the installed package whose ``_C*`` library is replaced by
bytes that are not a shared object, as a library built for another torch fails to load),
so torchvision's own import raises what users see: ``RuntimeError: operator torchvision::nms
does not exist``.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from robustlab.envcheck import PYPI_BUILD_COST, fix_command, install_advice, matching_torchvision

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture(scope="module")
def broken_torchvision(tmp_path_factory) -> Path:
    """A folder to put first on PYTHONPATH: the installed torchvision (symlinks) with its
    compiled extension replaced by an unloadable file."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        pytest.skip("torchvision is not installed")
    real = Path(spec.origin).parent
    root = tmp_path_factory.mktemp("tv")
    (root / "torchvision").mkdir()
    replaced = 0
    for entry in real.iterdir():
        if entry.name.startswith("_C") and entry.suffix in (".so", ".pyd"):
            (root / "torchvision" / entry.name).write_bytes(b"not a shared object\n" * 64)
            replaced += 1
        else:
            (root / "torchvision" / entry.name).symlink_to(entry)
    if not replaced:
        pytest.skip(f"no compiled _C extension found in {real}")
    return root


def _run(code_or_args, path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), SRC])}
    return subprocess.run(
        [sys.executable, *code_or_args], env=env, cwd=cwd, capture_output=True, text=True
    )


@pytest.mark.long
def test_the_overlay_reproduces_the_users_failure(broken_torchvision, tmp_path):
    r = _run(["-c", "import torchvision"], broken_torchvision, tmp_path)
    assert r.returncode != 0 and "torchvision::nms does not exist" in r.stderr


@pytest.mark.long
def test_cli_says_one_line_with_both_versions_and_the_fix(broken_torchvision, tmp_path):
    """The demo checks the pair first: one line, nothing printed or created before it."""
    r = _run(["-m", "robustlab.cli", "demo", "--out", "demo"], broken_torchvision, tmp_path)
    torch_v, tv_v = metadata.version("torch"), metadata.version("torchvision")
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        f"robustlab demo: error: torch {torch_v} and torchvision {tv_v} do not work together "
        f"(operator torchvision::nms does not exist); install a matching pair: "
        f"{install_advice(torch_v)}"
    ]
    assert r.stdout == "" and not (tmp_path / "demo").exists()


@pytest.mark.long
def test_python_api_raises_environment_problem(broken_torchvision, tmp_path):
    code = (
        "from robustlab.errors import EnvironmentProblem\n"
        "from robustlab.models import load_model\n"
        "try:\n    load_model('lite0')\n"
        "except EnvironmentProblem as e:\n    print('EP', e)\n"
    )
    r = _run(["-c", code], broken_torchvision, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("EP torch ") and "pip install --force-reinstall" in r.stdout


def test_the_installed_working_pair_is_what_the_fix_would_install():
    # the rule "torch 2.x <-> torchvision 0.(x+15)" checked against a pair that works here
    torch_v, tv_v = metadata.version("torch"), metadata.version("torchvision")
    assert matching_torchvision(torch_v) == tv_v.partition("+")[0]


def test_fix_command_uses_the_index_of_torchs_build():
    assert fix_command("2.13.0+cpu") == (
        "pip install --force-reinstall torch==2.13.0 torchvision==0.28.0 "
        "--index-url https://download.pytorch.org/whl/cpu"
    )
    assert fix_command("2.5.1+cu124").endswith(
        "torchvision==0.20.1 --index-url https://download.pytorch.org/whl/cu124"
    )
    assert (
        fix_command("2.14.1") == "pip install --force-reinstall torch==2.14.1 torchvision==0.29.1"
    )


def test_a_build_from_the_pytorch_index_also_gets_pypis_pair_and_both_costs():
    """Where the CPU index cannot be reached, its command cannot help: the line also names
    the same release from the default index, and what each costs."""
    cpu = install_advice("2.13.0+cpu")
    first, pypi = cpu.split("; where that index cannot be reached, ")
    assert first.startswith(fix_command("2.13.0+cpu")) and "190 MB" in first
    assert pypi.startswith(
        "the default index has the same release: "
        "pip install --force-reinstall torch==2.13.0 torchvision==0.28.0 ("
    )
    assert "--index-url" not in pypi and "CUDA build" in pypi and "GB" in pypi
    assert "the default index has" in install_advice("2.5.1+cu124")
    # a PyPI build: the command is already PyPI's, with its cost
    assert install_advice("2.14.1") == f"{fix_command('2.14.1')} (from PyPI; {PYPI_BUILD_COST})"
