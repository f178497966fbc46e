"""A generated folder keeps one identity: kill -9 and rerun, other seeds, changed sources,
concurrent writers (issue 8). Fixtures are small images made here: no shared data needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import dead_pid, kill_after_first_file
from PIL import Image

from robustlab.cli import main
from robustlab.errors import InputChangedError
from robustlab.workflows.generate import generate
from robustlab.records.manifest import LOCK, MANIFEST
from robustlab.files.atomic import TEMP_SUFFIX
from robustlab.files.hashes import HASHES

SHIFT = "gaussian_noise"


def _photo(rng: np.random.Generator, w: int = 96, h: int = 72) -> Image.Image:
    """A smooth colour field with a bright disc: photo-like enough for every shift."""
    coarse = rng.integers(0, 256, (h // 12 + 1, w // 12 + 1, 3), dtype=np.uint8)
    img = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC)).copy()
    yy, xx = np.mgrid[:h, :w]
    cy, cx = rng.uniform(0.3, 0.7) * h, rng.uniform(0.3, 0.7) * w
    img[(yy - cy) ** 2 + (xx - cx) ** 2 < (0.2 * h) ** 2] = rng.integers(150, 256, 3)
    return Image.fromarray(img)


def make_folder(root: Path, n: int, *, seed: int = 0) -> Path:
    """``n`` JPEGs in two class folders (``a``, ``b``)."""
    rng = np.random.default_rng(seed)
    for i in range(n):
        cls = root / ("a" if i % 2 == 0 else "b")
        cls.mkdir(parents=True, exist_ok=True)
        _photo(rng).save(cls / f"img{i:03d}.jpg", quality=90)
    return root


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, LOCK) and HASHES not in p.parts
    }


def _cli(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "robustlab.cli",
        "generate",
        "imagenet-c",
        "--data",
        str(data),
        "--out",
        str(out),
        "--workers",
        "0",
        "--quiet",
        *extra,
    ]


def _kill_after_first_file(cmd: list[str], out: Path) -> None:
    kill_after_first_file(cmd, out, "*.jpg")


@pytest.mark.long
def test_killed_generate_refuses_another_seed_and_resumes_the_same(tmp_path, capsys):
    data = make_folder(tmp_path / "data", 40)
    out = tmp_path / "out"
    _kill_after_first_file(_cli(data, out, "--shifts", SHIFT, "--seed", "0"), out)
    # The identity was on disk before the first file.
    m = json.loads((out / MANIFEST).read_text())
    assert m["seed"] == 0 and m["status"] == "running" and m["runs"][-1]["status"] == "running"
    assert len(m["samples"]) == 40
    partial = _files(out)
    assert 0 < len(partial) < 40 * 5

    with pytest.raises(InputChangedError, match=r"seed 0 -> 7") as err:
        generate("imagenet-c", data, out, shifts=[SHIFT], seed=7, workers=0, progress=False)
    assert "--out" in err.value.hint
    rc = main(
        [
            "generate",
            "imagenet-c",
            "--data",
            str(data),
            "--out",
            str(out),
            "--shifts",
            SHIFT,
            "--seed",
            "7",
            "--workers",
            "0",
            "--quiet",
        ]
    )
    assert rc == 2 and "seed 0 -> 7" in capsys.readouterr().err
    assert _files(out) == partial  # nothing written under seed 7

    res = generate("imagenet-c", data, out, shifts=[SHIFT], seed=0, workers=0, progress=False)
    # The kill may land mid-write and leave that image's temp file: not a finished image
    # (the resume removes it, so the folders compare equal below).
    # The files of the image in flight have no recorded hash yet: drawn again.
    finished = [k for k in partial if not k.endswith(TEMP_SUFFIX)]
    assert set(res.redrawn) <= set(finished)
    kept = len(finished) - len(res.redrawn)
    assert res.skipped_existing == kept and res.written == 40 * 5 - kept
    clean = tmp_path / "uninterrupted"
    generate("imagenet-c", data, clean, shifts=[SHIFT], seed=0, workers=0, progress=False)
    assert _files(out) == _files(clean)
    m = json.loads((out / MANIFEST).read_text())
    assert [r["status"] for r in m["runs"]] == ["killed", "complete"]
    assert m["status"] == "complete" and m["seed"] == 0


def test_more_images_cells_and_levels_extend_the_same_identity(tmp_path):
    data = make_folder(tmp_path / "data", 5)
    out = tmp_path / "out"
    first = generate(
        "imagenet-c", data, out, shifts=[SHIFT], levels=[1], limit=3, workers=0, progress=False
    )
    assert first.written == 3
    more = generate(
        "imagenet-c",
        data,
        out,
        shifts=[SHIFT, "contrast"],
        levels=[1, 2],
        limit=5,
        workers=0,
        progress=False,
    )
    assert (more.written, more.skipped_existing) == (5 * 4 - 3, 3)
    m = json.loads((out / MANIFEST).read_text())
    assert len(m["samples"]) == 5
    assert {(c["shift"], c["level"]) for c in m["cells"]} == {
        (s, lv) for s in (SHIFT, "contrast") for lv in (1, 2)
    }


def test_a_source_changed_since_generation_is_refused(tmp_path):
    data = make_folder(tmp_path / "data", 4)
    out = tmp_path / "out"
    generate("imagenet-c", data, out, shifts=[SHIFT], levels=[1], workers=0, progress=False)
    before = _files(out)
    # Another photo under the same name (a fix, a re-download, a mistake): its old cells
    # would sit next to new ones.
    _photo(np.random.default_rng(99)).save(data / "b" / "img001.jpg", quality=90)
    with pytest.raises(InputChangedError, match=r"b/img001.jpg \(image\)"):
        generate("imagenet-c", data, out, shifts=[SHIFT], levels=[1, 2], workers=0, progress=False)
    assert _files(out) == before


@pytest.mark.long
def test_concurrent_generates_keep_both_runs_in_the_history(tmp_path):
    data = make_folder(tmp_path / "data", 30)
    out = tmp_path / "out"
    procs = [
        subprocess.Popen(
            _cli(data, out, "--shifts", shift, "--levels", "1-2"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for shift in (SHIFT, "contrast")
    ]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    m = json.loads((out / MANIFEST).read_text())
    assert len(m["runs"]) == 2 and {r["status"] for r in m["runs"]} == {"complete"}
    assert sorted(r["shifts"][0] for r in m["runs"]) == sorted([SHIFT, "contrast"])
    assert {c["shift"] for c in m["cells"]} == {SHIFT, "contrast"}
    assert m["counts"]["written"] == len(_files(out)) == 30 * 2 * 2
    assert not [p for p in out.rglob("*.rltmp")]


def test_a_running_writers_temp_files_are_left_alone(tmp_path):
    """A second generate must not delete the temp files of a live concurrent one."""
    from robustlab.workflows.generate import remove_temp_files

    cell = tmp_path / SHIFT / "1" / "a"
    cell.mkdir(parents=True)
    live = cell / f".x.jpg.{os.getppid()}.rltmp"
    live.write_bytes(b"in flight")
    gone = dead_pid()
    dead = cell / f".y.jpg.{gone}.rltmp"
    dead.write_bytes(b"left by a killed run")
    # at the top of the folder: the manifest's and the release arrays' temp files
    top_live = tmp_path / f".frost.npy.{os.getppid()}.rltmp"
    top_dead = tmp_path / f".frost.npy.{gone}.rltmp"
    top_live.write_bytes(b"in flight")
    top_dead.write_bytes(b"left by a run killed while writing the arrays")
    manifest_tmp = tmp_path / f".manifest.json.{gone}.rltmp"  # written under its lock
    manifest_tmp.write_bytes(b"{")
    assert remove_temp_files(tmp_path, [SHIFT]) == 2
    assert live.exists() and top_live.exists() and manifest_tmp.exists()
    assert not dead.exists() and not top_dead.exists()


def _masks_for(data: Path, masks: Path) -> Path:
    """An elliptic foreground mask PNG per image, parallel to ``data``."""
    for img in data.rglob("*.jpg"):
        w, h = Image.open(img).size
        yy, xx = np.mgrid[:h, :w]
        m = ((yy - h / 2) / (0.35 * h)) ** 2 + ((xx - w / 2) / (0.3 * w)) ** 2 <= 1
        dst = (masks / img.relative_to(data)).with_suffix(".png")
        dst.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(m.astype(np.uint8) * 255).save(dst)
    return masks


def test_a_grown_donor_pool_is_refused_for_donor_cells_only(tmp_path):
    data = make_folder(tmp_path / "data", 4)
    masks = _masks_for(data, tmp_path / "masks")
    out = tmp_path / "out"
    generate(
        "imagenet9",
        data,
        out,
        shifts=["mixed_rand", "only_fg"],
        masks=masks,
        workers=0,
        progress=False,
    )
    # A new photo joins the pool: every sample's random donor may now be another one.
    _photo(np.random.default_rng(5)).save(data / "b" / "img100.jpg", quality=90)
    _masks_for(data, masks)
    with pytest.raises(InputChangedError, match="donor pool of mixed_rand"):
        generate(
            "imagenet9", data, out, shifts=["mixed_rand"], masks=masks, workers=0, progress=False
        )
    res = generate(
        "imagenet9", data, out, shifts=["only_fg"], masks=masks, workers=0, progress=False
    )
    assert (res.written, res.skipped_existing) == (1, 4)
