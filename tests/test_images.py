"""robustlab.data.images: every odd input becomes 8-bit RGB the same way, or a clear reason."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from robustlab.data.images import (
    ImageError,
    array_to_rgb,
    check_size,
    load_image,
    pil_to_rgb,
    read_image,
)


def _gradient(w=48, h=40):
    y, x = np.mgrid[0:h, 0:w]
    return np.dstack([x * 5 % 256, y * 6 % 256, (x + y) * 3 % 256]).astype(np.uint8)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims width x height but which holds no pixel data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_grayscale_becomes_three_equal_channels():
    g = _gradient()[..., 0]
    rgb, alpha = pil_to_rgb(Image.fromarray(g, "L"))
    assert rgb.shape == (40, 48, 3) and alpha is None
    for c in range(3):
        np.testing.assert_array_equal(rgb[..., c], g)


def test_rgba_and_palette_transparency_give_alpha():
    x = _gradient()
    a = np.full(x.shape[:2], 255, np.uint8)
    a[:10] = 0
    rgb, alpha = pil_to_rgb(Image.fromarray(np.dstack([x, a]), "RGBA"))
    np.testing.assert_array_equal(rgb, x)
    np.testing.assert_array_equal(alpha, a)

    pal = Image.fromarray(x).quantize(16)
    pal.info["transparency"] = 0
    rgb, alpha = pil_to_rgb(pal)
    assert alpha is not None and set(np.unique(alpha)) <= {0, 255} and (alpha == 0).any()
    np.testing.assert_array_equal(rgb, np.asarray(pal.convert("RGB")))


def test_opaque_palette_matches_pillow_rgb():
    pal = Image.fromarray(_gradient()).quantize(32)
    rgb, alpha = pil_to_rgb(pal)
    assert alpha is None
    np.testing.assert_array_equal(rgb, np.asarray(pal.convert("RGB")))


def test_cmyk_jpeg_decodes_to_the_original_colours(tmp_path):
    x = np.zeros((64, 64, 3), np.uint8)
    x[:, :32] = (200, 40, 30)
    x[:, 32:] = (20, 180, 220)
    Image.fromarray(x).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    d = read_image(tmp_path / "cmyk.jpg")
    assert d.mode == "CMYK" and d.converted
    # JPEG is lossy; the colours must still be the right ones (no inversion, no swap).
    assert np.abs(d.rgb[8:56, 4:28].astype(int) - (200, 40, 30)).max() < 12
    assert np.abs(d.rgb[8:56, 36:60].astype(int) - (20, 180, 220)).max() < 12


def test_sixteen_bit_gray_keeps_the_high_byte(tmp_path):
    g16 = (np.arange(40 * 48, dtype=np.uint32).reshape(40, 48) * 31 % 65536).astype(np.uint16)
    Image.fromarray(g16).save(tmp_path / "g16.png")
    d = read_image(tmp_path / "g16.png")
    assert d.mode.startswith("I")
    np.testing.assert_array_equal(d.rgb[..., 0], (g16 >> 8).astype(np.uint8))


def test_32_bit_integer_and_float_modes():
    small = np.arange(0, 256, dtype=np.int32).reshape(16, 16)
    rgb, _ = pil_to_rgb(Image.fromarray(small, "I"))
    np.testing.assert_array_equal(rgb[..., 1], small.astype(np.uint8))
    wide = np.arange(256, dtype=np.int32).reshape(16, 16) * 256
    rgb, _ = pil_to_rgb(Image.fromarray(wide, "I"))
    np.testing.assert_array_equal(rgb[..., 2], (wide >> 8).astype(np.uint8))
    f = np.linspace(-1, 3, 256, dtype=np.float32).reshape(16, 16)
    rgb, _ = pil_to_rgb(Image.fromarray(f, "F"))
    assert rgb[0, 0, 0] == 0 and rgb[-1, -1, 0] == 255


def test_exif_orientation_is_applied(tmp_path):
    x = _gradient(60, 30)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise for display
    Image.fromarray(x).save(tmp_path / "rot.jpg", exif=exif, quality=95)
    assert read_image(tmp_path / "rot.jpg").rgb.shape == (60, 30, 3)
    assert read_image(tmp_path / "rot.jpg", exif_transpose=False).rgb.shape == (30, 60, 3)


@pytest.mark.parametrize(
    "make,reason",
    [
        (lambda p: p.write_bytes(b"this is not a picture\n" * 20), "not an image"),
        (lambda p: p.write_bytes(png_header_only(200_000, 200_000)), "too large"),
        (lambda p: None, "file not found"),
    ],
    ids=["text", "bomb", "missing"],
)
def test_bad_files_raise_image_error_with_reason(tmp_path, make, reason):
    p = tmp_path / "bad.jpg"
    make(p)
    with pytest.raises(ImageError) as err:
        load_image(p)
    assert err.value.reason.startswith(reason), err.value.reason


def test_truncated_jpeg_is_unreadable(samples_dir, tmp_path):
    data = (samples_dir / "n01440764_tench.JPEG").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError) as err:
        read_image(tmp_path / "cut.jpg")
    assert err.value.reason.startswith("unreadable"), err.value.reason


def test_max_pixels_is_checked_before_decoding(tmp_path):
    Image.fromarray(_gradient(100, 100)).save(tmp_path / "ok.png")
    assert read_image(tmp_path / "ok.png", max_pixels=10_000).rgb.shape == (100, 100, 3)
    with pytest.raises(ImageError, match="too large"):
        read_image(tmp_path / "ok.png", max_pixels=9_999)


def test_array_validation():
    with pytest.raises(ValueError, match="uint8"):
        array_to_rgb(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="HxW"):
        array_to_rgb(np.zeros((8, 8, 2), np.uint8))
    with pytest.raises(ValueError, match="numpy array or a PIL image"):
        array_to_rgb([[1, 2], [3, 4]])
    rgb, alpha = array_to_rgb(np.zeros((8, 8, 4), np.uint8))
    assert rgb.shape == (8, 8, 3) and alpha.shape == (8, 8)
    with pytest.raises(ValueError, match="at least 32x32"):
        check_size(np.zeros((31, 64, 3), np.uint8))
