"""Shared fixtures: paths into ../shared/data, skipped with a message when it is absent."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
SAMPLES = SHARED / "imagenet-samples"
REFERENCE_NPZ = SHARED / "imagenet_c_reference.npz"


@pytest.fixture(autouse=True, scope="session")
def _content_hash_cache(tmp_path_factory):
    """Content-hash cache in a temp folder, never the user's ~/.cache (subprocesses inherit it)."""
    import os

    path = tmp_path_factory.mktemp("robustlab-cache")
    old = os.environ.get("ROBUSTLAB_CACHE_DIR")
    os.environ["ROBUSTLAB_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("ROBUSTLAB_CACHE_DIR", None)
    else:
        os.environ["ROBUSTLAB_CACHE_DIR"] = old


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared test data not found at {path} (CI provides ../shared/data)")
    return path


@pytest.fixture(scope="session")
def samples_dir() -> Path:
    """Folder of 500 real ImageNet photos with labels.csv."""
    return _need(SAMPLES)


@pytest.fixture(scope="session")
def reference():
    """The reference ImageNet-C outputs: (npz mapping, meta dict)."""
    data = np.load(_need(REFERENCE_NPZ))
    return data, json.loads(str(data["meta"]))


@pytest.fixture(scope="session")
def photo(samples_dir) -> np.ndarray:
    """One real 224x224 RGB photo (resize 256, center crop 224)."""
    from PIL import Image

    img = Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return np.asarray(img.crop((left, top, left + 224, top + 224))).copy()


def make_masked_folder(samples_dir: Path, root: Path, n: int, step: float):
    """``n`` real photos in class folders under ``root/data``, each with an elliptic mask
    PNG under ``root/masks`` (ellipse centre moves down by ``step`` of the height per photo)."""
    import csv
    import shutil

    from PIL import Image

    data, masks = root / "data", root / "masks"
    with open(samples_dir / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))[:n]
    for i, r in enumerate(rows):
        (data / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        shutil.copy(samples_dir / r["file"], data / r["wnid"] / r["file"])
        w, h = Image.open(samples_dir / r["file"]).size
        yy, xx = np.mgrid[:h, :w]
        m = ((yy - h * (0.45 + step * i)) / (0.3 * h)) ** 2 + ((xx - w / 2) / (0.25 * w)) ** 2 <= 1
        Image.fromarray(m.astype(np.uint8) * 255).save(masks / r["wnid"] / (r["file"].rsplit(".", 1)[0] + ".png"))
    return data, masks
