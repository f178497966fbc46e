"""Mask import (PNG modes, COCO RLE/polygons, bbox CSV) and quality metrics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from robustlab.masks import (
    bbox_to_mask,
    boundary_f,
    compare_mask_sets,
    decode_rle,
    encode_rle,
    iou,
    load_coco_masks,
    load_mask,
    mask_path_for,
    mask_record,
    polygons_to_mask,
    read_bboxes_csv,
    save_mask,
)
from robustlab.masks.io import counts_to_rle_string, rle_string_to_counts


@pytest.fixture
def truth():
    m = np.zeros((40, 60), bool)
    m[5:30, 10:45] = True
    m[12:20, 20:30] = False
    return m


def test_png_encodings_all_give_the_same_mask(tmp_path, truth):
    u8 = truth.astype(np.uint8)
    Image.fromarray(u8 * 255).save(tmp_path / "a.png")
    Image.fromarray(u8).save(tmp_path / "b.png")
    pal = Image.fromarray(u8 * 3, mode="L").convert("P")
    pal.putpalette([0, 0, 0] + [255, 0, 0] * 255)
    pal.save(tmp_path / "c.png")
    rgba = np.zeros((40, 60, 4), np.uint8)
    rgba[..., :3] = 200  # colour everywhere; only alpha says where the object is
    rgba[..., 3] = u8 * 255
    Image.fromarray(rgba, mode="RGBA").save(tmp_path / "d.png")
    Image.fromarray(truth).save(tmp_path / "e.png")  # mode "1"
    soft = np.where(truth, 230, 20).astype(np.uint8)  # anti-aliased / JPEG-touched 0/255
    Image.fromarray(soft).save(tmp_path / "f.png")
    for name in "abcdef":
        got = load_mask(tmp_path / f"{name}.png")
        np.testing.assert_array_equal(got, truth, err_msg=name)


def test_load_mask_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_mask(tmp_path / "nope.png")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="unreadable"):
        load_mask(tmp_path / "bad.png")


def test_save_and_find_parallel_mask(tmp_path, truth):
    save_mask(tmp_path / "n01/x.png", truth)
    assert mask_path_for(tmp_path, "n01/x.JPEG") == tmp_path / "n01/x.png"
    assert mask_path_for(tmp_path, "n01/y.JPEG") is None
    np.testing.assert_array_equal(load_mask(tmp_path / "n01/x.png"), truth)


def test_rle_string_hand_examples():
    assert rle_string_to_counts("342") == [3, 4, 2]
    assert rle_string_to_counts("1233") == [1, 2, 3, 5]  # 4th is stored as 5 - 2
    assert rle_string_to_counts("5:1I") == [5, 10, 1, 3]  # 'I' is -7: 3 - 10
    assert rle_string_to_counts("T3") == [100]  # 100 = 4 + 3 * 32, two groups
    for counts in ([3, 4, 2], [1, 2, 3, 5], [5, 10, 1, 3], [100], [0, 7, 123456, 1, 999, 2]):
        assert rle_string_to_counts(counts_to_rle_string(counts)) == counts


def test_rle_roundtrip_column_major(truth):
    rle = encode_rle(truth)
    assert rle["size"] == [40, 60]
    np.testing.assert_array_equal(decode_rle(rle), truth)
    compressed = {"size": rle["size"], "counts": counts_to_rle_string(rle["counts"])}
    np.testing.assert_array_equal(decode_rle(compressed), truth)
    # column-major: a mask whose first pixel is foreground starts with a zero run
    m = np.zeros((2, 3), bool)
    m[0, 0] = m[1, 0] = m[0, 1] = True
    assert encode_rle(m)["counts"] == [0, 3, 3]
    with pytest.raises(ValueError, match="expected 2x3"):
        decode_rle({"size": [2, 3], "counts": [1, 2]})


def test_polygon_and_coco_file(tmp_path, truth):
    sq = polygons_to_mask([[10, 10, 30, 10, 30, 20, 10, 20]], 40, 60)
    assert sq[10:21, 10:31].all() and sq.sum() == 21 * 11
    coco = {
        "images": [
            {"id": 1, "file_name": "a.jpg", "height": 40, "width": 60},
            {"id": 2, "file_name": "b.jpg", "height": 40, "width": 60},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 3, "segmentation": encode_rle(truth)},
            {
                "id": 2,
                "image_id": 1,
                "category_id": 4,
                "segmentation": [[50, 30, 58, 30, 58, 38, 50, 38]],
            },
        ],
    }
    (tmp_path / "c.json").write_text(json.dumps(coco))
    masks = load_coco_masks(tmp_path / "c.json")
    assert masks["a.jpg"].sum() == truth.sum() + 81 and not masks["b.jpg"].any()
    only3 = load_coco_masks(tmp_path / "c.json", category_ids=[3])
    np.testing.assert_array_equal(only3["a.jpg"], truth)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a COCO"):
        load_coco_masks(tmp_path / "bad.json")


def test_bbox_csv_formats(tmp_path):
    (tmp_path / "a.csv").write_text(
        "file,x0,y0,x1,y1\nx.jpg,1,2,30,40\nx.jpg,5,0,50,20\ny.jpg,0,0,9,9\n"
    )
    assert read_bboxes_csv(tmp_path / "a.csv") == {"x.jpg": (1, 0, 50, 40), "y.jpg": (0, 0, 9, 9)}
    (tmp_path / "b.csv").write_text("image,x,y,w,h\nx.jpg,1.5,2,10,10\n")
    assert read_bboxes_csv(tmp_path / "b.csv") == {"x.jpg": (1, 2, 12, 12)}
    (tmp_path / "c.csv").write_text("file,a,b\nx.jpg,1,2\n")
    with pytest.raises(ValueError, match="needs columns"):
        read_bboxes_csv(tmp_path / "c.csv")
    (tmp_path / "d.csv").write_text("file,x0,y0,x1,y1\nx.jpg,5,5,5,9\n")
    with pytest.raises(ValueError, match="empty box"):
        read_bboxes_csv(tmp_path / "d.csv")
    m = bbox_to_mask((1, 2, 4, 3), 5, 5)
    assert m.sum() == 3 and m[2, 1:4].all()


# ------------------------------------------------------------------ quality
def test_iou_known_values(truth):
    a = np.zeros((10, 10), bool)
    b = np.zeros((10, 10), bool)
    a[:, :6] = True
    b[:, 4:] = True
    assert iou(a, b) == pytest.approx(20 / 100)
    assert iou(truth, truth) == 1.0
    assert iou(np.zeros((3, 3)), np.zeros((3, 3))) == 1.0
    with pytest.raises(ValueError, match="differ in size"):
        iou(a, truth)


def _boundary_f_reference(a, b, tol):
    """Independent implementation: scipy morphology and exact Euclidean distances."""

    def edge(m):
        return m & ~ndimage.binary_erosion(m, structure=np.ones((3, 3)), border_value=0)

    ea, eb = edge(a), edge(b)
    da = ndimage.distance_transform_edt(~eb)
    db = ndimage.distance_transform_edt(~ea)
    p, r = (da[ea] <= tol).mean(), (db[eb] <= tol).mean()
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def test_boundary_f_against_reference(truth):
    rng = np.random.default_rng(0)
    assert boundary_f(truth, truth) == 1.0
    for k in range(6):
        a = ndimage.binary_opening(rng.random((50, 70)) > 0.4, iterations=2)
        b = np.roll(a, k, axis=1)
        for tol in (1.0, 2.0, 4.0):
            ref = _boundary_f_reference(a, b, tol)
            assert boundary_f(a, b, tol) == pytest.approx(ref, abs=0.03), (k, tol)
    box = np.zeros((40, 60), bool)
    box[5:30, 10:45] = True
    scores = [boundary_f(box, np.roll(box, (k, k), axis=(0, 1)), 1.0) for k in (1, 3, 8)]
    assert scores[0] > 0.9 and scores[1] < 0.2 and scores[2] < 0.1


def test_mask_record_flags(truth):
    rec = mask_record(truth)
    assert rec["area_fraction"] == pytest.approx(truth.mean(), abs=1e-6)
    assert rec["components"] == 1 and rec["flags"] == [] and not rec["suspicious"]
    assert mask_record(np.zeros((9, 9)))["flags"] == ["empty"]
    assert mask_record(np.ones((9, 9)))["flags"] == ["full"]
    tiny = np.zeros((100, 100), bool)
    tiny[50, 50] = True
    assert mask_record(tiny)["flags"] == ["tiny"] and mask_record(tiny)["suspicious"]
    frag = np.zeros((40, 40), bool)
    frag[::8, ::8] = True
    frag[10:30, 10:30] = True
    r = mask_record(frag)
    assert "fragmented" in r["flags"] and r["components"] > 5
    ring = np.ones((20, 20), bool)
    ring[5:15, 5:15] = False
    assert "border" in mask_record(ring)["flags"] and mask_record(ring)["border_sides"] == 4


def test_compare_mask_sets(tmp_path, truth):
    save_mask(tmp_path / "p/a.png", truth)
    save_mask(tmp_path / "t/a.png", truth)
    save_mask(tmp_path / "p/sub/b.png", truth)
    save_mask(tmp_path / "t/sub/b.png", np.roll(truth, 5, axis=1))
    save_mask(tmp_path / "p/c.png", truth)
    df = compare_mask_sets(tmp_path / "p", tmp_path / "t")
    assert list(df["id"]) == ["a.png", "c.png", "sub/b.png"]
    assert df.loc[0, "iou"] == 1.0 and df.loc[1, "error"] == "no reference mask"
    assert 0 < df.loc[2, "iou"] < 1
    assert df.attrs["mean"]["n"] == 2 and df.attrs["mean"]["errors"] == 1
