"""Turning whatever a user hands us into the uint8 RGB arrays the shifts work on.

One place decides how grayscale, palette, CMYK, 16-bit and RGBA input become 8-bit RGB
(plus an optional alpha plane), so every entry point treats odd images the same way.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image, ImageOps

MIN_SIDE = 32
# Decompression-bomb guard: refuse images above this many pixels (about 16k x 11k).
MAX_PIXELS = 178_956_970
# Longest side over shortest side accepted. Every protocol resizes the shorter side to
# about 224-256 px, so a 30000x2 strip would become 256x3,840,000 (a 3 GB array): masks
# died in the OOM killer and evaluate spent most of its run on it. A real photo, even a
# panorama, stays far below this.
MAX_ASPECT = 64


class ImageError(ValueError):
    """An input image that cannot be used; ``reason`` is a short, loggable explanation."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def pil_to_rgb(img: Image.Image) -> tuple[np.ndarray, np.ndarray | None]:
    """Convert a PIL image of any mode to (HxWx3 uint8 RGB, HxW uint8 alpha or None)."""
    mode = img.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # 16/32-bit grayscale: rescale the full dynamic range of the type to 0..255.
        arr = np.asarray(img)
        if mode == "F":
            lo, hi = float(np.nanmin(arr)), float(np.nanmax(arr))
            scale = 255.0 / (hi - lo) if hi > lo else 0.0
            arr8 = np.clip((arr - lo) * scale, 0, 255).astype(np.uint8)
        elif mode == "I":
            # 32-bit integer images carry no bit depth: judge it from the value range.
            lo, hi = int(arr.min(initial=0)), int(arr.max(initial=0))
            if lo >= 0 and hi <= 255:
                arr8 = arr.astype(np.uint8)
            elif lo >= 0 and hi <= 65535:
                arr8 = (arr.astype(np.uint32) >> 8).astype(np.uint8)
            else:
                scale = 255.0 / (hi - lo)
                arr8 = np.clip((arr.astype(np.float64) - lo) * scale, 0, 255).astype(np.uint8)
        else:
            arr8 = (arr.astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
        return np.repeat(arr8[..., None], 3, axis=2), None
    alpha = None
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA")
        arr = np.asarray(img)
        return np.ascontiguousarray(arr[..., :3]), np.ascontiguousarray(arr[..., 3])
    if mode != "RGB":
        # CMYK: Pillow's JPEG decoder already undoes Adobe's inverted CMYK, so a plain
        # conversion is right. 1, L, P (opaque), YCbCr, RGBX ... convert the same way.
        try:
            img = img.convert("RGB")
        except ValueError as exc:  # e.g. LAB or HSV, which Pillow cannot turn into RGB
            raise ImageError(f"unsupported image mode {mode}: {exc}") from None
    return np.asarray(img).copy(), alpha


def array_to_rgb(image) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate and convert an array or PIL image to (HxWx3 uint8, alpha or None).

    Accepts uint8 arrays shaped HxW, HxWx1, HxWx3 or HxWx4, and PIL images of any mode.
    Raises ValueError with what was expected for anything else.
    """
    if isinstance(image, Image.Image):
        return pil_to_rgb(image)
    if not isinstance(image, np.ndarray):
        raise ValueError(f"image must be a numpy array or a PIL image, not {type(image).__name__}")
    if image.dtype != np.uint8:
        raise ValueError(
            f"image array must be uint8 (0..255), got {image.dtype}; "
            "convert it first, e.g. (x * 255).round().astype(np.uint8) for floats in [0, 1]"
        )
    if image.ndim == 2:
        return np.repeat(image[..., None], 3, axis=2), None
    if image.ndim == 3 and image.shape[2] == 1:
        return np.repeat(image, 3, axis=2), None
    if image.ndim == 3 and image.shape[2] == 3:
        return np.ascontiguousarray(image), None
    if image.ndim == 3 and image.shape[2] == 4:
        return np.ascontiguousarray(image[..., :3]), np.ascontiguousarray(image[..., 3])
    raise ValueError(f"image must be HxW, HxWx1, HxWx3 or HxWx4, got shape {tuple(image.shape)}")


def check_size(rgb: np.ndarray, min_side: int = MIN_SIDE) -> None:
    """Raise ValueError when either side is below ``min_side`` pixels."""
    h, w = rgb.shape[:2]
    if h < min_side or w < min_side:
        raise ValueError(f"image is {w}x{h}; robustlab needs at least {min_side}x{min_side} pixels")


@dataclass(frozen=True)
class DecodedImage:
    """A decoded file plus what it was, so callers can record conversions.

    Attributes:
        rgb: HxWx3 uint8 RGB.
        alpha: HxW uint8 alpha plane, or None when the file had no transparency.
        mode: The Pillow mode of the file (``"RGB"``, ``"L"``, ``"CMYK"``, ``"I;16"``, ...).
        format: The Pillow format name (``"JPEG"``, ``"PNG"``, ...).
        size: (width, height) as stored in the file, before EXIF orientation.
    """

    rgb: np.ndarray
    alpha: np.ndarray | None
    mode: str
    format: str | None
    size: tuple[int, int]

    @property
    def converted(self) -> bool:
        """True when the file was not plain 8-bit RGB (a conversion took place)."""
        return self.mode != "RGB" or self.alpha is not None


def check_header(img: Image.Image, max_pixels: int = MAX_PIXELS) -> None:
    """Refuse an opened, not yet decoded image by its header's size: every reader (the
    decoders here, the review app's server) applies the same limits before any pixel.

    Raises:
        ImageError: over ``max_pixels`` (a decompression bomb), a side under 1 px, or an
            aspect ratio over :data:`MAX_ASPECT`.
    """
    w, h = img.size
    if w * h > max_pixels:
        raise ImageError(f"too large: {w}x{h} pixels exceeds the limit of {max_pixels}")
    if w < 1 or h < 1:
        raise ImageError(f"empty image: {w}x{h}")
    if max(w, h) > MAX_ASPECT * min(w, h):
        raise ImageError(
            f"extreme aspect ratio: {w}x{h} pixels (longer side over {MAX_ASPECT}x "
            "the shorter; resizing its shorter side would blow it up)"
        )


def read_image(
    path: str | Path | BinaryIO, max_pixels: int = MAX_PIXELS, *, exif_transpose: bool = True
) -> DecodedImage:
    """Decode ``path`` once and report what it was (see :class:`DecodedImage`).

    The pixel-count check happens on the header, before any pixel is decoded, so a file
    that claims an enormous size (a decompression bomb) costs nothing.

    Args:
        path: Image file, or an open binary stream of one (a cell file's bytes).
        max_pixels: Largest width x height accepted.
        exif_transpose: Apply the EXIF orientation tag (a phone photo stored sideways is
            turned upright). A broken EXIF block is ignored rather than fatal.

    Raises:
        ImageError: unreadable, truncated, not an image, an unsupported mode, or larger
            than ``max_pixels``; ``reason`` says which.
    """
    source = path if hasattr(path, "read") else Path(path)
    try:
        with Image.open(source) as img:
            check_header(img, max_pixels)
            w, h = img.size
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                img.load()
            mode, fmt = img.mode, img.format
            if exif_transpose:
                try:
                    img = ImageOps.exif_transpose(img) or img
                except Exception:  # noqa: BLE001 - bad EXIF must not lose a good image
                    pass
            rgb, alpha = pil_to_rgb(img)
            return DecodedImage(rgb, alpha, mode, fmt, (w, h))
    except ImageError:
        raise
    except FileNotFoundError:
        raise ImageError("file not found") from None
    except IsADirectoryError:
        raise ImageError("is a directory") from None
    except Image.DecompressionBombError as exc:
        raise ImageError(f"too large: {exc}") from None
    except Image.UnidentifiedImageError:
        raise ImageError("not an image (unrecognised format)") from None
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"unreadable: {exc}") from None


def load_image(
    path: str | Path, max_pixels: int = MAX_PIXELS
) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode ``path`` to (HxWx3 uint8 RGB, alpha or None), applying EXIF orientation.

    Raises:
        ImageError: unreadable, truncated, not an image, or larger than ``max_pixels``.
    """
    d = read_image(path, max_pixels)
    return d.rgb, d.alpha
