"""Skips are explicit: only ``CellSkipped`` (and an unusable image) skips a cell; any other
exception in a worker is a bug that fails the run loudly, and the rerun resumes.

A plain ``ValueError`` used to be the skip signal, so a ``ValueError`` bug inside a shift
became a quietly skipped cell and ``generate`` still exited 0.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from robustlab import cli
from robustlab.errors import CellSkipped, InputError
from robustlab.workflows.generate import MANIFEST, generate
from robustlab.records.manifest import LOCK
from robustlab.shifts import registry

PHOTOS = ["n01440764_tench.JPEG", "n03388043_fountain.JPEG", "n04243546_slot.JPEG"]
SHIFT = "gaussian_noise"


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("src") / "photos"
    dest.mkdir()
    rows = (samples_dir / "labels.csv").read_text().splitlines()
    keep = [rows[0]] + [r for r in rows[1:] if r.split(",")[0] in PHOTOS]
    (dest / "labels.csv").write_text("\n".join(keep) + "\n")
    for name in PHOTOS:
        shutil.copy(samples_dir / name, dest / name)
    return dest


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*.png")) + sorted(out.rglob("*.JPEG"))
        if p.name not in (MANIFEST, LOCK)
    }


def _second_call_raises(monkeypatch, error: Exception) -> None:
    """Make the registered shift raise ``error`` on its second image (workers=0: in this
    process, in the folder's order), and compute the others exactly as before."""
    shift = registry.get_shift(SHIFT)
    calls = []

    def fn(image, params, rng, ctx):
        calls.append(1)
        if len(calls) == 2:
            raise error
        return shift.fn(image, params, rng, ctx)

    monkeypatch.setitem(registry._REGISTRY, SHIFT, dataclasses.replace(shift, fn=fn))


def _argv(data: Path, out: Path) -> list[str]:
    return [
        "generate",
        "imagenet-c",
        "--data",
        str(data),
        "--out",
        str(out),
        "--shifts",
        SHIFT,
        "--levels",
        "3",
        "--workers",
        "0",
        "--no-progress",
    ]


def test_cell_skipped_is_bad_input_with_its_reason():
    exc = CellSkipped("the object box covers the whole image")
    assert isinstance(exc, InputError) and isinstance(exc, ValueError)
    assert exc.reason == str(exc) == "the object box covers the whole image"


@pytest.mark.parametrize("bug", [ZeroDivisionError("division by zero"), KeyError("sigma")])
def test_a_bug_in_a_shift_fails_the_run_and_the_rerun_resumes(
    photos, tmp_path, monkeypatch, capsys, bug
):
    reference = tmp_path / "reference"
    clean = generate(
        "imagenet-c", photos, reference, shifts=[SHIFT], levels=[3], workers=0, progress=False
    )
    assert (clean.written, clean.failed) == (len(PHOTOS), 0)

    out = tmp_path / "out"
    with monkeypatch.context() as m:
        _second_call_raises(m, bug)
        rc = cli.main(_argv(photos, out))
    err = capsys.readouterr().err
    assert rc == cli.EXIT_INTERNAL == 70
    assert "internal error (a bug, please report it)" in err
    assert type(bug).__name__ in err and "Traceback" in err
    before = _files(out)
    assert len(before) == 1  # the first image's cell, written before the bug

    # The bug fixed (the registry restored): the rerun keeps what was written and adds the rest.
    res = generate("imagenet-c", photos, out, shifts=[SHIFT], levels=[3], workers=0, progress=False)
    assert (res.skipped_existing, res.written, res.failed) == (1, len(PHOTOS) - 1, 0)
    after = _files(out)
    assert {k: after[k] for k in before} == before
    assert after == _files(reference)


def test_a_cell_skipped_is_counted_with_its_reason_and_the_run_succeeds(
    photos, tmp_path, monkeypatch
):
    _second_call_raises(monkeypatch, CellSkipped("the mask is empty (no foreground pixels)"))
    res = generate(
        "imagenet-c",
        photos,
        tmp_path / "out",
        shifts=[SHIFT],
        levels=[3],
        workers=0,
        progress=False,
    )
    assert (res.written, res.failed) == (len(PHOTOS) - 1, 1)
    assert [f[3] for f in res.failures] == ["the mask is empty (no foreground pixels)"]


def test_the_evaluations_work_unit_counts_a_skip_and_raises_a_bug(photos, monkeypatch):
    """The runner's TaskDataset: a CellSkipped is the cell's reason, any other exception
    leaves the worker (the runner then fails the run; stored rows stay for the rerun)."""
    from robustlab.data.sources import discover
    from robustlab.execution.tasks import CellImages, Task, TaskDataset
    from robustlab.suites import Protocol

    samples = discover(photos)
    task = Task(0, (("clean", 0), (SHIFT, 3)))

    def item():
        return TaskDataset(samples, [task], CellImages(Protocol(), 0), lambda img: img)[0]

    _, tensors, errors, _ = item()
    assert len(tensors) == 2 and errors == []
    with monkeypatch.context() as m:
        _second_call_raises(m, CellSkipped("no background to fill from"))
        item()  # the first call
        _, tensors, errors, _ = item()
    assert len(tensors) == 1 and errors == [(1, f"{SHIFT}/3: no background to fill from")]
    with monkeypatch.context() as m:
        _second_call_raises(m, ZeroDivisionError("division by zero"))
        item()
        with pytest.raises(ZeroDivisionError):
            item()
