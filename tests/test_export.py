"""``robustlab export``: generated ImageNet-C and ImageNet-E folders (real photos) and a mined
subset written as a Hugging Face dataset and WebDataset shards, loaded by ``datasets`` and
``webdataset`` themselves, and read back by ``evaluate`` (a ``save_to_disk`` copy too) with
the same cells, predictions and numbers as the folder they came from; the stored bytes go
in unchanged, a changed file is left out by its recorded hash, and a killed export resumes.
"""

from __future__ import annotations

import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import kill_after_first_file, make_masked_folder

import robustlab
from robustlab.cli import main
from robustlab.store import Store

pytestmark = pytest.mark.xdist_group("export")

datasets = pytest.importorskip(
    "datasets", reason="the export tests load with datasets (test extra)"
)
wds = pytest.importorskip("webdataset", reason="the export tests load with webdataset (test extra)")


def _run(argv, capsys=None) -> None:
    code = main([*argv, "--no-progress"])
    err = capsys.readouterr().err if capsys is not None else ""
    assert code == 0, err


def _evaluate(data: Path, db: Path):
    """A lite0 run on ``data``: (per-cell table, predictions sorted by cell and sample)."""
    res = robustlab.evaluate("lite0", data=str(data), db=str(db), workers=0, progress=False)
    run_id = res.run_id
    cols = ["sample_id", "shift", "level", "label", "correct", "top5_ids", "top5_probs"]
    preds = Store(db).predictions([run_id], columns=cols)
    preds = preds.sort_values(["shift", "level", "sample_id"]).reset_index(drop=True)
    return res.table, preds


def _skipped(db: Path, table) -> list:
    """The ``[sample, reason]`` skips of the run behind an evaluate table (its record)."""
    (run_id,) = set(table["run_id"])
    return Store(db).get_run(run_id)["skipped"]


def _same(origin, other) -> None:
    """The same cells, the same numbers and the same predictions."""
    t0, p0 = origin
    t1, p1 = other
    keys = ["shift", "level", "n", "top1", "top5"]
    assert t1[keys].to_dict("records") == t0[keys].to_dict("records")
    for col in ("sample_id", "shift", "level", "label", "correct"):
        assert p1[col].tolist() == p0[col].tolist(), col
    assert [list(x) for x in p1["top5_ids"]] == [list(x) for x in p0["top5_ids"]]
    np.testing.assert_allclose(
        np.stack(p1["top5_probs"].to_list()), np.stack(p0["top5_probs"].to_list()), atol=1e-4
    )


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory):
    """One datasets cache for the module (never the user's): the ImageNet-E export loads
    through the same cache as the ImageNet-C one, from a folder of the same name."""
    return str(tmp_path_factory.mktemp("hf-cache"))


@pytest.fixture(scope="module")
def photos(tmp_path_factory, samples_dir):
    return make_masked_folder(samples_dir, tmp_path_factory.mktemp("export-src"), 3, 0.05)


@pytest.fixture(scope="module")
def imagenet_c(photos, tmp_path_factory):
    """A generated ImageNet-C folder (two corruptions, two severities) and its own run."""
    data, _ = photos
    root = tmp_path_factory.mktemp("export-c")
    out = root / "imagenet-c"
    argv = ["generate", "imagenet-c", "--data", str(data), "--out", str(out)]
    _run([*argv, "--shift", "contrast,gaussian_noise", "--level", "1,5", "--workers", "0"])
    return out, _evaluate(out, root / "origin.duckdb")


@pytest.fixture(scope="module")
def exports(imagenet_c, tmp_path_factory):
    """The ImageNet-C folder exported in both formats, small shards so there are several."""
    out, _ = imagenet_c
    root = tmp_path_factory.mktemp("exports")
    made = {}
    for fmt in ("hf", "webdataset"):
        made[fmt] = root / fmt
        argv = ["export", "--data", str(out), "--format", fmt, "--out", str(made[fmt])]
        _run([*argv, "--shard-images", "4"])
    return made


def test_the_hf_export_loads_with_datasets_and_holds_the_stored_bytes(
    imagenet_c, exports, hf_cache
):
    out, _ = imagenet_c
    folder = exports["hf"]
    ds = datasets.load_dataset(str(folder), split="test", cache_dir=hf_cache)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(ds) == 3 * (1 + len(manifest["cells"]))  # each photo and its 4 cells
    assert ds.features["label"].names[:2] == ["n01440764", "n01443537"]  # ImageNet's wnids
    raw = ds.cast_column("image", datasets.Image(decode=False))
    by_id = {}
    for row in raw:
        by_id[(row["source_id"], row["shift"], row["level"])] = row
        assert row["suite"] == "imagenet-c" and row["seed"] == 0
        assert row["label_space"] == "imagenet1k"
        assert row["label"] == ds.features["label"].str2int(row["class_name"])
    # Every cell is the generated file's bytes, not a re-encoding; the clean row is the source.
    for (sid, shift, level), row in by_id.items():
        if shift == "clean":
            src = Path(manifest["data"]["root"]) / sid
        else:
            src = out / row["image"]["path"]
            assert json.loads(row["params"]) == next(
                c["params"]
                for c in manifest["cells"]
                if (c["shift"], str(c["level"])) == (shift, level)
            )
        assert row["image"]["bytes"] == src.read_bytes()
    files = sorted(glob.glob(str(folder / "data" / "*.parquet")))
    assert len(files) == 4  # 15 images, 4 per shard
    again = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=hf_cache)
    assert sorted(again["content_hash"]) == sorted(ds["content_hash"])
    card = (folder / "README.md").read_text()
    assert "license: other" in card and "imagenet-c" in card and "Licence" in card


def test_the_webdataset_export_reads_with_webdataset(imagenet_c, exports):
    out, _ = imagenet_c
    shards = sorted(glob.glob(str(exports["webdataset"] / "test-*.tar")))
    assert len(shards) == 4
    seen = 0
    for sample in wds.WebDataset(shards, shardshuffle=False):
        meta = json.loads(sample["json"])
        data = sample.get("jpg") or sample.get("png")
        if meta["shift"] != "clean":
            assert data == (out / meta["path"]).read_bytes()
            assert meta["params"] is not None and meta["robustlab"]["read"] == "stored"
        seen += 1
    assert seen == 15


def test_evaluate_reads_both_formats_and_a_saved_copy_with_the_folders_numbers(
    imagenet_c, exports, hf_cache, tmp_path
):
    _, origin = imagenet_c
    saved = tmp_path / "saved"
    datasets.load_dataset(str(exports["hf"]), cache_dir=hf_cache).save_to_disk(str(saved))
    for name, folder in (*exports.items(), ("save_to_disk", saved)):
        got = _evaluate(folder, tmp_path / f"{name}.duckdb")  # each its own database
        _same(origin, got)
    (run,) = Store(tmp_path / "save_to_disk.duckdb").runs().to_dict("records")
    assert run["config"]["source"] == "exported"
    assert run["config"]["exported"]["kind"] == "arrow"
    # The report's grid shows the pixels the folder's own run showed, from each format.
    from robustlab.workflows.report.grid import render_cells

    out, (table, preds) = imagenet_c
    (first,) = Store(out.parent / "origin.duckdb").runs().to_dict("records")
    sid = preds["sample_id"].iloc[0]
    keys = [(s, str(lv)) for s, lv in zip(table["shift"], table["level"])]
    want, errors = render_cells(first, sid, keys)
    assert not errors and len(want) == 5
    for name in (*exports, "save_to_disk"):
        (run,) = Store(tmp_path / f"{name}.duckdb").runs().to_dict("records")
        got, errors = render_cells(run, sid, keys)
        assert not errors and list(got) == list(want), name
        for k in keys:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name} {k}")


def test_a_cell_file_changed_after_generate_is_left_out_by_its_recorded_hash(
    imagenet_c, tmp_path, capsys
):
    out, _ = imagenet_c
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    # The manifest names its source folder; the copy keeps it. One cell file replaced:
    victim = next(copy.glob("contrast/5/*/*"))
    victim.write_bytes(
        (copy / "contrast" / "1" / victim.relative_to(copy / "contrast" / "5")).read_bytes()
    )
    dest = tmp_path / "export"
    _run(["export", "--data", str(copy), "--format", "webdataset", "--out", str(dest)], capsys)
    record = json.loads((dest / "robustlab-export.json").read_text())
    (skip,) = record["skipped"]
    assert (skip["shift"], skip["level"]) == ("contrast", "5")
    assert "not what generate wrote" in skip["reason"]
    table, _ = _evaluate(dest, tmp_path / "r.duckdb")
    assert table.set_index(["shift", "level"]).loc[("contrast", "5"), "n"] == 2
    skipped = _skipped(tmp_path / "r.duckdb", table)
    assert any("not what generate wrote" in why for _, why in skipped)


def test_a_cell_file_linked_out_of_the_folder_is_left_out_by_the_link_rule(
    imagenet_c, tmp_path, capsys
):
    out, _ = imagenet_c
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    victim = sorted(copy.glob("gaussian_noise/1/*/*"))[0]
    outside = tmp_path / "elsewhere.JPEG"
    shutil.copyfile(victim, outside)  # the very bytes generate wrote, but out of the folder
    victim.unlink()
    victim.symlink_to(outside)
    inside = sorted(copy.glob("contrast/1/*"))[0]  # a class folder linked within: followed
    inside.rename(copy / "moved")
    inside.symlink_to(copy / "moved", target_is_directory=True)
    dest = tmp_path / "export"
    _run(["export", "--data", str(copy), "--format", "webdataset", "--out", str(dest)], capsys)
    record = json.loads((dest / "robustlab-export.json").read_text())
    (skip,) = record["skipped"]
    assert (skip["shift"], skip["level"]) == ("gaussian_noise", "1")
    assert "link out of the generated folder" in skip["reason"]
    assert record["rows"] == 15 - 1


def test_a_corrupted_shard_image_is_skipped_by_its_hash_not_scored(exports, tmp_path):
    folder = tmp_path / "wds"
    shutil.copytree(exports["webdataset"], folder)
    from robustlab.data.exported import open_export

    export = open_export(folder)
    k = next(i for i, r in enumerate(export.rows) if r.shift == "gaussian_noise")
    shard, (offset, size) = export.where[k]
    path = folder / export.shards[shard]
    blob = bytearray(path.read_bytes())
    blob[offset + size // 2] ^= 0xFF  # one flipped byte inside the JPEG
    path.write_bytes(bytes(blob))
    table, _ = _evaluate(folder, tmp_path / "r.duckdb")
    assert any("not what export wrote" in why for _, why in _skipped(tmp_path / "r.duckdb", table))


@pytest.mark.long
def test_a_killed_export_resumes_into_the_same_shards(imagenet_c, exports, tmp_path):
    out, _ = imagenet_c
    dest = tmp_path / "killed"
    cmd = [sys.executable, "-m", "robustlab.cli", "export", "--data", str(out)]
    cmd += ["--format", "hf", "--out", str(dest), "--shard-images", "1", "--no-progress"]
    kill_after_first_file(cmd, dest, "test-00000-of-*.parquet")
    written = sorted(p.name for p in (dest / "data").glob("*.parquet"))
    assert 1 <= len(written) < 15  # killed mid-way; a half-written shard is never visible
    done = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    # a shard renamed into place just before the kill, before the record names it, is
    # written again (only what the record vouches for is kept): one fewer may be kept, and
    # when that was the only shard the rerun says nothing is in place
    found = re.search(r"(\d+) already in place", done)
    kept = int(found[1]) if found else 0
    assert kept in (len(written) - 1, len(written)), done
    fresh = tmp_path / "fresh"
    _run(
        ["export", "--data", str(out), "--format", "hf", "--out", str(fresh), "--shard-images", "1"]
    )
    shards = sorted((dest / "data").glob("*.parquet"))
    assert len(shards) == 15 and not list((dest / "data").glob(".*"))
    for p in shards:
        assert p.read_bytes() == (fresh / "data" / p.name).read_bytes(), p.name


def test_an_export_of_other_content_is_refused_in_the_same_folder(imagenet_c, exports, capsys):
    out, _ = imagenet_c
    argv = ["export", "--data", str(out), "--format", "hf", "--out", str(exports["hf"])]
    assert main([*argv, "--shard-images", "5", "--no-progress"]) == 2
    assert "holds an export of other content" in capsys.readouterr().err


def test_export_refuses_a_folder_robustlab_did_not_write_and_an_output_inside_it(
    photos, imagenet_c, tmp_path, capsys
):
    data, _ = photos
    out, _ = imagenet_c
    assert (
        main(["export", "--data", str(data), "--format", "hf", "--out", str(tmp_path / "x")]) == 2
    )
    assert "not a folder robustlab wrote" in capsys.readouterr().err
    assert main(["export", "--data", str(out), "--format", "hf", "--out", str(out / "hf")]) == 2
    assert "--out" in capsys.readouterr().err
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(["export", "--data", str(out), "--format", "hf", "--out", str(other)]) == 2
    assert "not empty" in capsys.readouterr().err


@pytest.mark.slow  # about 25 s on 2 cores: ImageNet-E's generate and two evaluations
def test_an_imagenet_e_export_keeps_its_attributes_and_numbers(photos, hf_cache, tmp_path, capsys):
    data, masks = photos
    gen = tmp_path / "imagenet-e"
    argv = ["generate", "imagenet-e", "--data", str(data), "--masks", str(masks), "--out", str(gen)]
    _run([*argv, "--shift", "obj_size", "--level", "0.10,0.05", "--workers", "0"], capsys)
    origin = _evaluate(gen, tmp_path / "origin.duckdb")
    dest = tmp_path / "hf"
    _run(["export", "--data", str(gen), "--format", "hf", "--out", str(dest)], capsys)
    # Named "hf" as the ImageNet-C export is, loaded through the same cache: its own rows.
    ds = datasets.load_dataset(str(dest), split="test", cache_dir=hf_cache)
    assert len(ds) == 3 * 3 and set(ds["suite"]) == {"imagenet-e"}
    edited = [r for r in ds.remove_columns("image") if r["shift"] == "obj_size"]
    assert edited and all(json.loads(r["attributes"])["object_rate"] > 0 for r in edited)
    got = _evaluate(dest, tmp_path / "export.duckdb")
    _same(origin, got)
    stored = [Store(tmp_path / n).attributes() for n in ("origin.duckdb", "export.duckdb")]
    cols = ["sample_id", "shift", "level", "object_rate", "angle"]
    a, b = (s.sort_values(cols[:3]).reset_index(drop=True)[cols] for s in stored)
    assert len(a) == 6 and a.equals(b)


@pytest.mark.slow  # about 25 s on 2 cores: mine and two evaluations
def test_a_mined_subset_of_cells_exports_and_reads_back_as_those_cells(
    imagenet_c, tmp_path, capsys
):
    out, _ = imagenet_c
    hard = tmp_path / "hard"
    db = tmp_path / "mine.duckdb"
    argv = ["mine", "--data", str(out), "--surrogates", "lite0", "--out", str(hard)]
    _run([*argv, "--db", str(db), "--workers", "0"], capsys)
    origin = _evaluate(hard, tmp_path / "origin.duckdb")
    dest = tmp_path / "wds"
    _run(["export", "--data", str(hard), "--format", "webdataset", "--out", str(dest)], capsys)
    got = _evaluate(dest, tmp_path / "export.duckdb")
    _same(origin, got)
    assert set(got[0]["shift"]) <= {"contrast", "gaussian_noise"}


@pytest.mark.slow  # about 100 s on 2 cores: a diffusion pipeline and three evaluations
def test_an_imagenet_d_synth_folder_exports_with_its_prompts_and_numbers(
    hf_cache, tmp_path, capsys
):
    from conftest import save_tiny_text2image

    ckpt = save_tiny_text2image(tmp_path / "tiny" / "text2image")
    synth = tmp_path / "imagenet-d"
    argv = ["synth", "--checkpoint", str(ckpt), "--out", str(synth), "--classes", "0,1"]
    _run([*argv, "--max-nuisances", "1", "--size", "64", "--steps", "2"], capsys)
    origin = _evaluate(synth, tmp_path / "origin.duckdb")
    n = len(origin[1])
    assert n >= 2 and list(origin[0]["shift"]) == ["clean"]
    for fmt in ("hf", "webdataset"):
        dest = tmp_path / f"d-{fmt}"
        _run(["export", "--data", str(synth), "--format", fmt, "--out", str(dest)], capsys)
        _same(origin, _evaluate(dest, tmp_path / f"{fmt}.duckdb"))
    ds = datasets.load_dataset(str(tmp_path / "d-hf"), split="test", cache_dir=hf_cache)
    assert len(ds) == n and set(ds["label_space"]) == {"imagenet-d"}
    raw = ds.cast_column("image", datasets.Image(decode=False))
    for row in raw:
        assert row["image"]["bytes"] == (synth / row["source_id"]).read_bytes()
        assert json.loads(row["attributes"])["prompt"]  # the prompt each image was drawn from


def _decide(server, annotator: str, index: int, decision: str) -> None:
    """One decision as the review page sends it: POST /api/decide with the token."""
    import urllib.request

    body = {"annotator": annotator, "index": index, "decision": decision}
    req = urllib.request.Request(
        f"http://127.0.0.1:{server.port}/api/decide",
        data=json.dumps(body).encode(),
        headers={"X-Review-Token": server.token, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200


@pytest.mark.slow  # about 30 s on 2 cores: mine, a review through its HTTP API, two evaluations
def test_a_reviewed_subset_exports_each_verdict_and_only_the_kept_files(
    imagenet_c, hf_cache, tmp_path, capsys
):
    from robustlab.store.reviews import ReviewStore
    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.server import ReviewServer

    out, _ = imagenet_c
    hard, db, final = tmp_path / "hard", tmp_path / "r.duckdb", tmp_path / "final.csv"
    argv = ["mine", "--data", str(out), "--surrogates", "lite0", "--out", str(hard)]
    _run([*argv, "--db", str(db), "--workers", "0"], capsys)
    rs = load_review_set(hard, predictions=hard / "hard.csv")
    ids = [it.id for it in rs.items]
    assert len(ids) >= 2
    server = ReviewServer(rs, ReviewStore(db), annotator="alice").start()
    try:
        for who in ("alice", "bob"):
            for i in range(len(ids)):
                _decide(server, who, i, "reject" if i == 0 else "accept")
    finally:
        server.shutdown()
    review = ["review", "--data", str(hard), "--db", str(db), "--export", str(final)]
    assert main(review) == 0, capsys.readouterr().err
    dest = tmp_path / "hf"
    argv = ["export", "--data", str(hard), "--labels", str(final), "--format", "hf"]
    _run([*argv, "--out", str(dest)], capsys)
    ds = datasets.load_dataset(str(dest), split="test", cache_dir=hf_cache).remove_columns("image")
    assert len(ds) == len(ids) - 1  # the rejected file is no part of the set
    for row in ds:
        verdict = json.loads(row["review"])
        assert (verdict["n_accept"], verdict["n_reject"], verdict["support"]) == ("2", "0", "2")
    origin = robustlab.evaluate(
        "lite0", data=str(hard), labels_csv=str(final), db=str(tmp_path / "o.duckdb"),
        workers=0, progress=False,
    ).table  # fmt: skip
    got = _evaluate(dest, tmp_path / "e.duckdb")[0]
    keys = ["shift", "level", "n", "top1", "top5"]
    assert got[keys].to_dict("records") == origin[keys].to_dict("records")


def test_a_webdataset_shard_is_the_tar_tarfile_writes_for_its_members(tmp_path):
    """TarShard writes its headers itself (for speed): byte for byte what tarfile writes,
    for shard keys, long and non-ASCII names (tarfile's own PAX header) alike."""
    import io
    import tarfile

    from robustlab.data.exported import TarShard, tar_header

    rng = np.random.default_rng(0)
    names = ["00000000.jpg", "00000000.json", "a/b.png", "x" * 99, "x" * 120, "ünï.png"]
    members = [(n, rng.bytes(int(rng.integers(0, 3000)))) for n in names]
    expected = io.BytesIO()
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, blob in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(blob), 0o644, 0
            assert tar_header(name, len(blob)) == info.tobuf(
                tarfile.PAX_FORMAT, "utf-8", "surrogateescape"
            )
            tar.addfile(info, io.BytesIO(blob))
    shard = TarShard(tmp_path / "test-000000.tar")
    for name, blob in members:
        shard._member(name, blob)
    size = shard.close()
    assert (tmp_path / "test-000000.tar").read_bytes() == expected.getvalue()
    assert size == len(expected.getvalue())
