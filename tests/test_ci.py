"""``.ci/run`` does what the README tells a new user to do, and nothing more: the README's
set-up commands, as written and in their order, in a fresh virtual environment, and the
system packages the README names (issue 37)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"


def _setup_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Set-up")
    return text[start : text.index("\n## ", start + 1)]


def _bash_lines(section: str) -> list[str]:
    """The command lines of the section's bash blocks, trailing comments removed."""
    blocks = re.findall(r"^```bash\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    lines = [re.sub(r"\s+#.*$", "", ln).strip() for b in blocks for ln in b.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _ci_lines() -> list[str]:
    return [ln.strip() for ln in CI.read_text().splitlines() if ln.strip()]


def test_ci_runs_the_readmes_two_setup_commands_as_written_in_order():
    two = _bash_lines(_setup_section())[:2]
    assert two[0].startswith("pip install -e . ") and two[1].startswith('pip install -e ".[test]"')
    steps = [step.strip() for line in two for step in line.split("&&")]
    ci = _ci_lines()
    at = [ci.index(step) if step in ci else -1 for step in steps]
    assert -1 not in at, f"not in .ci/run as a line of its own: {steps[at.index(-1)]}"
    assert at == sorted(at), "the README's steps run in another order"


def test_ci_installs_into_a_fresh_venv_and_nothing_the_readme_does_not_name():
    ci = _ci_lines()
    assert 'python -m venv "$scratch/venv"' in ci and 'scratch="$(mktemp -d)"' in ci
    readme_steps = {s.strip() for ln in _bash_lines(_setup_section()) for s in ln.split("&&")}
    pip_lines = [ln for ln in ci if re.match(r"(python -m )?pip ", ln)]
    assert pip_lines and set(pip_lines) <= readme_steps, pip_lines


def test_ci_installs_the_system_packages_the_readme_names():
    def packages(line: str) -> set[str]:
        words = shlex.split(line.split(">")[0])
        return {w for w in words[words.index("install") + 1 :] if not w.startswith("-")}

    readme = [ln for ln in _bash_lines(_setup_section()) if ln.startswith("apt-get install")]
    ci = [ln for ln in _ci_lines() if ln.startswith("apt-get install")]
    assert len(readme) == 1 and len(ci) == 1
    assert (
        packages(readme[0])
        == packages(ci[0])
        == {
            "chromium",
            "fonts-noto-color-emoji",
            "fonts-symbola",
        }
    )


# What a README "Use" line needs beyond the base install, by what the line runs.
NEEDS = (
    (
        r"robustlab synth |robustlab data tiny-checkpoints|--inpainter |--bg-diffusion |"
        r"--edit-fill diffusers|ROBUSTLAB_INPAINTER=|ROBUSTLAB_BG_DIFFUSION=|"
        r"ROBUSTLAB_EDIT_FILL=diffusers",
        "[models]",
    ),
    (r"robustlab data icons", "[icons]"),
    (r"robustlab saliency ", "[saliency]"),
)


def test_every_use_line_that_needs_an_extra_says_which():
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Use")
    lines = _bash_lines_raw(text[start : text.index("\n## ", start + 1)])
    checked = 0
    for line in lines:
        command, _, comment = line.partition("  #")
        for pattern, extra in NEEDS:
            if re.search(pattern, command):
                assert comment.strip().startswith(extra), line
                checked += 1
    assert checked >= 8


def _bash_lines_raw(section: str) -> list[str]:
    """The section's bash lines, comments kept."""
    blocks = re.findall(r"^```bash\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL)
    return [ln for b in blocks for ln in b.splitlines() if ln.strip()]


@pytest.mark.long
def test_xdist_groups_take_effect_with_the_installed_pytest(tmp_path):
    """``--dist loadgroup`` (pyproject's addopts) must really group: with a pytest whose node
    ids xdist cannot suffix (9.2 beside xdist 3.8) the tests of one group are handed to
    different workers and each builds the module's fixture again, silently: the suite
    passes, only slower. Two tests that share a module fixture run under two workers here;
    the fixture must be built once and both ids must carry the group."""
    import subprocess
    import sys

    (tmp_path / "test_grouped.py").write_text(
        "import os, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def built():\n"
        "    with open(os.environ['BUILT_LOG'], 'a') as fh:\n"
        "        fh.write(os.environ.get('PYTEST_XDIST_WORKER', '-') + '\\n')\n"
        "pytestmark = pytest.mark.xdist_group('one')\n"
        + "".join(f"def test_{i}(built):\n    pass\n" for i in range(6))
    )
    log = tmp_path / "built.log"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "-v",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            str(tmp_path / "test_grouped.py"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "BUILT_LOG": str(log)},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "test_grouped.py::test_0@one" in proc.stdout, proc.stdout[-2000:]
    assert log.read_text().count("\n") == 1, f"fixture built by {log.read_text().split()}"
