"""robustlab.pipeline: the reference preprocessing bit for bit, seeds, encoding, layout."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab.data.images import ImageError, load_image
from robustlab.data.sources import Sample
from robustlab.pipeline import (
    apply_shift,
    as_stored,
    cell_path,
    decode,
    encode,
    geometry,
    prepare,
    prepare_bbox,
    prepare_mask,
)
from robustlab.seeding import derive_seed, make_rng
from robustlab.shifts import get_shift, list_shifts
from robustlab.suites import IMAGENET_C_PROTOCOL, Protocol

P = IMAGENET_C_PROTOCOL
KEEP = Protocol(resize=None, crop=None)
RANDOM_CORRUPTION = next(s for s in list_shifts(tag="imagenet-c") if not s.deterministic).name


def test_prepare_matches_the_reference_bit_for_bit(samples_dir, reference):
    data, meta = reference
    assert meta["files"][-1] == "n03388043_fountain.JPEG"  # the grayscale one
    for i, name in enumerate(meta["files"]):
        rgb, _ = load_image(samples_dir / name)
        out = prepare(rgb, P)
        assert out.dtype == np.uint8 and out.shape == (224, 224, 3)
        np.testing.assert_array_equal(out, data["clean"][i], err_msg=name)


def test_grayscale_source_is_converted_before_resizing(samples_dir, reference):
    data, _ = reference
    with Image.open(samples_dir / "n03388043_fountain.JPEG") as im:
        assert im.mode == "L"
        gray = np.asarray(im)
    np.testing.assert_array_equal(prepare(gray, P), data["clean"][4])


def test_geometry_rounds_the_long_side_and_floors_the_crop_offset():
    # 500x357: 256 * 500 / 357 = 358.54 -> 359 (torchvision's int() would give 358); the
    # reference's terrier photo has exactly this size and needs 359 and offset 67.
    g = geometry(500, 357, P)
    assert g.size == (359, 256) and g.box == (67, 16, 291, 240) and g.output == (224, 224)
    assert geometry(400, 475, P).size == (256, 304)
    assert geometry(256, 256, P).size == (256, 256)
    assert geometry(20, 20, P).output == (224, 224)  # tiny sources are upscaled
    assert geometry(300, 40, KEEP).output == (300, 40)
    with pytest.raises(ImageError, match="too small"):
        geometry(20, 20, KEEP)
    with pytest.raises(ImageError, match="cannot be center-cropped"):
        geometry(200, 300, Protocol(resize=None, crop=224))


def test_keep_size_returns_the_source_and_tiny_upscales():
    x = np.random.default_rng(0).integers(0, 256, (50, 70, 3), dtype=np.uint8)
    np.testing.assert_array_equal(prepare(x, KEEP), x)
    assert prepare(x[:20, :20], P).shape == (224, 224, 3)
    assert prepare(np.dstack([x, x[..., :1]]), P).shape == (224, 224, 3)  # alpha dropped


def test_apply_shift_follows_the_seed_rule(photo):
    shift = get_shift(RANDOM_CORRUPTION)
    out = apply_shift(photo, "cls/a.JPEG", RANDOM_CORRUPTION, 3, seed=5)
    rng = make_rng(derive_seed(5, "cls/a.JPEG", RANDOM_CORRUPTION, 3))
    expected = np.clip(shift.fn(photo, shift.params[3], rng, {}), 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out, apply_shift(photo, "cls/a.JPEG", shift, 3, seed=5))
    assert not np.array_equal(out, apply_shift(photo, "cls/b.JPEG", shift, 3, seed=5))
    assert not np.array_equal(out, apply_shift(photo, "cls/a.JPEG", shift, 3, seed=6))
    with pytest.raises(ValueError, match="unknown shift"):
        apply_shift(photo, "x", "no_such_shift", 1, 0)
    with pytest.raises(ValueError, match="level 9"):
        apply_shift(photo, "x", RANDOM_CORRUPTION, 9, 0)


def test_encode_is_jpeg_q85_optimized_and_as_stored_is_the_round_trip(photo):
    buf = io.BytesIO()
    Image.fromarray(photo).save(buf, "JPEG", quality=85, optimize=True)
    data = encode(photo, P)
    assert data == buf.getvalue()
    stored = as_stored(photo, P)
    np.testing.assert_array_equal(stored, decode(data))
    assert not np.array_equal(stored, photo)  # JPEG is lossy

    png = Protocol(format="png")
    np.testing.assert_array_equal(decode(encode(photo, png)), photo)
    np.testing.assert_array_equal(as_stored(photo, png), photo)
    rgba = np.dstack([photo, np.full(photo.shape[:2], 7, np.uint8)])
    np.testing.assert_array_equal(decode(encode(rgba, png)), rgba)
    with pytest.raises(ValueError, match="alpha"):
        encode(rgba, P)
    with pytest.raises(ValueError, match="unknown output format"):
        encode(photo, Protocol(format="gif"))


def test_cell_path_layout():
    out = Path("/o")
    flat = Sample("n01440764_tench.JPEG", Path("/d/n01440764_tench.JPEG"), "n01440764", 0)
    tree = Sample("n01440764/x.JPEG", Path("/d/n01440764/x.JPEG"), "n01440764")
    deep = Sample("cat/sub/y.png", Path("/d/cat/sub/y.png"), "cat")
    none = Sample("z.png", Path("/d/z.png"), None)
    assert cell_path(out, flat, "fog", 3, P) == Path("/o/fog/3/n01440764/n01440764_tench.JPEG")
    assert cell_path(out, tree, "fog", 3, P) == Path("/o/fog/3/n01440764/x.JPEG")
    assert cell_path(out, deep, get_shift(RANDOM_CORRUPTION), 1, P) == Path(
        f"/o/{RANDOM_CORRUPTION}/1/cat/sub/y.jpg"
    )
    assert cell_path(out, none, "fog", 1, Protocol(format="png")) == Path("/o/fog/1/z.png")


def test_mask_and_box_follow_the_image_geometry():
    h, w = 300, 420
    mask = np.zeros((h, w), np.uint8)
    mask[100:200, 150:300] = 255
    m = prepare_mask(mask, P)
    assert m.shape == (224, 224) and set(np.unique(m)) == {0, 255}
    ys, xs = np.nonzero(m)
    box = prepare_bbox((150, 100, 300, 200), (w, h), P)
    assert abs(xs.min() - box[0]) <= 1 and abs(ys.min() - box[1]) <= 1
    assert abs(xs.max() + 1 - box[2]) <= 1 and abs(ys.max() + 1 - box[3]) <= 1
    assert prepare_bbox((0, 0, 10, 10), (w, h), P) is None  # cropped away


def _jpeg_cases(photo):
    """Images the JPEG round trip meets: photos and corruptions of them, flat and extreme
    ones, noise, and sizes that are not multiples of JPEG's 8x8 and 16x16 blocks."""
    rng = np.random.default_rng(0)
    yield photo
    yield apply_shift(photo, "a", "gaussian_noise", 5, 0)
    yield apply_shift(photo, "a", "zoom_blur", 2, 0)
    yield np.ascontiguousarray(photo[::-1, ::2])
    yield photo[3:40, 5:38]  # 37 x 33, a non-contiguous view
    yield rng.integers(0, 256, (33, 47, 3), dtype=np.uint8)
    yield np.zeros((32, 32, 3), np.uint8)
    yield np.full((17, 250, 3), 255, np.uint8)
    yield np.repeat(np.arange(256, dtype=np.uint8)[None, :, None], 9, axis=0).repeat(3, axis=2)


@pytest.mark.parametrize("quality", [85, 30, 100])
def test_as_stored_is_exactly_the_decoded_file(photo, quality):
    """as_stored skips Huffman optimisation and Image.open; the pixels must not change."""
    proto = Protocol(jpeg_quality=quality)
    for img in _jpeg_cases(photo):
        got = as_stored(img, proto)
        assert got.dtype == np.uint8 and got.flags.writeable and got.shape == img.shape
        np.testing.assert_array_equal(got, decode(encode(img, proto)))
