"""frost: texture lookup through importlib.metadata, enlargement for large images."""

from __future__ import annotations

import importlib.metadata as metadata

import numpy as np
import pytest

import robustlab
from robustlab.shifts.corruptions import frost as fr


def test_textures_come_from_the_distribution():
    paths = fr.texture_paths()
    assert [p.name for p in paths] == list(fr.TEXTURES)
    assert all(p.parent.name == "frost" and p.is_file() for p in paths)
    tex = fr.texture(0)
    assert tex.dtype == np.uint8 and tex.ndim == 3 and not tex.flags.writeable
    assert fr.texture(0) is tex  # decoded once


def test_missing_distribution_names_the_package(monkeypatch):
    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(fr.metadata, "distribution", missing)
    fr.texture_paths.cache_clear()
    fr.texture.cache_clear()
    fr._enlarged.cache_clear()
    try:
        with pytest.raises(ValueError, match="pip install imagecorruptions"):
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
    crop = tex[top:top + 224, left:left + 224][..., ::-1]
    expected = np.clip(0.7 * photo + 0.7 * crop, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(robustlab.corrupt(photo, "frost", 3, seed=np.random.RandomState(42)), expected)
