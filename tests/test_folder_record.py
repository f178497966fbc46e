"""robustlab.records.folder_record (a folder run's entry, status, counts and merge) and the
request specs of generate, synth and mine (keywords routed to the spec that owns them)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from conftest import dead_pid

from robustlab.errors import InputChangedError, InputError
from robustlab.records.manifest import MANIFEST
from robustlab.files.outputs import LocalFolder
from robustlab.records.manifest import json_bytes
from robustlab.records.folder_record import (
    COMPLETE,
    INTERRUPTED,
    RUNNING,
    FolderRun,
    count_files,
    refuse_changes,
    update_record,
)
from robustlab.workflows.generate import GenerateCells, GenerateExecution, GenerateInputs, generate
from robustlab.workflows.imagenet_d.mine import MineRule, mine
from robustlab.workflows.imagenet_d.synth import SynthDiffusion, SynthGrid, synth
from robustlab.files.hashes import HASHES


# ----------------------------------------------------------------------------- the record
def test_a_run_ends_complete_or_interrupted_and_the_record_says_so():
    ended = []
    run = FolderRun(status=RUNNING, planned=3)
    assert list(run.record)[:6] == ["id", "started_at", "host", "pid", "status", "planned"]
    with run.track(lambda status: ended.append(status)):
        pass
    with pytest.raises(KeyboardInterrupt):
        with run.track(lambda status: ended.append(status)):
            raise KeyboardInterrupt
    assert ended == [COMPLETE, INTERRUPTED]
    run.finish(INTERRUPTED, written=2)
    assert run.status == INTERRUPTED
    # An existing key keeps its place (the byte order of every written manifest).
    assert list(run.record)[4:] == ["status", "planned", "finished_at", "seconds", "written"]
    assert run.record["seconds"] >= 0 and run.record["written"] == 2


def test_runs_keep_others_mark_dead_ones_killed_and_replace_their_own_entry():
    host = socket.gethostname()
    run = FolderRun(status=RUNNING)
    alive = {"id": "a", "status": RUNNING, "host": host, "pid": os.getpid()}
    dead = {"id": "b", "status": RUNNING, "host": host, "pid": dead_pid()}
    first = run.runs([alive, dead])
    assert [(r["id"], r["status"]) for r in first] == [
        ("a", RUNNING),
        ("b", "killed"),
        (run.id, RUNNING),
    ]
    run.finish(COMPLETE)
    again = run.runs(first)
    assert [r["id"] for r in again] == ["a", "b", run.id] and again[-1]["status"] == COMPLETE


def test_update_merges_into_what_is_on_disk_and_counts_come_from_disk(tmp_path):
    folder = LocalFolder(tmp_path / "out")
    other = FolderRun(status=RUNNING)
    update_record(folder, lambda prev: {"runs": other.runs((prev or {}).get("runs", []))})
    mine_run = FolderRun(status=RUNNING)
    written = update_record(folder, lambda prev: {"runs": mine_run.runs(prev["runs"])})
    on_disk = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert on_disk == written and [r["id"] for r in on_disk["runs"]] == [other.id, mine_run.id]
    assert (tmp_path / "out" / MANIFEST).read_bytes() == json_bytes(written)

    (tmp_path / "out" / "a" / "1").mkdir(parents=True)
    for name in ("x.png", "y.png", ".x.png.123.rltmp", "notes.txt"):
        (tmp_path / "out" / "a" / "1" / name).write_bytes(b"")
    assert count_files(folder, ["a"], lambda f: f.endswith(".png")) == 2
    assert count_files(tmp_path / "out", ["a", "missing"], lambda f: True) == 4


def test_refusal_names_every_change(tmp_path):
    refuse_changes(tmp_path, [], made="was made otherwise", hint="new folder")  # compatible
    with pytest.raises(InputChangedError, match=r"was made otherwise: seed 0 -> 7; steps") as e:
        refuse_changes(tmp_path, ["seed 0 -> 7", "steps"], made="was made otherwise", hint="h")
    assert e.value.hint == "h"


# ----------------------------------------------------------------------------- the requests
def test_a_misspelt_keyword_is_a_type_error_naming_the_option(tmp_path):
    with pytest.raises(TypeError, match=r"generate\(\).*'seeed'; did you mean seed\?"):
        generate("imagenet-c", tmp_path, tmp_path / "out", seeed=3)
    with pytest.raises(TypeError, match=r"synth\(\).*'step'; did you mean steps\?"):
        synth(tmp_path / "out", tmp_path, step=2)
    with pytest.raises(TypeError, match=r"mine\(\).*'surogates'; did you mean surrogates\?"):
        mine(tmp_path, surogates=["lite0"])
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'zzz'$"):
        generate("imagenet-c", tmp_path, tmp_path / "out", zzz=1)
    with pytest.raises(TypeError, match=r"seed both as keywords and in cells="):
        generate("imagenet-c", tmp_path, tmp_path / "out", cells=GenerateCells(), seed=1)
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_each_spec_checks_its_values_once_as_one_line_errors():
    for make, match in (
        (lambda: GenerateCells(seed=-1), "seed must be a whole number from 0 to 2"),
        (lambda: GenerateInputs(limit=0), "limit must be at least 1"),
        (lambda: GenerateExecution(workers=-2), "workers must be 0"),
        (lambda: SynthGrid(per_pair=0), "per_pair must be an integer >= 1"),
        (lambda: SynthDiffusion(height=60), "image size 60 must be a positive multiple of 8"),
        (lambda: SynthDiffusion(sampler="nope"), "unknown sampler 'nope'"),
        (lambda: MineRule(surrogates=["lite0", "lite0"]), "a surrogate is listed twice"),
        (lambda: MineRule(surrogates=["lite0"], k=2), "k must be an integer from 1 to"),
        (lambda: MineRule(surrogates=[" "]), "at least one surrogate"),
    ):
        with pytest.raises(InputError, match=match):
            make()
    with pytest.raises(InputError, match="names a Ray cluster"):
        GenerateExecution(address="127.0.0.1:1")
    assert MineRule(surrogates=["lite0", " ", "lite1"]).specs == ["lite0", "lite1"]
    assert MineRule(surrogates=["lite0", "lite1"]).k_of_n == 2


def test_specs_and_keywords_make_the_same_folder(tmp_path):
    from robustlab.workflows.demo import materialise

    data, _ = materialise(tmp_path / "demo", ["cat/chelsea.png"])
    kw = dict(shifts=["contrast"], levels=[2], seed=4)
    by_keywords = generate("imagenet-c", data, tmp_path / "a", workers=0, progress=False, **kw)
    by_specs = generate(
        "imagenet-c",
        data,
        tmp_path / "b",
        cells=GenerateCells(**kw),
        execution=GenerateExecution(workers=0, progress=False),
    )
    assert by_keywords.written == by_specs.written == 1

    def files(root: Path) -> dict[str, bytes]:
        return {
            p.relative_to(root).as_posix(): p.read_bytes()
            for p in root.rglob("*")
            if p.is_file() and p.name not in (MANIFEST, ".manifest.lock") and HASHES not in p.parts
        }

    assert files(tmp_path / "a") == files(tmp_path / "b") != {}
    identity = ("seed", "suite", "protocol", "cells", "samples")
    a = json.loads((tmp_path / "a" / MANIFEST).read_text())
    b = json.loads((tmp_path / "b" / MANIFEST).read_text())
    assert {k: a[k] for k in identity} == {k: b[k] for k in identity}
