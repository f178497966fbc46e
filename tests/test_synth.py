"""robustlab synth: the prompt grid as data, a real tiny diffusers pipeline saved to disk and
loaded back, the published layout, the manifest, resume (also after kill -9), refusal of a
changed identity, counted skips and one-line errors."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import kill_after_first_file, save_tiny_text2image
from PIL import Image

from robustlab.cli import main
from robustlab.data.labels import get_label_space
from robustlab.data.sources import discover
from robustlab.errors import InputChangedError, InputError, MissingResourceError
from robustlab.seeding import derive_seed
from robustlab.shifts.generative.text2image import TextToImage
from robustlab.workflows.imagenet_d.synth.prompts import (
    build_grid,
    class_display,
    load_templates,
    load_vocabulary,
    make_prompt,
    nuisance_display,
    select_classes,
)
from robustlab.workflows.imagenet_d.synth.run import synth

TINY = dict(steps=2, height=64, width=64)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return save_tiny_text2image(tmp_path_factory.mktemp("t2i") / "tiny-sd")


@pytest.fixture(scope="module")
def backend(checkpoint):
    return TextToImage(checkpoint, device="cpu")


def _pngs(root: Path) -> dict[str, np.ndarray]:
    return {
        p.relative_to(root).as_posix(): np.asarray(Image.open(p))
        for p in sorted(root.rglob("*.png"))
    }


# ----------------------------------------------------------------------------- the grid
def test_builtin_vocabularies_and_names():
    sizes = {v: len(load_vocabulary(v).names) for v in ("background", "texture", "material")}
    assert sizes == {"background": 468, "texture": 47, "material": 32}
    assert nuisance_display("apartment_building-outdoor-s") == "apartment building outdoor"
    assert class_display("coffee/french press") == "coffee or french press"
    assert (
        make_prompt("a photo of {a_cls} in the {nuisance}", "alarm clock", "living_room-s")
        == "a photo of an alarm clock in the living room"
    )


def test_grid_is_classes_by_nuisances_by_n_with_seed_rule_seeds():
    space = get_label_space("imagenet-d")
    vocabs = [load_vocabulary("texture"), load_vocabulary("material")]
    classes = select_classes(space, ["backpack", "banana", "2"])  # folder, name, index
    assert classes == [1, 2]
    grid = build_grid(
        space, vocabs, classes=classes, per_pair=3, seed=7, templates=load_templates(None)
    )
    assert len(grid) == 2 * (47 + 32) * 3
    assert len({g.file for g in grid}) == len(grid)
    item = next(g for g in grid if g.file == "material/banana/glass_002.png")
    assert item.prompt == "a photo of a banana made of glass"
    assert item.seed == derive_seed(7, "banana", "synth/material/glass", 2)
    # An image's seed does not depend on which other classes were asked for.
    alone = build_grid(
        space, vocabs[1:], classes=[2], per_pair=3, seed=7, templates=load_templates(None)
    )
    assert {g.file: g.seed for g in alone}.items() <= {g.file: g.seed for g in grid}.items()


def test_user_vocabulary_templates_and_label_space(tmp_path):
    vocab = tmp_path / "weather.csv"
    vocab.write_text("name,comment\nfoggy day,x\nheavy rain,y\n")
    tpl = tmp_path / "templates.csv"
    tpl.write_text('subset,template\nweather,"{a_cls} on a {nuisance}"\n')
    space = get_label_space("imagenet9")
    v = load_vocabulary(vocab)
    assert v.subset == "weather" and v.names == ("foggy day", "heavy rain")
    grid = build_grid(
        space,
        [v],
        classes=select_classes(space, ["dog"]),
        per_pair=1,
        seed=0,
        templates=load_templates(tpl),
    )
    assert [g.file for g in grid] == [
        "weather/00_dog/foggy_day_000.png",
        "weather/00_dog/heavy_rain_000.png",
    ]
    assert grid[0].prompt == "a dog on a foggy day"


def test_bad_vocabularies_templates_and_classes_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("code,label\n1,foggy\n")
    with pytest.raises(InputError, match="needs a 'name' column"):
        load_vocabulary(bad)
    with pytest.raises(MissingResourceError, match="neither background"):
        load_vocabulary(tmp_path / "nope.csv")
    with pytest.raises(InputError, match="not usable"):
        load_templates({"background": "a {thing} in {nuisance}"})
    with pytest.raises(InputError, match="not a class of label space"):
        select_classes(get_label_space("imagenet-d"), ["unicorn"])


# ----------------------------------------------------------------------------- synthesis
def test_synth_writes_the_layout_manifest_and_resumes(tmp_path, checkpoint, backend):
    out = tmp_path / "out"
    seen = {}

    class Watching:  # the real backend; records what was on disk at its first call
        def __getattr__(self, name):
            return getattr(backend, name)

        def __call__(self, *a, **k):
            seen.setdefault("manifest", (out / "manifest.json").is_file())
            seen.setdefault("pngs", len(list(out.rglob("*.png"))))
            return backend(*a, **k)

    res = synth(
        out,
        checkpoint,
        classes=["backpack", "banana"],
        nuisances=["background", "texture"],
        max_nuisances=2,
        per_pair=2,
        seed=3,
        pipeline=Watching(),
        batch_size=3,
        **TINY,
    )
    assert seen == {"manifest": True, "pngs": 0}  # recorded before the first image
    assert (res.planned, res.written, res.existing, res.failures) == (16, 16, 0, [])
    images = _pngs(out)
    assert sorted(images)[:2] == [
        "background/backpack/bedroom_000.png",
        "background/backpack/bedroom_001.png",
    ]
    assert all(a.shape == (64, 64, 3) and a.dtype == np.uint8 for a in images.values())
    assert len({a.tobytes() for a in images.values()}) == 16  # every seed draws its own image

    m = json.loads((out / "manifest.json").read_text())
    assert m["format"] == "robustlab-synth/1"
    ident = m["identity"]
    assert (
        ident["checkpoint_fingerprint"] == backend.fingerprint
        and ident["sampler"] == "DDIMScheduler"
    )
    assert (ident["steps"], ident["seed"], ident["height"]) == (2, 3, 64)
    assert m["runs"][-1]["status"] == "complete" and m["runs"][-1]["batch_size"] == 3
    assert m["counts"]["written"] == 16 and m["failures"] == []
    with open(out / "prompts.csv") as fh:
        rows = {r["file"]: r for r in csv.DictReader(fh)}
    r = rows["texture/banana/dotted_001.png"]
    assert r["prompt"] == "a photo of a banana with a dotted texture"
    assert int(r["seed"]) == derive_seed(3, "banana", "synth/texture/dotted", 1)
    with open(out / "labels.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 16
    # The folder is an evaluate/mine input: labels.csv gives every image its class folder.
    samples = discover(out)
    assert len(samples) == 16 and {s.class_name for s in samples} == {"backpack", "banana"}
    assert all(get_label_space("imagenet-d").index_of(s.class_name) in (1, 2) for s in samples)

    # Same image from a batch of one as from a batch of three (one generator per image).
    one = backend([r["prompt"]], [int(r["seed"])], **TINY)[0]
    np.testing.assert_array_equal(one, images["texture/banana/dotted_001.png"])

    # Rerun: nothing to do, the model is not even loaded; files untouched.
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}
    again = synth(
        out,
        checkpoint,
        classes=["backpack", "banana"],
        nuisances=["background", "texture"],
        max_nuisances=2,
        per_pair=2,
        seed=3,
        device="cpu",
        **TINY,
    )
    assert (again.written, again.existing, again.backend) == (0, 16, None)
    assert before == {p: p.stat().st_mtime_ns for p in out.rglob("*.png")}

    # A rerun may grow the grid (one more image per pair); the old images stay.
    more = synth(
        out,
        checkpoint,
        classes=["backpack"],
        nuisances=["texture"],
        max_nuisances=2,
        per_pair=3,
        seed=3,
        pipeline=backend,
        **TINY,
    )
    assert (more.written, more.existing) == (2, 4)
    assert len(json.loads((out / "manifest.json").read_text())["runs"]) == 3


def test_changed_identity_is_refused_naming_what_changed(tmp_path, checkpoint, backend):
    out = tmp_path / "out"
    kw = dict(classes=["banana"], nuisances=["material"], max_nuisances=1, pipeline=backend)
    synth(out, checkpoint, seed=1, **kw, **TINY)
    with pytest.raises(InputChangedError, match=r"steps \(2 -> 3\)"):
        synth(out, checkpoint, seed=1, **kw, steps=3, height=64, width=64)
    with pytest.raises(InputChangedError, match="seed") as exc:
        synth(out, checkpoint, seed=2, **kw, **TINY)
    assert "\n" not in str(exc.value)
    with pytest.raises(InputChangedError, match="template of material"):
        synth(
            out, checkpoint, seed=1, templates={"material": "{a_cls} of {nuisance}"}, **kw, **TINY
        )
    other = save_tiny_text2image(tmp_path / "other-sd")  # same architecture, a new config file
    (other / "unet" / "config.json").write_text(
        (other / "unet" / "config.json")
        .read_text()
        .replace('"sample_size": 8', '"sample_size": 16')
    )
    with pytest.raises(InputChangedError, match="checkpoint_fingerprint"):
        synth(
            out, other, seed=1, classes=["banana"], nuisances=["material"], max_nuisances=1, **TINY
        )


def test_a_failing_prompt_is_a_counted_skip(tmp_path, checkpoint, backend):
    out = tmp_path / "out"

    class FailsOnBanana:  # the real backend, except that the model chokes on one class
        def __getattr__(self, name):
            return getattr(backend, name)

        def __call__(self, prompts, seeds, **k):
            if any("banana" in p for p in prompts):
                raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
            return backend(prompts, seeds, **k)

    kw = dict(
        classes=["backpack", "banana"], nuisances=["texture"], max_nuisances=2, seed=0, **TINY
    )
    res = synth(out, checkpoint, pipeline=FailsOnBanana(), batch_size=4, **kw)
    assert res.written == 2 and len(res.failures) == 2
    assert {f for f, _ in res.failures} == {
        "texture/banana/blotchy_000.png",
        "texture/banana/dotted_000.png",
    }
    assert all(
        r == "the pipeline failed: RuntimeError: CUDA error: an illegal memory access"
        for _, r in res.failures
    )
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["failed"] == 2 and len(m["failures"]) == 2
    with open(out / "labels.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 2  # only images that exist
    fixed = synth(out, checkpoint, pipeline=backend, **kw)
    assert (fixed.written, fixed.existing, fixed.failures) == (2, 2, [])
    assert json.loads((out / "manifest.json").read_text())["failures"] == []


@pytest.mark.long
def test_bad_checkpoint_folders_are_one_line_errors(tmp_path, capsys):
    ckpt = tmp_path / "ckpt"  # apart from --out: an output inside an input is refused first
    ckpt.mkdir()
    with pytest.raises(MissingResourceError, match="is not a folder"):
        TextToImage(ckpt / "nope")
    with pytest.raises(MissingResourceError, match="no model_index.json"):
        TextToImage(ckpt)
    (ckpt / "model_index.json").write_text('{"_class_name": "StableDiffusionPipeline"}')
    with pytest.raises(InputError, match="cannot load a text-to-image pipeline") as exc:
        TextToImage(ckpt, device="cpu")
    assert "\n" not in str(exc.value)
    for argv, expected in (
        (["--checkpoint", str(ckpt / "nope")], "is not a folder"),
        (["--checkpoint", str(ckpt)], "cannot load a text-to-image pipeline"),
        (["--checkpoint", str(ckpt), "--classes", "unicorn"], "'unicorn' is not a class"),
    ):
        code = main(["synth", "--out", str(tmp_path / "o"), "--device", "cpu", *argv])
        lines = capsys.readouterr().err.strip().splitlines()
        # One error line, optionally followed by one hint line; never a traceback.
        assert code == 2 and expected in lines[0] and len(lines) <= 2, lines
        assert all(line.startswith("  hint: ") for line in lines[1:]), lines


def test_cli_rate_is_the_drawing_rate_with_the_loading_apart(tmp_path, checkpoint, capsys):
    """The images/s figure counts drawing only; the pipeline's loading is said apart."""
    argv = ["--checkpoint", str(checkpoint), "--classes", "backpack", "--nuisances"]
    argv += ["background", "--max-nuisances", "1", "--size", "64", "--steps", "2"]
    assert main(["synth", "--out", str(tmp_path / "o"), "--device", "cpu", *argv]) == 0
    out = capsys.readouterr().out
    m = re.search(
        r"1 written, 0 already there, 0 failed \(1 planned; ([\d.]+) s: ([\d.]+) s planning "
        r"and loading the pipeline, ([\d.]+) s drawing at ([\d.e+-]+) images/s\)",
        out,
    )
    assert m, out
    total, loading, drawing, rate = map(float, m.groups())
    assert total == pytest.approx(loading + drawing, abs=0.11) and loading > 0
    assert 1 / rate == pytest.approx(drawing, abs=0.06)


@pytest.mark.slow
def test_cli_resumes_after_kill_9(tmp_path, checkpoint, backend):
    """A real process killed with SIGKILL mid-run: the rerun completes the grid and every
    image equals the one an uninterrupted run draws (slow: two interpreter start-ups that
    import torch and diffusers)."""
    import torch

    out = tmp_path / "killed"
    args = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "synth",
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--classes",
        "backpack,banana,bucket",
        "--nuisances",
        "texture",
        "--max-nuisances",
        "8",
        "--steps",
        "2",
        "--size",
        "64",
        "--device",
        "cpu",
        "--quiet",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # one thread everywhere: identical float sums
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(out.rglob("*.png"))) < 3 and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = _pngs(out)  # every file there decodes: none is half-written
    assert 3 <= len(partial) < 24
    assert json.loads((out / "manifest.json").read_text())["runs"][-1]["status"] == "running"
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert f"{24 - len(partial)} written, {len(partial)} already there" in done.stdout
    assert not [p for p in out.rglob("*") if p.name.endswith(".rltmp")]
    ref = tmp_path / "ref"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        synth(
            ref,
            checkpoint,
            classes=["backpack", "banana", "bucket"],
            nuisances=["texture"],
            max_nuisances=8,
            pipeline=backend,
            **TINY,
        )
    finally:
        torch.set_num_threads(threads)
    resumed, expected = _pngs(out), _pngs(ref)
    assert resumed.keys() == expected.keys() and len(expected) == 24
    for k in expected:
        np.testing.assert_array_equal(resumed[k], expected[k], err_msg=k)


# ----------------------------------------------------------------------------- on Ray
def _bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.png"))}


def test_synth_on_ray_finishes_a_local_folder_with_the_local_bytes(
    ray_cluster, tmp_path, checkpoint, backend, two_torch_threads
):
    """What a killed local run leaves (some images, a writer's temp file, a running
    manifest), finished once on Ray and once locally: the same missing images redrawn, byte
    for byte, nothing duplicated or left over. The actors load the checkpoint from its path
    and write with the local backend's work unit, on the batches the local backend cuts
    (a diffusion pipeline's pixels move by a unit here and there with its batch). The
    session cluster declares a GPU, so the actor takes the ``num_gpus=1`` path (torch
    finds no CUDA there and draws on the CPU)."""
    import shutil

    kw = dict(
        classes=["backpack", "banana"],
        nuisances=["texture"],
        max_nuisances=2,
        per_pair=2,
        seed=5,
        batch_size=3,
        **TINY,
    )
    started = tmp_path / "started"
    assert synth(started, checkpoint, pipeline=backend, **kw).written == 8
    lost = sorted(_bytes(started))[1::3]  # three images: one batch of three to redraw
    for name in lost:
        (started / name).unlink()
    (started / lost[0]).with_name(f".{Path(lost[0]).name}.999999999.rltmp").write_bytes(b"x")
    out, here = tmp_path / "ray", tmp_path / "local"
    shutil.copytree(started, out)
    shutil.copytree(started, here)

    res = synth(out, checkpoint, backend="ray", **kw)
    assert (res.planned, res.written, res.existing, res.failures) == (8, 3, 5, [])
    assert synth(here, checkpoint, pipeline=backend, **kw).written == 3
    assert _bytes(out) == _bytes(here) and len(_bytes(out)) == 8
    assert res.stages["synth"]["items"] == 3 and res.stages["wall_s"] > 0
    assert res.stages["synth"]["threads"] == 2  # the node's CPUs, as the local pipeline's
    assert res.stages["actor start"]["items"] == 1  # one pipeline actor, loaded once
    left = sorted(p.name for p in out.rglob("*") if p.is_file() and p.suffix != ".png")
    assert left == ["labels.csv", "manifest.json", "prompts.csv"]  # no lock file left
    m = json.loads((out / "manifest.json").read_text())
    run = m["runs"][-1]
    assert (run["backend"], run["status"], run["batch_size"]) == ("ray", "complete", 3)
    assert run["device"] == "cpu" and run["pipeline"]["fingerprint"] == backend.fingerprint
    assert m["counts"]["written_this_run"] == 3 and m["failures"] == []
    with open(out / "labels.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 8
    # Nothing left to draw: no cluster is asked for anything.
    assert synth(out, checkpoint, backend="ray", **kw).existing == 8


@pytest.mark.slow
def test_synth_on_ray_from_the_cli_resumes_after_kill_9(
    ray_cluster, tmp_path, checkpoint, backend, two_torch_threads
):
    """``robustlab synth --backend ray --address`` on the session cluster, its driver killed
    with SIGKILL after the first image: the rerun finishes the grid, each image the one an
    uninterrupted local run draws (slow: two interpreters importing Ray and diffusers). The
    local reference computes with the 2 threads of the cluster's actor: bytes depend on it."""
    out = tmp_path / "killed"
    args = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "synth",
        "--checkpoint",
        str(checkpoint),
        "--out",
        str(out),
        "--classes",
        "backpack,banana",
        "--nuisances",
        "texture",
        "--max-nuisances",
        "6",
        "--steps",
        "2",
        "--size",
        "64",
        "--batch-size",
        "1",
        "--backend",
        "ray",
        "--address",
        ray_cluster,
        "--quiet",
    ]
    kill_after_first_file(args, out, "*.png")
    partial = _bytes(out)
    assert 1 <= len(partial) < 12
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert f"{12 - len(partial)} written, {len(partial)} already there" in done.stdout
    assert "ray stages: synth" in done.stdout
    assert not [p for p in out.rglob("*") if p.name.endswith(".rltmp")]
    ref = tmp_path / "ref"
    synth(
        ref,
        checkpoint,
        classes=["backpack", "banana"],
        nuisances=["texture"],
        max_nuisances=6,
        batch_size=1,
        pipeline=backend,
        **TINY,
    )
    assert _bytes(out) == _bytes(ref) and len(_bytes(ref)) == 12


def test_synth_on_ray_errors_are_one_line(tmp_path, checkpoint, backend, capsys):
    """An unreachable cluster, --address without the Ray backend, a loaded pipeline for Ray
    and a Python without Ray: one line each, before anything is written."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "o"
    base = ["synth", "--checkpoint", str(checkpoint), "--out", str(out), "--size", "64"]
    assert main([*base, "--backend", "ray", "--address", f"127.0.0.1:{port}"]) == 3
    err = capsys.readouterr().err
    assert f"cannot reach a Ray cluster at 127.0.0.1:{port}" in err and "Traceback" not in err
    assert main([*base, "--address", "127.0.0.1:6379"]) == 2
    assert "add --backend ray" in capsys.readouterr().err
    with pytest.raises(InputError, match="the Ray backend loads one per worker"):
        synth(out, checkpoint, pipeline=backend, backend="ray", **TINY)
    assert not out.exists()

    no_ray = (
        "import sys\n"
        "class NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoRay())\n"
        "from robustlab.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", no_ray, *base, "--backend", "ray"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "needs Ray" in proc.stderr and "pip install 'robustlab[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()
