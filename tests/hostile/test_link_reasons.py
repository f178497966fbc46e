"""Every reader of every layout uses the one link rule and the one image reader, and names
the cause when a file is refused (issue 36, items 1, 7 and 8): an ImageNet-E archive whose
``labels.txt`` links out, level files, masks and a generated folder's manifest that link
out, another program's ``runs`` table, decompression bombs met by the VLM asker and in
cell files. Real photos, real lite0, real DuckDB."""

from __future__ import annotations

import os
import shutil
import struct
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

LEAVES = "link leaves the folder being read"
CANARY = "CANARY-1b7e5f"  # a line of the outside file: must never reach any output


def _one_error(err: str) -> str:
    lines = [line for line in err.splitlines() if ": error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _archive(root: Path, n: int = 2) -> tuple[Path, list[dict]]:
    """A published-layout ImageNet-E archive of ``n`` real photos: ``ori/``, one level
    folder ``size_0.05/`` (the photo shrunk, as the edit does) and ``labels.txt``."""
    rows = h.photo_rows(n)
    (root / "ori").mkdir(parents=True)
    (root / "size_0.05").mkdir()
    lines = []
    for r in rows:
        stem = r["file"].rsplit(".", 1)[0]
        with Image.open(h.MINI / r["file"]) as img:
            rgb = img.convert("RGB").resize((128, 128))
        rgb.save(root / "ori" / f"{stem}.png")
        rgb.resize((48, 48)).resize((128, 128)).save(root / "size_0.05" / f"{stem}.png")
        lines.append(f"{stem}.png\t{r['index']}")
    (root / "labels.txt").write_text("\n".join(lines) + "\n")
    return root, rows


def test_archive_labels_linking_out_are_refused_unread(tmp_path, capsys):
    """``ln -s /elsewhere/secret.txt ImageNet-E/labels.txt``: the outside file scored the
    run, and its lines reached stderr, the run record and the report."""
    archive, rows = _archive(tmp_path / "ImageNet-E")
    secret = tmp_path / "elsewhere" / "secret.txt"
    secret.parent.mkdir()
    # Shaped like labels, so a reader that follows the link would use it.
    secret.write_text((archive / "labels.txt").read_text() + f"{CANARY}.png\t7\n")
    (archive / "labels.txt").unlink()
    os.symlink(secret, archive / "labels.txt")
    db = tmp_path / "r.duckdb"
    code, out, err = h.cli(
        capsys, "evaluate", "lite0", "--data", archive, "--db", db, "--workers", "0"
    )
    line = _one_error(err)
    assert code == 2 and "labels.txt" in line and LEAVES in line, err
    assert CANARY not in out + err
    assert not db.exists()


def test_archive_ori_folder_linking_out_is_refused_in_one_line(tmp_path, capsys):
    """An ``ori/`` that is a link out of the archive: every image left out, then a bare
    ValueError (exit 70)."""
    archive, _ = _archive(tmp_path / "ImageNet-E")
    shutil.move(archive / "ori", tmp_path / "ori-elsewhere")
    os.symlink(tmp_path / "ori-elsewhere", archive / "ori")
    code, _, err = h.cli(
        capsys, "evaluate", "lite0", "--data", archive, "--db", tmp_path / "r.duckdb"
    )
    line = _one_error(err)
    assert code == 2 and "ori" in line and LEAVES in line, err


def test_archive_level_file_linking_out_is_named_as_a_link(tmp_path, capsys):
    """A level file that links out of the archive is not read, and its skip says why: it
    was reported as "generated file missing"."""
    archive, rows = _archive(tmp_path / "ImageNet-E")
    stem = rows[1]["file"].rsplit(".", 1)[0]
    level = archive / "size_0.05" / f"{stem}.png"
    level.unlink()
    os.symlink(h.MINI / rows[0]["file"], level)  # a real photo, outside the archive
    db = tmp_path / "r.duckdb"
    code, out, err = h.cli(
        capsys, "evaluate", "lite0", "--data", archive, "--db", db, "--workers", "0"
    )
    assert code == 0, err
    from robustlab.store import Store

    store = Store(db)
    run = store.runs().iloc[0]
    reasons = dict(map(tuple, run["skipped"]))
    assert LEAVES in reasons[f"{stem}.png"] and "missing" not in reasons[f"{stem}.png"]
    cells = store.cell_table([run["run_id"]]).set_index("shift")["n"]
    assert (int(cells["clean"]), int(cells["size"])) == (2, 1)  # the outside photo: unread


def test_a_mask_linking_out_is_named_as_a_link(tmp_path, capsys):
    """A mask that links out of the masks folder was skipped as "no mask in the masks
    folder": the user looked for a missing file that was there."""
    data = tmp_path / "data"
    masks = tmp_path / "masks"
    rows = h.photo_rows(2)
    for r in rows:
        (data / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        shutil.copyfile(h.MINI / r["file"], data / r["wnid"] / r["file"])
        with Image.open(h.MINI / r["file"]) as img:
            w, ht = img.size
        mask = Image.new("L", (w, ht), 0)
        mask.paste(255, (w // 4, ht // 4, 3 * w // 4, 3 * ht // 4))
        mask.save(masks / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png"))
    linked = masks / rows[1]["wnid"] / (rows[1]["file"].rsplit(".", 1)[0] + ".png")
    shutil.move(linked, tmp_path / "stray.png")
    os.symlink(tmp_path / "stray.png", linked)
    out = tmp_path / "gen"
    code, _, err = h.cli(
        capsys,
        *("generate", "ximagenet12", "--data", data, "--masks", masks, "--out", out),
        *("--shift", "segmented", "--workers", "0", "--no-progress"),
    )
    assert code == 0, err
    import json

    manifest = json.loads((out / "manifest.json").read_text())
    reasons = {d["id"]: d["reason"] for d in manifest["skipped_inputs"]}
    why = reasons[f"{rows[1]['wnid']}/{rows[1]['file']}"]
    assert LEAVES in why and "stray.png" in why, why


def test_a_generated_manifest_linking_out_is_refused(tmp_path, capsys):
    """A generated folder's ``manifest.json`` swapped for a link to another folder's: it
    named that folder's source, seed and cells."""
    data = h.flat_folder(tmp_path / "flat", 1)
    out = tmp_path / "gen"
    code, _, err = h.cli(
        capsys,
        *("generate", "imagenet-c", "--data", data, "--out", out, "--shift", "contrast"),
        *("--level", "1", "--workers", "0", "--no-progress"),
    )
    assert code == 0, err
    shutil.move(out / "manifest.json", tmp_path / "elsewhere.json")
    os.symlink(tmp_path / "elsewhere.json", out / "manifest.json")
    code, _, err = h.cli(capsys, "evaluate", "lite0", "--data", out, "--db", tmp_path / "r.duckdb")
    line = _one_error(err)
    assert code == 2 and "manifest.json" in line and LEAVES in line, err


def test_a_metadata_csv_linking_out_is_refused(tmp_path, capsys):
    """``holdout --data DIR`` read ``DIR/metadata.csv`` through a link out of the folder."""
    data = tmp_path / "icons"
    (data / "a").mkdir(parents=True)
    shutil.copyfile(h.MINI / h.photo_rows(1)[0]["file"], data / "a" / "x.JPEG")
    (tmp_path / "meta.csv").write_text("file,class,style\na/x.JPEG,a,s1\n")
    os.symlink(tmp_path / "meta.csv", data / "metadata.csv")
    code, _, err = h.cli(
        capsys,
        *("holdout", "--data", data, "--holdout", "style=s1", "--db", tmp_path / "h.duckdb"),
        *("--out", tmp_path / "ck"),
    )
    line = _one_error(err)
    assert code == 2 and "metadata.csv" in line and LEAVES in line, err


def test_a_file_given_as_a_folder_is_named_as_one(tmp_path, capsys):
    """``--masks labels.csv`` said "masks folder ... does not exist"; the file is there.
    Found by tests/hostile/corpus.py."""
    data = h.flat_folder(tmp_path / "flat", 1)
    argv = ["evaluate", "lite0", "--data", data, "--db", tmp_path / "r.duckdb"]
    code, _, err = h.cli(capsys, *argv, "--masks", data / "labels.csv", "--suite", "ximagenet12")
    line = _one_error(err)
    assert code == 2 and "is not a folder" in line and "does not exist" not in line, err
    code, _, err = h.cli(capsys, *argv, "--labels", tmp_path)
    line = _one_error(err)
    assert code == 2 and "is not a file" in line and "does not exist" not in line, err


@pytest.mark.parametrize("body", [b"not a state dict\n", b"\xff\xd8\xff\xe0 a JPEG, say"])
def test_a_file_that_is_no_weights_file_is_named_as_such(tmp_path, capsys, body):
    """A text file given as ``--weights`` was refused as "holds pickled Python objects
    besides tensors": torch's unpickler fails on it the way it refuses code. Found by
    tests/hostile/corpus.py."""
    weights = tmp_path / "w.pth"
    weights.write_bytes(body)
    data = h.flat_folder(tmp_path / "flat", 1)
    code, _, err = h.cli(
        capsys, "evaluate", "lite0", "--weights", weights, "--data", data,
        "--db", tmp_path / "r.duckdb", "--workers", "0",
    )  # fmt: skip
    line = _one_error(err)
    assert code == 2 and "not a PyTorch weights file" in line, err
    assert "pickled Python objects" not in line


def test_a_foreign_runs_table_is_named(tmp_path, capsys):
    """A DuckDB file with another program's ``runs(a int)`` table was "no runs table"."""
    import duckdb

    db = tmp_path / "other.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE runs (a INTEGER)")
    con.close()
    code, _, err = h.cli(capsys, "results", "--db", db)
    line = _one_error(err)
    assert code == 3 and "runs(a)" in line and "no runs table" not in line, err


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".json"])
def test_a_data_file_given_as_the_database_is_named(tmp_path, capsys, suffix):
    """DuckDB 2 opens an existing ``.csv`` (``.parquet``, ``.json``) given as a database as
    an in-memory database with a view over it: ``results --db labels.csv`` exited 70
    ("Cannot launch in-memory database in read-only mode"). Found by tests/hostile/corpus.py."""
    import duckdb

    db = tmp_path / f"labels{suffix}"
    rows = h.photo_rows(3)
    if suffix == ".csv":
        h.write_labels(db, rows)
    else:
        con = duckdb.connect()
        fmt = "PARQUET" if suffix == ".parquet" else "JSON"
        con.execute(f"COPY (SELECT 1 AS a) TO '{db}' (FORMAT {fmt})")
        con.close()
    before = db.read_bytes()
    code, _, err = h.cli(capsys, "results", "--db", db)
    line = _one_error(err)
    assert code == 3 and "is not a DuckDB database file" in line, err
    data = h.flat_folder(tmp_path / "flat", 1)
    code, _, err = h.cli(capsys, "evaluate", "lite0", "--data", data, "--db", db)
    assert code == 3 and "is not a DuckDB database file" in _one_error(err), err
    assert db.read_bytes() == before


def _bomb_png(path: Path, side: int = 20000) -> Path:
    """A real 1x1 PNG whose header claims ``side`` x ``side`` pixels (400 million at the
    default): a decompression bomb by its header, a few bytes on disk."""
    import io

    buf = io.BytesIO()
    Image.new("RGB", (1, 1), (200, 10, 10)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    ihdr = data.index(b"IHDR")
    data[ihdr + 4 : ihdr + 12] = struct.pack(">II", side, side)
    crc = zlib.crc32(bytes(data[ihdr : ihdr + 17])) & 0xFFFFFFFF
    data[ihdr + 17 : ihdr + 21] = struct.pack(">I", crc)
    path.write_bytes(bytes(data))
    return path


def test_the_vlm_asker_reads_images_through_the_guarded_reader(tmp_path):
    """``vlm`` opened images with ``Image.open``: a bomb's header was no skip but an
    exception the run did not catch (exit 70), and no header limit applied."""
    from robustlab.workflows.imagenet_d.vlm.questions import Item
    from robustlab.workflows.imagenet_d.vlm.run import _open

    photo = tmp_path / "cls" / "photo.JPEG"
    photo.parent.mkdir()
    shutil.copyfile(h.MINI / h.photo_rows(1)[0]["file"], photo)
    bomb = _bomb_png(tmp_path / "cls" / "bomb.png")
    skipped: list = []
    good = _open(Item("background", "cls/photo.JPEG", photo, "a", "a", "b"), str(tmp_path), skipped)
    with Image.open(photo) as img:
        assert good is not None and good.size == img.size and skipped == []
    item = Item("background", "cls/bomb.png", bomb, "a", "a", "b")
    assert _open(item, str(tmp_path), skipped) is None
    assert len(skipped) == 1 and skipped[0][0] == "cls/bomb.png", skipped
    assert skipped[0][1].startswith("unreadable image: too large"), skipped


def test_a_cell_file_is_decoded_by_the_guarded_reader(tmp_path):
    """Generated and archive cell files went through a bare ``Image.open``: a bomb there
    raised Pillow's own error, which the workers count as a bug (exit 70)."""
    from robustlab.data.images import ImageError
    from robustlab.pipeline import decode

    with pytest.raises(ImageError, match="too large"):
        decode(_bomb_png(tmp_path / "bomb.png").read_bytes())
    photo = (h.MINI / h.photo_rows(1)[0]["file"]).read_bytes()
    with Image.open(h.MINI / h.photo_rows(1)[0]["file"]) as img:
        assert decode(photo).shape == (img.size[1], img.size[0], 3)


def test_the_vlm_question_folder_linking_out_is_refused(tmp_path):
    """ImageNet-D's own ``questions/`` folder swapped for a link out of the data root:
    its CSVs (and the image paths they name) were read from there."""
    from robustlab.errors import InputError
    from robustlab.workflows.imagenet_d.vlm.questions import read_question_csvs

    root = tmp_path / "imagenet-d"
    (root / "background" / "cls").mkdir(parents=True)
    shutil.copyfile(h.MINI / h.photo_rows(1)[0]["file"], root / "background" / "cls" / "a.JPEG")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "background.csv").write_text(
        f"image_dir\tgt_category\ttop1_pred_cate\ttop2_pred_cate\n../{CANARY}.JPEG\tcls\tdog\tcat\n"
    )
    os.symlink(elsewhere, root / "questions")
    with pytest.raises(InputError, match=LEAVES):
        read_question_csvs(root)
    shutil.rmtree(elsewhere)
    os.unlink(root / "questions")
    (root / "questions").mkdir()
    (root / "questions" / "background.csv").write_text(
        "image_dir\tgt_category\ttop1_pred_cate\ttop2_pred_cate\nbackground/cls/a.JPEG\tcls\tdog\tcat\n"
    )
    assert [it.image_id for it in read_question_csvs(root)] == ["background/cls/a.JPEG"]


def test_masks_never_write_through_a_link_in_their_folder(tmp_path, capsys):
    """A masks folder holding, under a mask's name, a link to a file elsewhere: that file
    was read as a cached mask, and ``--overwrite`` wrote the new mask through the link
    over it."""
    row = h.photo_rows(1)[0]
    data = tmp_path / "data" / row["wnid"]
    data.mkdir(parents=True)
    shutil.copyfile(h.MINI / row["file"], data / row["file"])
    with Image.open(h.MINI / row["file"]) as img:
        size = img.size
    elsewhere = tmp_path / "elsewhere.png"
    Image.new("L", size, 255).save(elsewhere)  # a full mask of the right size, elsewhere
    before = elsewhere.read_bytes()
    boxes = tmp_path / "boxes.csv"
    w, ht = size
    box = f"{w // 5},{ht // 5},{4 * w // 5},{4 * ht // 5}"
    boxes.write_text(f"file,x0,y0,x1,y1\n{row['wnid']}/{row['file']},{box}\n")
    out = tmp_path / "masks"
    argv = ["masks", "--data", tmp_path / "data", "--bboxes", boxes, "--out", out]
    argv += ["--max-side", "64", "--no-progress"]
    code, _, err = h.cli(capsys, *argv)
    assert code == 0, err
    target = next(out.rglob("*.png"))
    target.unlink()
    os.symlink(elsewhere, target)
    for extra in ([], ["--overwrite"]):
        code, _, err = h.cli(capsys, *argv, *extra)
        assert code == 0, err
        assert elsewhere.read_bytes() == before  # never read as a mask, never written
    assert not target.is_symlink() and target.read_bytes() != before


def test_generate_never_writes_through_a_link_in_its_folder(tmp_path, capsys):
    """A shift folder of a generated folder swapped for a link to a folder elsewhere: the
    next run wrote its cells there (the link rule held for readers only)."""
    data = h.flat_folder(tmp_path / "flat", 1)
    out = tmp_path / "gen"
    argv = ["generate", "imagenet-c", "--data", data, "--out", out, "--shift", "contrast"]
    argv += ["--workers", "0", "--no-progress"]
    code, _, err = h.cli(capsys, *argv, "--level", "1")
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"
    shutil.move(out / "contrast", elsewhere)
    os.symlink(elsewhere, out / "contrast")
    before = sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*"))
    code, _, err = h.cli(capsys, *argv, "--level", "1,2")
    line = _one_error(err)
    assert code == 2 and "contrast is a link out of it" in line, err
    assert sorted(p.relative_to(elsewhere) for p in elsewhere.rglob("*")) == before
