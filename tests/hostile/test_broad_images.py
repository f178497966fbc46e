"""Image files a real folder holds that the first hostile rounds did not: other modes and
depths, EXIF rotation, progressive and truncated JPEGs, animations, bombs, lying headers
and degenerate shapes.

Each is either evaluated (converted, with its note) or skipped with its reason; the
counts add up to the files on disk, and no input byte changes.
"""

from __future__ import annotations

import hashlib
import io
import re
import struct
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def _png(width: int, height: int, depth: int, colour: int, idat: bytes | None) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    body = _chunk(b"IHDR", ihdr) + (_chunk(b"IDAT", idat) if idat is not None else b"")
    return b"\x89PNG\r\n\x1a\n" + body + _chunk(b"IEND", b"")


# name -> None (evaluated) or a piece of its skip reason
EXPECTED = {
    "cmyk.jpg": None,
    "gray16.png": None,
    "rgb16.png": None,
    "palette_transparent.png": None,
    "la.png": None,
    "bilevel.png": None,
    "exif_rotated.jpg": None,
    "progressive.jpg": None,
    "anim.gif": None,
    "anim.webp": None,
    "one_pixel.png": None,
    "truncated.jpg": "truncated",
    "bomb.png": "too large",
    "huge_header.png": "too large",
    "zero_size.png": "not an image",
    "empty.jpg": "not an image",
    "strip.png": "extreme aspect ratio",
}


def _write_corpus(cls: Path) -> None:
    row = h.photo_rows(1)[0]
    photo = Image.open(h.MINI / row["file"]).convert("RGB")
    small = photo.resize((96, 80))
    cls.mkdir(parents=True)
    small.convert("CMYK").save(cls / "cmyk.jpg")
    gray = np.asarray(small.convert("L")).astype(np.uint16) * 257
    Image.fromarray(gray).save(cls / "gray16.png")
    rgb16 = np.asarray(small).astype(">u2") * 257
    rows = b"".join(b"\x00" + line.tobytes() for line in rgb16)
    (cls / "rgb16.png").write_bytes(_png(96, 80, 16, 2, zlib.compress(rows)))
    small.convert("P", palette=Image.ADAPTIVE).save(cls / "palette_transparent.png", transparency=0)
    small.convert("LA").save(cls / "la.png")
    small.convert("1").save(cls / "bilevel.png")
    exif = small.getexif()
    exif[0x0112] = 6  # "rotate 90 CW to view"
    small.save(cls / "exif_rotated.jpg", exif=exif)
    small.save(cls / "progressive.jpg", progressive=True)
    buf = io.BytesIO()
    photo.save(buf, "JPEG")
    (cls / "truncated.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    frames = [small, small.rotate(90), small.rotate(180)]
    frames[0].save(cls / "anim.gif", save_all=True, append_images=frames[1:], duration=50)
    frames[0].save(cls / "anim.webp", save_all=True, append_images=frames[1:], duration=50)
    small.resize((1, 1)).save(cls / "one_pixel.png")
    # 20000x20000 zeros: 400 M pixels in about 400 kB of file
    side = 20_000
    comp = zlib.compressobj(9)
    idat = b"".join(comp.compress(b"\x00" * (side + 1)) for _ in range(side)) + comp.flush()
    (cls / "bomb.png").write_bytes(_png(side, side, 8, 0, idat))
    (cls / "huge_header.png").write_bytes(_png(2**31 - 1, 2**31 - 1, 8, 2, None))
    (cls / "zero_size.png").write_bytes(_png(0, 0, 8, 2, None))
    (cls / "empty.jpg").write_bytes(b"")
    Image.new("RGB", (30_000, 2), "red").save(cls / "strip.png")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("broad") / "data"
    _write_corpus(data / h.photo_rows(1)[0]["wnid"])
    return data


def _digests(root: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_evaluate_takes_or_counts_every_file_and_changes_none(corpus, tmp_path, capsys, caplog):
    import duckdb

    before = _digests(corpus)
    db = tmp_path / "e.duckdb"
    code, out, err = h.cli(
        capsys, "evaluate", "lite0", "--data", corpus, "--db", db, "--workers", "0"
    )
    assert code == 0, err
    assert "Traceback" not in err and "internal error" not in err
    assert _digests(corpus) == before
    skipped = {n: why for n, why in EXPECTED.items() if why}
    for name, why in skipped.items():
        assert re.search(rf"skipping \S*{re.escape(name)}: .*{why}", caplog.text + err), name
    assert f"skipped {len(skipped)} image(s)" in out + err
    with duckdb.connect(str(db), read_only=True) as con:
        ids = {
            r[0].rsplit("/", 1)[-1] for r in con.sql("SELECT sample_id FROM predictions").fetchall()
        }
    assert ids == {n for n, why in EXPECTED.items() if why is None}


def test_masks_skip_an_extreme_strip_instead_of_blowing_up(tmp_path, capsys, caplog):
    """A 30000x2 strip was scaled to 224 px on its short side for the CAM seed: the
    masks command grew to 17 GB and died in the OOM killer."""
    data = tmp_path / "data" / "n01440764"
    data.mkdir(parents=True)
    Image.new("RGB", (30_000, 2), "red").save(data / "strip.png")
    code, out, err = h.cli(
        capsys, "masks", "--data", tmp_path / "data", "--out", tmp_path / "m", "--max-side", "64"
    )
    assert code == 0, err
    assert "extreme aspect ratio" in caplog.text + err and "1 skipped" in out
