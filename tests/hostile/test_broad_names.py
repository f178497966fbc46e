"""File names a real folder can hold: at the length limit, with newlines, tabs, quotes,
a leading dash, non-ASCII, or bytes that are not UTF-8.

Every one is either processed like any photo or skipped with its reason counted; none
fails a write or vanishes from the counts.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

GOOD_NAMES = [
    "x" * 247 + ".JPEG",  # 252 bytes: legal, but not once ".<name>.<pid>.rltmp" is added
    "new\nline.JPEG",
    'tab\tcomma,"quote".JPEG',
    "-dash-first.JPEG",
    "ünïcødé 名前.JPEG",
]
BAD_NAME = b"caf\xe9-latin1.JPEG"  # Latin-1 bytes: not valid UTF-8


def _folder(root: Path) -> tuple[Path, str]:
    row = h.photo_rows(1)[0]
    cls = root / row["wnid"]
    cls.mkdir(parents=True)
    for name in GOOD_NAMES:
        shutil.copyfile(h.MINI / row["file"], cls / name)
    shutil.copyfile(h.MINI / row["file"], os.path.join(os.fsencode(cls), BAD_NAME))
    return root, row["wnid"]


def test_generate_writes_every_legal_name_and_counts_the_undecodable_one(tmp_path, capsys):
    data, wnid = _folder(tmp_path / "data")
    out = tmp_path / "gen"
    code, stdout, err = h.cli(
        capsys,
        *("generate", "imagenet-c", "--data", data, "--out", out),
        *("--shifts", "gaussian_noise", "--level", "1", "--workers", "0", "--no-progress"),
    )
    assert code == 0, err
    assert "Traceback" not in err and "failed" not in err
    assert f"{len(GOOD_NAMES)} written" in stdout and "1 inputs skipped" in stdout, stdout
    cell = out / "gaussian_noise" / "1" / wnid
    assert sorted(p.name for p in cell.iterdir()) == sorted(GOOD_NAMES)
    assert not [p for p in out.rglob("*") if p.name.endswith(".rltmp")]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["written"] == len(GOOD_NAMES)
