"""robustlab.data.sources.discover: ImageFolder trees, flat folders with a labels CSV."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robustlab.data.sources import Sample, discover
from robustlab.errors import MissingResourceError


def _img(path, size=(40, 36)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), 128, np.uint8)).save(path)


def test_shared_flat_folder_with_labels_csv(samples_dir):
    samples = discover(samples_dir)
    rows = (samples_dir / "labels.csv").read_text().splitlines()[1:]  # 500, or the compact 124
    assert len(samples) == len(rows) >= 100 and samples.layout == "flat" and samples.skipped == []
    assert [s.id for s in samples] == sorted(s.id for s in samples)
    tench = samples[0]
    assert tench == Sample(
        "n01440764_tench.JPEG", samples_dir.resolve() / "n01440764_tench.JPEG", "n01440764", 0
    )
    # The CSV's index column fills the label; wnid is preferred as the class name.
    fountain = next(s for s in samples if s.id == "n03388043_fountain.JPEG")
    assert fountain.class_name == "n03388043" and fountain.label == 562


def test_imagefolder_tree(tmp_path):
    root = tmp_path / "data"
    _img(root / "cat" / "b.png")
    _img(root / "cat" / "a.JPG")
    _img(root / "dog" / "sub" / "c.jpeg")
    _img(root / "loose.png")
    (root / "dog" / "notes.txt").write_text("hello")
    (root / ".hidden").mkdir()
    _img(root / ".hidden" / "x.png")
    (root / "cat" / ".a.JPG.123.rltmp").write_bytes(b"partial")
    samples = discover(root)
    assert samples.layout == "imagefolder"
    assert [s.id for s in samples] == ["cat/a.JPG", "cat/b.png", "dog/sub/c.jpeg"]
    assert [s.class_name for s in samples] == ["cat", "cat", "dog"]
    assert all(s.label is None for s in samples)
    assert dict(samples.skipped) == {
        "dog/notes.txt": "not an image file (extension '.txt')",
        "loose.png": "not inside a class folder",
    }


def test_csv_columns_missing_and_unlisted_files(tmp_path):
    root = tmp_path / "flat"
    _img(root / "a.png")
    _img(root / "b.png")
    _img(root / "c.png")
    csv = tmp_path / "labels.csv"
    csv.write_text("File,Class\na.png,apple\nb.png,banana\ngone.png,ghost\n")
    samples = discover(root, labels_csv=csv)
    assert [(s.id, s.class_name, s.label) for s in samples] == [
        ("a.png", "apple", None),
        ("b.png", "banana", None),
    ]
    reasons = dict(samples.skipped)
    assert reasons["c.png"] == "not listed in labels.csv"
    assert reasons["gone.png"] == "listed in labels.csv but missing"


def test_a_benchmark_wide_csv_keeps_the_folders_rows_and_counts_the_rest(tmp_path):
    """An ImageNet-sized labels CSV for a few images (issue 36 item 9): the folder's rows
    are read wherever they lie (spread over many read chunks, odd spellings included), a
    row of an absent file is recorded by name for the first few and then counted in one
    entry, so the record stays small; a later row repeating a folder image's file is
    refused naming its line."""
    from robustlab.data import labels_csv

    root = tmp_path / "flat"
    for name in ("a.png", "sub/b.png", "c.png"):
        _img(root / name)
    n_rows = 5 * labels_csv.CHUNK + 7
    rows = [f"val/{i:08d}.JPEG,n{i % 1000:08d}" for i in range(n_rows)]
    rows[3] = "a.png,n01440764"
    rows[2 * labels_csv.CHUNK + 1] = "./sub\\b.png,n01443537"  # the walk spells it sub/b.png
    rows[-2] = "c.png"  # a short row: no class
    rows[-1] = "/etc/passwd,n0"
    csv_path = tmp_path / "big.csv"
    csv_path.write_text("file,wnid\n" + "\n".join(rows) + "\n")
    samples = discover(root, labels_csv=csv_path)
    assert [(s.id, s.class_name) for s in samples] == [
        ("a.png", "n01440764"),
        ("c.png", None),
        ("sub/b.png", "n01443537"),
    ]
    reasons = dict(samples.skipped)
    n_missing = n_rows - 4
    named = [k for k, why in samples.skipped if why == "listed in big.csv but missing"]
    assert f"big.csv: {n_missing - labels_csv.MAX_ROW_SKIPS:,} more rows" in named
    assert len(named) == labels_csv.MAX_ROW_SKIPS + 1 and "val/00000000.JPEG" in named
    assert reasons["/etc/passwd"].startswith("listed in big.csv but outside the data folder")
    assert len(samples.skipped) == labels_csv.MAX_ROW_SKIPS + 2
    repeated = 4 * labels_csv.CHUNK + 2
    rows[repeated] = "a.png,n01440764"
    csv_path.write_text("file,wnid\n" + "\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=rf"line {repeated + 2}: 'a.png' is listed twice"):
        discover(root, labels_csv=csv_path)


def test_flat_folder_without_csv_has_unknown_classes(tmp_path):
    _img(tmp_path / "x.png")
    (s,) = discover(tmp_path)
    assert s.id == "x.png" and s.class_name is None


@pytest.mark.parametrize(
    "content,match",
    [
        ("name,wnid\na.png,n1\n", "needs a 'file' column"),
        ("file,colour\na.png,red\n", "needs one of the columns"),
        ("file,index\na.png,seven\n", "is not an integer"),
        ("file,wnid\na.png,n1\na.png,n2\n", "listed twice"),
    ],
)
def test_bad_labels_csv(tmp_path, content, match):
    _img(tmp_path / "d" / "a.png")
    csv = tmp_path / "l.csv"
    csv.write_text(content)
    with pytest.raises(ValueError, match=match):
        discover(tmp_path / "d", labels_csv=csv)


def test_missing_or_empty_folders(tmp_path):
    with pytest.raises(MissingResourceError, match="does not exist"):
        discover(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images found"):
        discover(tmp_path / "empty")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("x")
    with pytest.raises(ValueError, match=r"no images found .*\(found 1 other files\)"):
        discover(tmp_path / "texts")
    (tmp_path / "f.png").write_bytes(b"")
    with pytest.raises(ValueError, match="not a folder"):
        discover(tmp_path / "f.png")


def test_masks_and_boxes(tmp_path):
    root = tmp_path / "data"
    _img(root / "cat" / "a.jpg")
    _img(root / "cat" / "b.jpg")
    _img(tmp_path / "masks" / "cat" / "a.png")
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("file,x0,y0,x1,y1\ncat/b.jpg,1,2,30.4,20\n")
    a, b = discover(root, masks=tmp_path / "masks", bboxes=boxes)
    assert a.mask_path == (tmp_path / "masks" / "cat" / "a.png").resolve() and a.bbox is None
    assert b.mask_path is None and b.bbox == (1, 2, 30, 20)
    with pytest.raises(MissingResourceError, match="masks folder"):
        discover(root, masks=tmp_path / "no-masks")
