"""frost: the shipped reference textures, enlargement for large images."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import robustlab
from robustlab.shifts.corruptions import frost as fr


# SHA-256 of the files in imagecorruptions 1.1.2 (the ImageNet-C frost photographs).
REFERENCE_SHA256 = {
    "frost1.png": "ff9f907860bd7a835d459e32f9d588062b7f61ee267343cc7222b56753a14755",
    "frost2.png": "fe211a89b336999c207a852ce05818d4545d0b57c5beadd824b4cc9d9a9b6137",
    "frost3.png": "2d0d50b4a9bb213f38b024ef7768731bb83cc08d2f26b5766bbc167cdfa0e504",
    "frost4.jpg": "3f8b91ca1a9fa7167b09e773da53f5ae60d0a1fd88f02a783f6e328a72887f6e",
    "frost5.jpg": "5fc6a19df4a429ba68abdcc8f8a4278d4c9f81c9ccafd2c92ab0c8cf8992ebd2",
    "frost6.jpg": "1f92b2f48408748085b68dd81d816ef239f42cef3029c25d041fcb6760fb4f25",
}


def test_textures_ship_with_robustlab_byte_identical_to_the_reference():
    paths = fr.texture_paths()
    assert [p.name for p in paths] == list(fr.TEXTURES)
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths} == REFERENCE_SHA256
    assert (paths[0].parent / "LICENSE").read_text().lstrip().startswith("Apache License")
    tex = fr.texture(0)
    assert tex.dtype == np.uint8 and tex.ndim == 3 and not tex.flags.writeable
    assert fr.texture(0) is tex  # decoded once


def test_a_damaged_install_says_to_reinstall(monkeypatch, tmp_path):
    monkeypatch.setattr(fr.resources, "files", lambda package: tmp_path)
    fr.texture_paths.cache_clear()
    fr.texture.cache_clear()
    fr._enlarged.cache_clear()
    try:
        with pytest.raises(ValueError, match="frost textures frost1.png.*reinstall robustlab"):
            robustlab.corrupt(np.zeros((64, 64, 3), np.uint8), "frost", 1, seed=0)
    finally:
        fr.texture_paths.cache_clear()
        fr.texture.cache_clear()


def test_large_image_uses_an_enlarged_texture(photo):
    big = np.ascontiguousarray(np.tile(photo, (4, 5, 1))[:700, :1000])
    for idx in range(fr.N_DRAWN):
        tex = fr.texture_for(idx, 700, 1000)
        assert tex.shape[0] > 700 and tex.shape[1] > 1000
    out = robustlab.corrupt(big, "frost", 5, seed=3)
    assert out.shape == big.shape
    # frost brightens: a*x + b*frost with a + b >= 1.35 and light frost textures
    assert out.astype(float).mean() > big.astype(float).mean()


def test_crop_matches_manual_blend(photo):
    rs = np.random.RandomState(42)
    idx = rs.randint(5)
    tex = fr.texture(idx)
    top, left = rs.randint(0, tex.shape[0] - 224), rs.randint(0, tex.shape[1] - 224)
    crop = tex[top : top + 224, left : left + 224][..., ::-1]
    expected = np.clip(0.7 * photo + 0.7 * crop, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(
        robustlab.corrupt(photo, "frost", 3, seed=np.random.RandomState(42)), expected
    )
