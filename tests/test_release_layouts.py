"""The presets' release layouts: ``generate cifar-c`` writes CIFAR-10-C's ``.npy`` arrays,
and ``evaluate --data`` reads them (and Tiny-ImageNet-C's 64x64 folders) as downloaded,
with the same numbers as the generated folders they came from."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import robustlab
from robustlab.data.published import LAYOUTS, detect
from robustlab.data.release_npy import RowReader, open_release
from robustlab.errors import InputError
from robustlab.pipeline import decode
from robustlab.workflows.generate import generate

pytestmark = pytest.mark.xdist_group("release_layouts")

PHOTOS = Path(__file__).parent / "fixtures" / "shared-mini" / "imagenet-samples"
# Real photos filed under CIFAR-10 classes (cifar10 label space) / their wnids.
CIFAR = {
    "bird": ["n01514859_hen.JPEG", "n01532829_house_finch.JPEG"],
    "dog": ["n02087046_toy_terrier.JPEG", "n02085782_Japanese_spaniel.JPEG"],
}
SHIFTS = "gaussian_noise,frost"


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    for cls, files in CIFAR.items():
        (root / "data" / cls).mkdir(parents=True)
        for f in files:
            shutil.copy(PHOTOS / f, root / "data" / cls / f)
    generate("cifar-c", root / "data", root / "gen", shifts=SHIFTS, workers=0, progress=False)
    (root / "rel").mkdir()
    for f in (root / "gen").glob("*.npy"):
        shutil.copy(f, root / "rel" / f.name)
    return root


def test_generate_writes_the_release_arrays(cifar):
    gen = cifar / "gen"
    assert sorted(p.name for p in gen.glob("*.npy")) == [
        "frost.npy",
        "gaussian_noise.npy",
        "labels.npy",
    ]
    labels = np.load(gen / "labels.npy")
    # 4 images, their labels once per severity (CIFAR order: bird 2, dog 5), as released
    assert labels.dtype == np.uint8 and labels.tolist() == [2, 2, 5, 5] * 5
    arr = np.load(gen / "frost.npy")
    assert arr.dtype == np.uint8 and arr.shape == (20, 32, 32, 3)
    ids = ["bird/" + f for f in CIFAR["bird"]] + ["dog/" + f for f in CIFAR["dog"]]
    for s in range(1, 6):
        for k, sid in enumerate(sorted(ids)):
            png = gen / "frost" / str(s) / Path(sid).with_suffix(".png")
            assert np.array_equal(arr[(s - 1) * 4 + k], decode(png.read_bytes())), (s, sid)


def test_release_read_as_downloaded_gives_the_folders_numbers(cifar, tmp_path):
    assert detect(cifar / "rel") is LAYOUTS["cifar-10-c"]
    db = tmp_path / "r.duckdb"
    kw = dict(db=db, shifts="frost", levels="1,5", workers=0, progress=False)
    on_npy = robustlab.evaluate("lite0", data=cifar / "rel", **kw).table
    on_gen = robustlab.evaluate("lite0", data=cifar / "gen", **kw).table
    assert set(on_npy["suite"]) == {"cifar-10-c-published"}
    key = ["shift", "level", "n", "top1", "top5"]
    npy = on_npy.assign(level=on_npy["level"].astype(str))[key].reset_index(drop=True)
    gen = on_gen[on_gen["shift"] != "clean"]
    gen = gen.assign(level=gen["level"].astype(str))[key].reset_index(drop=True)
    assert len(npy) == 2 and npy.equals(gen)
    # ImageNet-C's AlexNet errors never score a preset's cells (other constants and sizes)
    from robustlab.store import Store
    from robustlab.workflows.results import summary_rows

    store = Store(db)
    for run in store.runs().to_dict("records"):
        cells = store.cell_table([run["run_id"]])
        with pytest.raises(InputError, match="AlexNet errors are ImageNet-C's"):
            summary_rows(store, run, cells, "alexnet")


def _release(tmp_path: Path, n: int = 4) -> Path:
    rng = np.random.default_rng(0)
    root = tmp_path / "rel"
    root.mkdir()
    np.save(root / "labels.npy", np.tile(np.arange(n) % 10, 5).astype(np.uint8))
    for name in ("fog", "snow"):
        np.save(root / f"{name}.npy", rng.integers(0, 256, (5 * n, 32, 32, 3), dtype=np.uint8))
    return root


def test_bad_release_files_are_counted_skips(tmp_path):
    root = _release(tmp_path)
    full = (root / "snow.npy").read_bytes()
    (root / "snow.npy").write_bytes(full[: len(full) // 2])  # a cut download
    np.save(root / "contrast.npy", np.zeros((20, 32, 32, 3), np.float32))  # not uint8
    np.save(root / "brightness.npy", np.zeros((15, 32, 32, 3), np.uint8))  # 3 x N
    (root / "pixelate.npy").write_bytes(b"not an npy file")
    (root / "README.txt").write_text("x")
    rel = open_release(root)
    assert list(rel.files) == ["fog"] and rel.n == 4
    why = dict(rel.skipped)
    assert "cut short" in why["snow.npy"]
    assert "not uint8" in why["contrast.npy"]
    assert "holds 15 images; labels.npy says 5 x 4" in why["brightness.npy"]
    assert "unreadable .npy" in why["pixelate.npy"]
    assert "not part of the CIFAR-10-C layout" in why["README.txt"]


def test_bad_labels_are_one_line(tmp_path):
    root = _release(tmp_path)
    (root / "labels.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(InputError, match="labels.npy: unreadable labels"):
        open_release(root)
    np.save(root / "labels.npy", np.zeros((20, 2), np.uint8))
    with pytest.raises(InputError, match="not one integer per image"):
        open_release(root)


def test_rows_are_read_through_a_memory_map(tmp_path):
    """One image at a time from a map of the file, never the 5 x N array in memory."""
    root = _release(tmp_path)
    reader = RowReader(root)
    whole = np.load(root / "fog.npy")
    assert np.array_equal(reader.image("fog.npy", 13), whole[13])
    assert isinstance(reader._maps["fog.npy"], np.memmap)
    # pickled to a worker without the map, which reopens it there
    import pickle

    assert pickle.loads(pickle.dumps(reader))._maps == {}


def test_labels_outside_the_space_are_skipped(tmp_path):
    """CIFAR-100-C's labels (0..99) on the 10-class default: those samples are counted
    skips with the reason, the others are evaluated."""
    root = _release(tmp_path, n=4)
    np.save(root / "labels.npy", np.tile(np.array([1, 50, 3, 99]), 5).astype(np.uint8))
    res = robustlab.evaluate(
        "lite0",
        data=root,
        db=tmp_path / "x.duckdb",
        shifts="fog",
        levels="1",
        workers=0,
        progress=False,
    )
    assert res.table["n"].tolist() == [2]
    reasons = [why for _, why in res.skipped]
    assert any("label 50 is not a class of 'cifar10'" in r for r in reasons)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A Tiny-ImageNet-C style tree: generate's 64x64 files without its manifest."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "data").mkdir()
    for f in ("n01440764_tench.JPEG", "n01484850_great_white_shark.JPEG"):
        (root / "data" / f[:9]).mkdir()
        shutil.copy(PHOTOS / f, root / "data" / f[:9] / f)
    generate(
        "tiny-imagenet-c",
        root / "data",
        root / "gen",
        shifts="contrast",
        levels="1,5",
        workers=0,
        progress=False,
    )
    shutil.copytree(root / "gen", root / "pub", ignore=shutil.ignore_patterns("*.json", "*.csv"))
    return root


def test_tiny_imagenet_c_folders_read_as_downloaded(tiny, tmp_path):
    assert detect(tiny / "pub") is LAYOUTS["tiny-imagenet-c"]
    f = next((tiny / "pub").rglob("*.JPEG"))
    assert f.relative_to(tiny / "pub").parts[0] == "contrast"
    db = tmp_path / "t.duckdb"
    pub = robustlab.evaluate("lite0", data=tiny / "pub", db=db, workers=0, progress=False).table
    gen = robustlab.evaluate("lite0", data=tiny / "gen", db=db, workers=0, progress=False).table
    assert set(pub["suite"]) == {"tiny-imagenet-c-published"}
    gen = gen[gen["shift"] != "clean"]
    key = ["shift", "n", "top1", "top5"]
    assert pub[key].reset_index(drop=True).equals(gen[key].reset_index(drop=True))


@pytest.mark.parametrize(
    ("side", "layout"), [(224, "imagenet-c"), (299, "imagenet-c-299"), (64, "tiny-imagenet-c")]
)
def test_corruption_trees_are_told_apart_by_image_side(tmp_path, side, layout):
    from PIL import Image

    folder = tmp_path / "gaussian_noise" / "3" / "n01440764"
    folder.mkdir(parents=True)
    Image.new("RGB", (side, side)).save(folder / "a.JPEG")
    assert detect(tmp_path) is LAYOUTS[layout]
    assert detect(tmp_path / "gaussian_noise") is LAYOUTS[layout]
