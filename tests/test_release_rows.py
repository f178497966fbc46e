"""``generate cifar-c --out-layout npy``: the cells straight into CIFAR-10-C's arrays, no file
per cell; the same bytes as the folder layout's arrays, resumable, and read back by
``evaluate`` as the release is."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import dead_pid

import robustlab
from robustlab.errors import InputError, InputChangedError
from robustlab.workflows.generate import core as generate_core
from robustlab.workflows.generate import generate
from robustlab.workflows.generate import release_rows

pytestmark = pytest.mark.xdist_group("release_rows")

PHOTOS = Path(__file__).parent / "fixtures" / "shared-mini" / "imagenet-samples"
# Real photos filed under CIFAR-10 classes (cifar10 label space).
CIFAR = {
    "bird": ["n01514859_hen.JPEG", "n01532829_house_finch.JPEG"],
    "dog": ["n02087046_toy_terrier.JPEG", "n02085782_Japanese_spaniel.JPEG"],
    "frog": ["n01641577_bullfrog.JPEG"],
}
SHIFTS = "gaussian_noise,frost"
ARRAYS = ("gaussian_noise.npy", "frost.npy", "labels.npy")
KW = dict(shifts=SHIFTS, workers=0, progress=False)


def _data(root: Path) -> Path:
    for cls, files in CIFAR.items():
        (root / cls).mkdir(parents=True)
        for f in files:
            shutil.copy(PHOTOS / f, root / cls / f)
    return root


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The same photos generated in both layouts."""
    root = tmp_path_factory.mktemp("rows")
    data = _data(root / "data")
    folders = generate("cifar-c", data, root / "folders", **KW)
    npy = generate("cifar-c", data, root / "npy", out_layout="npy", **KW)
    return root, folders, npy


def _same_arrays(a: Path, b: Path) -> None:
    for name in ARRAYS:
        x, y = np.load(a / name), np.load(b / name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def test_the_arrays_are_the_folder_layouts_byte_for_byte(made):
    root, folders, npy = made
    _same_arrays(root / "folders", root / "npy")
    assert np.load(root / "npy" / "frost.npy").shape == (25, 32, 32, 3)
    assert folders.written == npy.written == 5 * 10
    # no cell file, no partial state left: the arrays, labels and the records
    names = {p.name for p in (root / "npy").iterdir()}
    assert names == {*ARRAYS, "manifest.json", ".hashes"}
    m = json.loads((root / "npy" / "manifest.json").read_text())
    assert m["cell_layout"] == "npy" and m["layout"].startswith("<out>/<shift>.npy")
    assert m["release"]["shifts"] == ["gaussian_noise", "frost"]
    assert m["release"]["rows"] == sorted(f"{c}/{f}" for c, fs in CIFAR.items() for f in fs)
    assert m["counts"]["written"] == 50 and m["runs"][-1]["status"] == "complete"


def test_a_rerun_of_a_finished_folder_draws_nothing(made, tmp_path):
    root, _, _ = made
    out = tmp_path / "npy"
    shutil.copytree(root / "npy", out)
    before = {n: (out / n).stat().st_mtime_ns for n in ARRAYS}
    again = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert (again.written, again.skipped_existing) == (0, 50)
    assert {n: (out / n).stat().st_mtime_ns for n in ARRAYS} == before


def test_evaluate_reads_the_arrays_with_the_folders_numbers(made, tmp_path):
    root, _, _ = made
    kw = dict(db=tmp_path / "r.duckdb", shifts="frost", levels="1,5", workers=0, progress=False)
    on_npy = robustlab.evaluate("lite0", data=root / "npy", **kw).table
    on_gen = robustlab.evaluate("lite0", data=root / "folders", **kw).table
    key = ["shift", "level", "n", "top1", "top5"]
    npy = on_npy.assign(level=on_npy["level"].astype(str))[key].reset_index(drop=True)
    gen = on_gen[on_gen["shift"] != "clean"]
    gen = gen.assign(level=gen["level"].astype(str))[key].reset_index(drop=True)
    assert len(npy) == 2 and npy.equals(gen)
    with pytest.raises(InputError, match="labels.npy gives the labels"):
        robustlab.evaluate("lite0", data=root / "npy", labels_csv=tmp_path / "x.csv", **kw)


def test_an_interrupted_run_resumes_without_drawing_twice(made, tmp_path, monkeypatch):
    root, _, _ = made
    real = generate_core.process_sample
    calls = []

    def dies_on_the_third(sample, job=None):
        calls.append(sample.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(sample, job)

    monkeypatch.setattr(generate_core, "process_sample", dies_on_the_third)
    out = tmp_path / "npy"
    with pytest.raises(KeyboardInterrupt):
        generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert not (out / "frost.npy").exists()  # nothing that looks finished
    done = (out / release_rows.PARTIAL / release_rows.DONE).read_text().split()
    assert done == calls[:2]
    m = json.loads((out / "manifest.json").read_text())
    assert m["runs"][-1]["status"] == "interrupted"
    monkeypatch.setattr(generate_core, "process_sample", real)
    with pytest.raises(InputError, match="no finished .npy arrays"):
        robustlab.evaluate("lite0", data=out, db=tmp_path / "r.duckdb", progress=False)
    again = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert (again.written, again.skipped_existing) == (30, 20)
    _same_arrays(root / "folders", out)
    assert not (out / release_rows.PARTIAL).exists()


def test_more_photos_later_copies_the_rows_already_made(made, tmp_path):
    root, _, _ = made
    out = tmp_path / "npy"
    first = generate("cifar-c", root / "data", out, out_layout="npy", limit=2, **KW)
    assert first.written == 20 and np.load(out / "frost.npy").shape == (10, 32, 32, 3)
    rest = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert (rest.written, rest.skipped_existing) == (30, 20)
    _same_arrays(root / "folders", out)


def test_a_photo_that_cannot_be_read_is_left_out_of_every_array(made, tmp_path):
    root, _, _ = made
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    (data / "dog" / "broken.JPEG").write_bytes(b"\xff\xd8 not a jpeg")
    out = tmp_path / "npy"
    res = generate("cifar-c", data, out, out_layout="npy", **KW)
    assert [sid for sid, _ in res.skipped_inputs] == ["dog/broken.JPEG"]
    _same_arrays(root / "folders", out)  # the compacted rows: the readable photos only
    m = json.loads((out / "manifest.json").read_text())
    assert "dog/broken.JPEG" not in m["release"]["rows"]
    again = generate("cifar-c", data, out, out_layout="npy", **KW)
    assert again.written == 0 and [sid for sid, _ in again.skipped_inputs] == ["dog/broken.JPEG"]
    m = json.loads((out / "manifest.json").read_text())
    assert [d["id"] for d in m["skipped_inputs"]] == ["dog/broken.JPEG"]


def test_worker_processes_write_the_same_rows(made, tmp_path):
    root, _, _ = made
    out = tmp_path / "npy"
    generate(
        "cifar-c", root / "data", out, out_layout="npy", shifts=SHIFTS, workers=2, progress=False
    )
    _same_arrays(root / "folders", out)


@pytest.mark.parametrize(
    "suite, kw, match",
    [
        ("imagenet-c", {}, "released as folders"),
        ("cifar-c", {"levels": "1-3"}, "all five severities"),
        ("cifar-c", {"keep_size": True}, "one image size"),
        ("cifar-c", {"fmt": "png"}, "--image-format does not apply"),
        ("cifar-c", {"backend": "ray"}, "Ray's nodes cannot"),
    ],
)
def test_requests_the_arrays_cannot_hold_are_refused_before_any_work(
    made, tmp_path, suite, kw, match
):
    root, _, _ = made
    with pytest.raises(InputError, match=match):
        generate(suite, root / "data", tmp_path / "out", out_layout="npy", **{**KW, **kw})
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_unknown_layout_and_a_url_are_refused(made, tmp_path):
    root, _, _ = made
    with pytest.raises(InputError, match="unknown out_layout"):
        generate("cifar-c", root / "data", tmp_path / "o", out_layout="zip", **KW)
    with pytest.raises(InputError, match="local folder"):
        generate("cifar-c", root / "data", "memory://rows/o", out_layout="npy", **KW)


def test_a_folder_keeps_its_layout(made, tmp_path):
    root, _, _ = made
    out = tmp_path / "f"
    shutil.copytree(root / "folders", out)
    with pytest.raises(InputChangedError, match="cell layout folders -> npy"):
        generate("cifar-c", root / "data", out, out_layout="npy", **KW)


def test_export_says_the_arrays_are_the_release_already(made, tmp_path):
    from robustlab.workflows.export import export

    root, _, _ = made
    with pytest.raises(InputError, match="CIFAR-10-C's .npy arrays"):
        export(root / "npy", tmp_path / "x", format="hf")


def test_the_command_line_flag(made, tmp_path, capsys):
    from robustlab.cli import main

    root, _, _ = made
    out = tmp_path / "c"
    argv = ["generate", "cifar-c", "--data", str(root / "data"), "--out", str(out)]
    assert main([*argv, "--shift", "frost", "--out-layout", "npy", "--workers", "0"]) == 0
    printed = capsys.readouterr().out  # one shift x 5 photos x 5 severities
    assert ": 25 written into the .npy arrays, 0 already there" in printed and "cells/s" in printed
    assert np.array_equal(np.load(out / "frost.npy"), np.load(root / "folders" / "frost.npy"))
    assert not (out / "frost").exists()


@pytest.mark.long
def test_a_killed_run_resumes_from_the_rows_it_recorded(tmp_path):
    """SIGKILL of the whole ``generate`` process once ``done.txt`` records its first batch:
    the rerun keeps those photos, draws the rest, and the arrays equal an unkilled run's."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from PIL import Image

    from robustlab.data.images import read_image
    from robustlab.pipeline import prepare
    from robustlab.suites import PROTOCOLS

    data = tmp_path / "data"
    small = {}
    for cls, files in CIFAR.items():
        for f in files:
            small[(cls, f)] = prepare(read_image(PHOTOS / f).rgb, PROTOCOLS["cifar-c"])
    n = 2 * release_rows.SYNC_EVERY + 40
    keys = sorted(small)
    for i in range(n):
        cls, f = keys[i % len(keys)]
        (data / cls).mkdir(parents=True, exist_ok=True)
        Image.fromarray(small[(cls, f)]).save(data / cls / f"{i:04d}_{Path(f).stem}.png")
    argv = ["generate", "cifar-c", "--data", str(data), "--out-layout", "npy", "--workers", "0"]
    import robustlab as pkg

    env = {**os.environ, "PYTHONPATH": str(Path(pkg.__file__).resolve().parents[1])}
    out = tmp_path / "killed"
    done = out / release_rows.PARTIAL / release_rows.DONE
    proc = subprocess.Popen(
        [sys.executable, "-m", "robustlab.cli", *argv, "--out", str(out), "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if done.is_file() and done.read_text().count("\n") >= release_rows.SYNC_EVERY:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    recorded = done.read_text().split()
    assert release_rows.SYNC_EVERY <= len(recorded) < n
    assert not (out / "frost.npy").exists()
    again = generate("cifar-c", data, out, out_layout="npy", workers=0, progress=False)
    assert again.skipped_existing == 95 * len(recorded)
    assert again.written == 95 * (n - len(recorded))
    whole = generate(
        "cifar-c", data, tmp_path / "whole", out_layout="npy", workers=0, progress=False
    )
    assert whole.written == 95 * n
    for f in sorted((tmp_path / "whole").glob("*.npy")):
        assert np.array_equal(np.load(out / f.name), np.load(f)), f.name


def test_a_run_killed_while_moving_the_arrays_finishes_the_move(made, tmp_path, monkeypatch):
    """Killed after the first array was moved into place: the rerun draws nothing, moves
    the rest and records the release."""
    import os as _os

    root, _, _ = made
    out = tmp_path / "npy"
    real = _os.replace
    moved = []

    def dies_after_one(src, dst):
        if Path(src).parent.name == release_rows.PARTIAL and moved:
            raise KeyboardInterrupt
        real(src, dst)
        if Path(src).parent.name == release_rows.PARTIAL:
            moved.append(Path(dst).name)

    monkeypatch.setattr(release_rows.os, "replace", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    monkeypatch.setattr(release_rows.os, "replace", real)
    assert moved == ["gaussian_noise.npy"] and not (out / "frost.npy").exists()
    again = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert (again.written, again.skipped_existing) == (0, 50)
    _same_arrays(root / "folders", out)
    assert json.loads((out / "manifest.json").read_text())["release"]["rows"]


def test_photos_without_a_label_are_skipped_before_they_are_drawn(made, tmp_path):
    root, _, _ = made
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    (data / "tench").mkdir()
    shutil.copy(PHOTOS / "n01440764_tench.JPEG", data / "tench")
    out = tmp_path / "npy"
    res = generate("cifar-c", data, out, out_layout="npy", **KW)
    assert res.written == 50  # the tench is not drawn
    assert [sid for sid, why in res.skipped_inputs if "labels.npy needs one" in why] == [
        "tench/n01440764_tench.JPEG"
    ]
    _same_arrays(root / "folders", out)
    again = generate("cifar-c", data, out, out_layout="npy", **KW)
    assert again.written == 0 and len(again.skipped_inputs) == 1
    only = tmp_path / "only"
    (only / "tench").mkdir(parents=True)
    shutil.copy(PHOTOS / "n01440764_tench.JPEG", only / "tench")
    with pytest.raises(InputError, match="labels.npy needs one per row"):
        generate("cifar-c", only, tmp_path / "o2", out_layout="npy", **KW)
    assert not (tmp_path / "o2").exists()


def test_a_leftover_partial_folder_of_a_finished_release_is_removed(made, tmp_path):
    root, _, _ = made
    out = tmp_path / "npy"
    shutil.copytree(root / "npy", out)
    (out / release_rows.PARTIAL).mkdir()
    (out / release_rows.PARTIAL / release_rows.PLAN).write_text("{}")
    again = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert again.written == 0 and not (out / release_rows.PARTIAL).exists()


def test_no_photo_made_writes_no_arrays(tmp_path):
    data = tmp_path / "data" / "bird"
    data.mkdir(parents=True)
    (data / "broken.png").write_bytes(b"\x89PNG not really")
    out = tmp_path / "npy"
    res = generate("cifar-c", tmp_path / "data", out, out_layout="npy", **KW)
    assert res.written == 0 and [sid for sid, _ in res.skipped_inputs] == ["bird/broken.png"]
    assert not list(out.glob("*.npy"))


def test_a_run_killed_while_compacting_the_arrays_finishes_on_rerun(made, tmp_path, monkeypatch):
    """A photo that cannot be read leaves its rows out, so the finish copies the done rows
    into new arrays instead of renaming. Interrupted after the first array (and with the
    temp file a hard kill would leave beside it), the rerun draws nothing, writes every
    array whole and removes the dead writer's temp file."""
    root, _, _ = made
    data = tmp_path / "data"
    shutil.copytree(root / "data", data)
    (data / "bird" / "broken.png").write_bytes(b"\x89PNG not really")
    out = tmp_path / "npy"
    real = release_rows.write_arrays

    def dies_after_one(folder, shifts, n, image, shape):
        real(folder, shifts[:1], n, image, shape)
        raise KeyboardInterrupt

    monkeypatch.setattr(release_rows, "write_arrays", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        generate("cifar-c", data, out, out_layout="npy", **KW)
    monkeypatch.setattr(release_rows, "write_arrays", real)
    assert (out / "gaussian_noise.npy").is_file() and not (out / "frost.npy").exists()
    left = out / f".frost.npy.{dead_pid()}.rltmp"  # what SIGKILL mid-copy leaves
    left.write_bytes(b"half an array")
    again = generate("cifar-c", data, out, out_layout="npy", **KW)
    assert (again.written, again.skipped_existing) == (0, 50)
    assert [sid for sid, _ in again.skipped_inputs] == ["bird/broken.png"]
    _same_arrays(root / "folders", out)  # the five readable photos, in id order
    assert not left.exists() and not (out / release_rows.PARTIAL).exists()
    rows = json.loads((out / "manifest.json").read_text())["release"]["rows"]
    assert len(rows) == 5 and "bird/broken.png" not in rows


def test_a_run_killed_before_its_manifest_names_the_arrays_records_them(
    made, tmp_path, monkeypatch
):
    """Every array moved into place, then interrupted before the manifest recorded the
    release: the rerun draws nothing, records the release and removes the partial state."""
    root, _, _ = made
    out = tmp_path / "npy"
    real = generate_core._finish

    def dies_before_the_manifest(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(generate_core, "_finish", dies_before_the_manifest)
    with pytest.raises(KeyboardInterrupt):
        generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    monkeypatch.setattr(generate_core, "_finish", real)
    assert all((out / name).is_file() for name in ARRAYS)
    assert not json.loads((out / "manifest.json").read_text()).get("release")
    assert (out / release_rows.PARTIAL / release_rows.PLAN).is_file()
    again = generate("cifar-c", root / "data", out, out_layout="npy", **KW)
    assert (again.written, again.skipped_existing) == (0, 50)
    _same_arrays(root / "folders", out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["release"]["rows"]) == 5
    assert not (out / release_rows.PARTIAL).exists()
