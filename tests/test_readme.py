"""The README's examples run as written, so they cannot rot.

Every fenced ``python`` and ``bash`` block of README.md is extracted and executed in a
tiny working folder made here from two demo photos (``val/`` in ImageNet class folders,
``photo.jpg``, ``boxes.csv``): the python block both in this process and as a plain
script (no ``__main__`` guard) in a subprocess, each bash line as a shell command. The
lines that need what only a user has (their checkpoints, the published ImageNet-E archive,
a browser) are listed in ``UNRUNNABLE`` with the reason; any other line that fails, fails
the test, and a listed line that no longer exists fails it too, so the list stays honest.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from robustlab.data.labels import get_label_space
from robustlab.demo import demo_photos

README = Path(__file__).resolve().parents[1] / "README.md"

# Lines (after removing "[...]" optional parts and trailing comments) not run, and why.
UNRUNNABLE = {
    "pip install -e . && robustlab demo": "installs; the demo is test_demo.py's job",
    'pip install -e ".[test]" && python -m pytest': "installs; this is the test suite "
    "(.ci/run runs it)",
    "pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu": "installs "
    "from the PyTorch index (no network in tests); torch is already installed",
    "robustlab evaluate timm:resnet50 --weights r50.pth --data imagenet-c/": "needs the user's ResNet-50 weights",
    "robustlab segment torchvision:deeplabv3_resnet50 --weights dlv3.pth --data val/ --masks masks/": "needs the user's DeepLabV3 weights",
    "robustlab evaluate lite0 --data ImageNet-E/": "needs the published ImageNet-E archive",
    "robustlab synth --checkpoint sd15/ --out imagenet-d/ --per-pair 1": "needs the user's diffusers checkpoint",
    "robustlab mine --data imagenet-d/ --label-space imagenet-d --out hard/": "reads synth's output",
    "robustlab review --data hard/ --predictions hard/hard.csv --db robustlab.duckdb "
    "--annotator alice": "a server waiting for a browser; reads mine's output",
    "robustlab review --data hard/ --db robustlab.duckdb --export final.csv -k 2": "needs review decisions on mine's output",
    "robustlab evaluate lite0 --data hard/ --labels final.csv": "reads review's export",
    "robustlab train lite0 --data val/ --method corruption-aug --holdout-family blur": "its "
    "class-stratified split needs two images per class (the test folder has one); "
    "tests/test_train_methods.py runs it",
    "robustlab evaluate lite0 --data val/ --suite imagenet-c --shift-device cuda": "needs a "
    "CUDA GPU; tests/test_evaluate_shift_device.py runs --shift-device cpu",
    "pip install 'robustlab[ray]'": "installs; the Ray extra is part of the test extra",
    "ray start --head --port 6379": "starts cluster daemons on a fixed port; "
    "test_ray_backend.py's two-node test runs this recipe",
    "ray start --address HEAD:6379": "needs a head node (the two-node test)",
    "robustlab generate imagenet-c --data /nfs/val/ --out /nfs/imagenet-c/ --backend ray "
    "--address HEAD:6379": "needs a Ray cluster (the two-node test)",
    "robustlab evaluate lite0 --data /nfs/val/ --suite imagenet-c --backend ray "
    "--address HEAD:6379": "needs a Ray cluster (the two-node test)",
    "robustlab evaluate lite0 --data /nfs/val/ --suite imagenet-c --backend ray "
    "--address HEAD:6379 --shift-device cuda": "needs a Ray cluster with GPUs; "
    "test_ray_shift_device.py runs --shift-device cpu on Ray",
    "robustlab synth --checkpoint /nfs/sd-1.5/ --out /nfs/imagenet-d/ --backend ray "
    "--address HEAD:6379": "needs a Ray cluster and the user's diffusers checkpoint "
    "(test_synth.py runs synth on Ray with a tiny checkpoint)",
}

PHOTOS = ["cat/chelsea.png", "rocket/rocket.jpg"]
MAX_SIDE = 160


def readme_blocks(lang: str) -> list[str]:
    """The fenced ``lang`` code blocks of README.md, in order."""
    return re.findall(rf"^```{lang}\n(.*?)^```", README.read_text(), flags=re.MULTILINE | re.DOTALL)


def bash_commands() -> list[str]:
    """Each bash line as a command: comments and ``[optional]`` parts removed, and
    ``a|b|c`` alternatives (as in ``robustlab list shifts|suites|models``) expanded."""
    out = []
    for block in readme_blocks("bash"):
        for line in block.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line)
            line = re.sub(r"\s+\[--[^\]]*\]", "", line).strip()
            if not line:
                continue
            alt = re.fullmatch(r"(.* )(\w+(?:\|\w+)+)", line)
            out += [alt.group(1) + w for w in alt.group(2).split("|")] if alt else [line]
    return out


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """``val/<wnid>/<photo>`` (two demo photos and their mirror images, scaled to at most
    160 px), ``photo.jpg``
    and ``boxes.csv`` (the photos' object boxes) in a fresh current folder."""
    demo, imagenet = get_label_space("demo"), get_label_space("imagenet1k")
    with open(tmp_path / "boxes.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "x0", "y0", "x1", "y1"])
        for p in (p for p in demo_photos() if p.id in PHOTOS):
            wnid = imagenet.folders[demo.imagenet_ids[demo.index_of(p.class_name)][0]]
            img = Image.open(p.source).convert("RGB")
            s = MAX_SIDE / max(img.size)
            img = img.resize((round(img.width * s), round(img.height * s)), Image.BILINEAR)
            x0, y0, x1, y1 = (round(v * s) for v in p.bbox)
            (tmp_path / "val" / wnid).mkdir(parents=True)
            # the photo and its mirror image: train's split needs two images per class
            for name, im, box in (
                (Path(p.id).stem + ".png", img, (x0, y0, x1, y1)),
                (
                    Path(p.id).stem + "_mirror.png",
                    img.transpose(Image.FLIP_LEFT_RIGHT),
                    (img.width - x1, y0, img.width - x0, y1),
                ),
            ):
                im.save(tmp_path / "val" / wnid / name)
                w.writerow([f"{wnid}/{name}", *box])
    img.save(tmp_path / "photo.jpg")
    # absolute import paths: worker processes start in the new current folder, where a
    # relative PYTHONPATH=src would find another installed robustlab
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_unrunnable_list_names_only_readme_lines():
    commands = bash_commands()
    assert "robustlab list shifts" in commands and "robustlab results --format markdown" in commands
    assert set(UNRUNNABLE) <= set(commands), set(UNRUNNABLE) - set(commands)


@pytest.mark.slow
def test_readme_python_runs_in_process_and_as_plain_script(workdir):
    (code,) = readme_blocks("python")
    assert "__main__" not in code.split("```")[0]
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (the README, run as written)
    df = namespace["df"]
    # one row per cell: clean + 15 corruptions x 5 severities, each over the four photos
    assert len(df) == 76 and set(df["n"]) == {4}
    assert df.attrs["run_id"]

    # the same code as a plain script (no __main__ guard) with the default worker
    # processes, in a fresh folder (a new database, so the workers do run): a worker
    # re-running the script used to die ("DataLoader worker exited unexpectedly")
    script = workdir / "script"
    script.mkdir()
    shutil.copytree(workdir / "val", script / "val")
    shutil.copy(workdir / "photo.jpg", script)
    (script / "example.py").write_text(code + '\nprint("ROWS", len(df))\n')
    done = subprocess.run(
        [sys.executable, "example.py"],
        capture_output=True,
        text=True,
        check=False,
        cwd=script,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("ROWS 76") == 1, done.stdout  # the script ran once, to the end


@pytest.mark.slow
def test_readme_bash_commands_run(workdir):
    for cmd in bash_commands():
        if cmd in UNRUNNABLE:
            continue
        if "RUN_A" in cmd:  # the README's placeholders: two runs the lines above stored
            from robustlab.store import Store

            ids = list(Store("robustlab.duckdb").runs()["run_id"])
            assert len(ids) >= 2, f"{cmd}: the README's earlier lines stored {len(ids)} run(s)"
            cmd = cmd.replace("RUN_A", ids[0]).replace("RUN_B", ids[1])
        done = subprocess.run(
            cmd, shell=True, capture_output=True, text=True, check=False, timeout=600
        )
        assert done.returncode == 0, f"{cmd}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
