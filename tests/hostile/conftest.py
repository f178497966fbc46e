"""A hostile tree of real photos: what a careless or malicious data folder can hold.

Why one shared tree: every command and every reader must meet the same traps (docs/
DEVELOPING.md, "Safety rules"), so the tests of tests/hostile/ build them once, the same
way, and each checks its own commands against them.

Layout under a temp ``world/``::

    world/
      data/                     ImageFolder: one real photo in each of 6 class folders
        <c0>/uploop -> ../..    a folder link to an ancestor of the data folder (world/)
        <c1>/proc -> /proc/self a folder link into the process's own /proc entry
        <c2>/root -> /          a folder link to the file system's root
        <c3>/passwd.jpg -> /etc/passwd  a file link out, named like an image
        <c4>/away.JPEG -> ../../outside/<photo>  a real photo, but outside the data
        <c5>/zero.JPEG, <c5>/text.JPEG  bad files with image names
        <c5>/selfloop.JPEG -> itself, <c5>/pipe.JPEG (a FIFO)
      outside/                  6 other real photos, never part of the data
      gen/gaussian_noise/1/     a folder shaped like generate's output, holding photos
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
from pathlib import Path

import pytest

N_CLASSES = 6


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes: a clobbered input shows as a changed digest."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``robustlab ARGV`` in this process: (exit code, stdout, stderr)."""
    from robustlab.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def error_lines(err: str) -> list[str]:
    """The lines of stderr that report an error (each problem: one line, plus a hint)."""
    return [line for line in err.splitlines() if ": error:" in line]


@pytest.fixture(scope="module")
def hostile(samples_dir, tmp_path_factory) -> dict:
    """Build the hostile tree (see the module docstring); a dict of its paths.

    Keys: ``world``, ``data``, ``outside``, ``gen`` (folders), ``classes`` (the 6 wnids),
    ``photos`` (ids of the real photos inside the data), ``bad`` (ids of the bad files),
    ``traps`` (relative path -> what it is, for the links that must not be followed).
    """
    world = tmp_path_factory.mktemp("hostile") / "world"
    data, outside, gen = world / "data", world / "outside", world / "gen"
    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[: 2 * N_CLASSES]
    inside, other = rows[:N_CLASSES], rows[N_CLASSES:]
    classes = [r["wnid"] for r in inside]
    photos = []
    for r in inside:
        dest = data / r["wnid"] / r["file"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(samples_dir / r["file"], dest)
        photos.append(f"{r['wnid']}/{r['file']}")
    outside.mkdir(parents=True)
    for r in other:
        shutil.copy(samples_dir / r["file"], outside / r["file"])
    c = classes
    traps = {
        f"{c[0]}/uploop": "a link to an ancestor of the data folder",
        f"{c[1]}/proc": "a link to /proc/self",
        f"{c[2]}/root": "a link to /",
        f"{c[3]}/passwd.jpg": "a link to /etc/passwd named like an image",
        f"{c[4]}/away.JPEG": "a link to a photo outside the data folder",
    }
    os.symlink("../..", data / c[0] / "uploop")
    os.symlink("/proc/self", data / c[1] / "proc")
    os.symlink("/", data / c[2] / "root")
    os.symlink("/etc/passwd", data / c[3] / "passwd.jpg")
    os.symlink(f"../../outside/{other[0]['file']}", data / c[4] / "away.JPEG")
    os.symlink("selfloop.JPEG", data / c[5] / "selfloop.JPEG")  # a link to itself
    os.mkfifo(data / c[5] / "pipe.JPEG")  # opening it would block forever
    (data / c[5] / "zero.JPEG").write_bytes(b"")
    (data / c[5] / "text.JPEG").write_text("this is not a photo\n")
    bad = [f"{c[5]}/text.JPEG", f"{c[5]}/zero.JPEG"]
    # A folder shaped like a generated cell, holding photos: the --data-inside---out trap.
    cell = gen / "gaussian_noise" / "1"
    for r in inside[:2]:
        (cell / r["wnid"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(samples_dir / r["file"], cell / r["wnid"] / r["file"])
    return {
        "world": world,
        "data": data,
        "outside": outside,
        "gen": gen,
        "classes": classes,
        "photos": sorted(photos),
        "bad": bad,
        "traps": traps,
    }
