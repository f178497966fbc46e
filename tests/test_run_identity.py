"""Evaluate's run identity covers what decides the pixels (issue 8): other masks or a
replaced photo of the same byte size is a new run, never the old one resumed; content
hashes come from a persistent cache. Fixtures: the demo photos shipped by scikit-image and
matplotlib, and images made here."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import robustlab
from robustlab.records.content_hash import CACHE_FILE, ContentHasher, hash_bytes_of
from robustlab.store import Store

KW = dict(label_space="demo", seed=0, workers=0, batch_size=8, progress=False)


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo photos (data, masks) plus a second masks folder: every mask inverted."""
    from robustlab.workflows.demo import materialise

    root = tmp_path_factory.mktemp("demo")
    data, masks_a = materialise(root, photos=3)
    masks_b = root / "masks_b"
    for p in masks_a.rglob("*.png"):
        dst = masks_b / p.relative_to(masks_a)
        dst.parent.mkdir(parents=True, exist_ok=True)
        m = np.asarray(Image.open(p).convert("L")) > 127
        Image.fromarray(np.where(m, 0, 255).astype(np.uint8)).save(dst)
    return data, masks_a, masks_b


def _predictions(db: Path, run_id: str):
    df = Store(db).predictions([run_id])
    df = df.sort_values(["sample_id", "shift", "level"]).reset_index(drop=True)
    return df[["sample_id", "shift", "level", "correct"]], np.stack(df["top5_ids"].to_numpy())


def test_other_masks_are_another_run_and_both_keep_their_numbers(demo, lite0, tmp_path, caplog):
    data, masks_a, masks_b = demo
    db = tmp_path / "r.duckdb"
    kw = dict(suite="imagenet9", shifts=["only_fg"], **KW)
    a = robustlab.evaluate(lite0, data, db=db, masks=masks_a, **kw)
    ra = a.run_id
    before = _predictions(db, ra)
    with caplog.at_level(logging.WARNING, logger="robustlab.workflows.evaluate"):
        b = robustlab.evaluate(lite0, data, db=db, masks=masks_b, **kw)
    rb = b.run_id
    assert ra != rb and not b.resumed
    line = [r.getMessage() for r in caplog.records if "earlier run" in r.getMessage()]
    assert len(line) == 1 and ra in line[0] and rb in line[0]
    assert f"masks folder {masks_a.resolve()} -> {masks_b.resolve()}" in line[0]
    assert "mask content" in line[0] and "image content" not in line[0]

    # Run A is untouched; run B holds exactly what a fresh database computes for masks B.
    runs = Store(db).runs().set_index("run_id")
    assert runs.loc[ra, "config"]["masks"] == str(masks_a.resolve())
    assert runs.loc[rb, "config"]["masks"] == str(masks_b.resolve())
    after = _predictions(db, ra)
    assert after[0].equals(before[0])
    np.testing.assert_array_equal(after[1], before[1])
    fresh = robustlab.evaluate(lite0, data, db=tmp_path / "fresh.duckdb", masks=masks_b, **kw)
    assert fresh.run_id == rb
    got, ref = _predictions(db, rb), _predictions(tmp_path / "fresh.duckdb", rb)
    assert got[0].equals(ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    fg = (before[0]["shift"] == "only_fg").to_numpy()
    assert not np.array_equal(before[1][fg], got[1][fg])  # the masks really change the pixels


@pytest.fixture
def bmp_folder(tmp_path) -> Path:
    """Three demo photos as 160x120 BMPs (uncompressed: equal dimensions, equal byte size)."""
    from robustlab.workflows.demo import demo_photos

    root = tmp_path / "bmp"
    for p in demo_photos()[:3]:
        dst = (root / p.id).with_suffix(".bmp")
        dst.parent.mkdir(parents=True, exist_ok=True)
        Image.open(p.source).convert("RGB").resize((160, 120)).save(dst)
    return root


def test_a_photo_replaced_by_one_of_the_same_size_is_a_new_run(bmp_folder, lite0, tmp_path):
    db = tmp_path / "r.duckdb"
    first = robustlab.evaluate(lite0, bmp_folder, db=db, **KW)
    files = sorted(bmp_folder.rglob("*.bmp"))
    victim, other = files[0], files[-1]
    st = victim.stat()
    # Another photo, same dimensions, same byte size, even the same mtime (as ``cp -p``).
    replacement = victim.with_name("replacement.tmp")
    shutil.copyfile(other, replacement)
    os.replace(replacement, victim)
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert victim.stat().st_size == st.st_size and victim.stat().st_mtime_ns == st.st_mtime_ns

    second = robustlab.evaluate(lite0, bmp_folder, db=db, **KW)
    assert second.run_id != first.run_id and not second.resumed
    fresh = robustlab.evaluate(lite0, bmp_folder, db=tmp_path / "fresh.duckdb", **KW)
    assert fresh.run_id == second.run_id
    new, ref = (
        _predictions(db, second.run_id),
        _predictions(tmp_path / "fresh.duckdb", fresh.run_id),
    )
    np.testing.assert_array_equal(new[1], ref[1])
    old = _predictions(db, first.run_id)
    vid = victim.relative_to(bmp_folder).as_posix()
    row = (old[0]["sample_id"] == vid).to_numpy()
    assert not np.array_equal(old[1][row], new[1][row])  # the old run kept its own numbers
    assert len(Store(db).runs()) == 2


def _write_files(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        p = folder / f"f{i}.bin"
        p.write_bytes(rng.bytes(1000 + i))
        paths.append(p)
    return paths


def test_hash_cache_answers_without_reading_and_notices_changes(tmp_path):
    paths = _write_files(tmp_path / "files", 4)
    odd = Path(os.fsdecode(bytes(tmp_path / "files") + b"/caf\xe9.bin"))  # not UTF-8
    odd.write_bytes(b"latin-1 name")
    paths.append(odd)
    time.sleep(0.2)  # older than the "racily clean" window: cacheable for good
    with ContentHasher(tmp_path / "cache") as h:
        first = h.hash_files([*paths, None, tmp_path / "missing"])
        assert (h.stats.read, h.stats.cached) == (5, 0)
        assert first[:5] == [hash_bytes_of(p) for p in paths]
        assert first[5:] == [None, "missing"]
    with ContentHasher(tmp_path / "cache") as h:  # a new process would see the same file
        assert h.hash_files(paths) == first[:5]
        assert (h.stats.read, h.stats.cached) == (0, 5)
    # The answer really comes from the cache: a doctored entry is returned as is.
    with sqlite3.connect(tmp_path / "cache" / CACHE_FILE) as db:
        db.execute(
            "UPDATE hashes SET digest = 'from-the-cache' WHERE path = ?",
            [os.fsencode(paths[0].resolve())],
        )
    with ContentHasher(tmp_path / "cache") as h:
        assert h.hash_files(paths[:1]) == ["from-the-cache"]

    # Same size, mtime put back: the changed ctime still says "read it again".
    st = paths[1].stat()
    paths[1].write_bytes(b"x" * st.st_size)
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    with ContentHasher(tmp_path / "cache") as h:
        again = h.hash_files(paths[1:])
        assert h.stats.read == 1 and again[0] == hash_bytes_of(paths[1]) != first[1]


def test_a_file_hashed_right_after_a_change_is_not_trusted_later(tmp_path, monkeypatch):
    """Racily clean: a file changed in the same timestamp tick it was hashed in could keep
    its signature, so such an entry is checked again on the next lookup. The moment of
    hashing is set here (just after, then well after the file's ctime), so the outcome
    does not depend on how fast a loaded machine gets from writing to hashing."""
    import types

    from robustlab.records import content_hash

    (p,) = _write_files(tmp_path / "files", 1)
    ctime = p.stat().st_ctime_ns
    for hashed_at, reread in ((ctime + 1, 1), (ctime + content_hash.RACY_NS + 1, 0)):
        clock = types.SimpleNamespace(time_ns=lambda at=hashed_at: at)
        monkeypatch.setattr(content_hash, "time", clock)
        with ContentHasher(tmp_path / f"cache{reread}") as h:
            h.hash_files([p])
            h.hash_files([p])
            assert h.stats.read == reread, hashed_at - ctime


def test_an_unusable_cache_only_costs_reading(tmp_path, caplog):
    paths = _write_files(tmp_path / "files", 2)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with caplog.at_level(logging.WARNING), ContentHasher(blocker) as h:
        assert h.hash_files(paths) == [hash_bytes_of(p) for p in paths]
    assert "unusable" in caplog.text


def test_cache_location_follows_the_environment(monkeypatch, tmp_path):
    from robustlab.records.content_hash import cache_dir

    monkeypatch.delenv("ROBUSTLAB_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "robustlab"
    monkeypatch.setenv("ROBUSTLAB_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_a_generated_folder_made_again_with_other_masks_is_a_new_run(demo, lite0, tmp_path, caplog):
    """The same --out regenerated from other masks: the evaluation must not resume."""
    from robustlab.workflows.generate import generate

    data, masks_a, masks_b = demo
    out, db = tmp_path / "gen", tmp_path / "r.duckdb"
    kw = dict(shifts=["only_fg"], label_space="demo", workers=0, batch_size=8, progress=False)
    generate("imagenet9", data, out, shifts=["only_fg"], masks=masks_a, workers=0, progress=False)
    first = robustlab.evaluate(lite0, out, db=db, **kw)
    shutil.rmtree(out)
    generate("imagenet9", data, out, shifts=["only_fg"], masks=masks_b, workers=0, progress=False)
    with caplog.at_level(logging.WARNING, logger="robustlab.workflows.evaluate"):
        second = robustlab.evaluate(lite0, out, db=db, **kw)
    assert second.run_id != first.run_id and not second.resumed
    assert "generated folder" in caplog.text and "masks folder" in caplog.text
    fg = lambda df: df.set_index("shift").loc["only_fg", "top1"]  # noqa: E731
    fresh = robustlab.evaluate(lite0, out, db=tmp_path / "fresh.duckdb", **kw)
    assert fresh.run_id == second.run_id and fg(fresh.table) == fg(second.table)
