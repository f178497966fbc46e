"""Turning whatever a user hands us into the uint8 RGB arrays the shifts work on.

One place decides how grayscale, palette, CMYK, 16-bit and RGBA input become 8-bit RGB
(plus an optional alpha plane), so every entry point treats odd images the same way.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

MIN_SIDE = 32
# Decompression-bomb guard: refuse images above this many pixels (about 16k x 11k).
MAX_PIXELS = 178_956_970


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
        else:
            arr8 = (arr.astype(np.uint32) >> 8).clip(0, 255).astype(np.uint8)
            if mode == "I" and arr.max(initial=0) <= 255:
                arr8 = arr.astype(np.uint8)
        return np.repeat(arr8[..., None], 3, axis=2), None
    alpha = None
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA")
        arr = np.asarray(img)
        return np.ascontiguousarray(arr[..., :3]), np.ascontiguousarray(arr[..., 3])
    if mode == "CMYK":
        img = ImageOps.invert(img.convert("RGB")) if img.info.get("adobe_inverted") else img
        img = img.convert("RGB")
    elif mode != "RGB":
        img = img.convert("RGB")
    return np.asarray(img).copy(), alpha


def array_to_rgb(image) -> tuple[np.ndarray, np.ndarray | None]:
    """Validate and convert an array or PIL image to (HxWx3 uint8, alpha or None).

    Accepts uint8 arrays shaped HxW, HxWx1, HxWx3 or HxWx4, and PIL images of any mode.
    Raises ValueError with what was expected for anything else.
    """
    if isinstance(image, Image.Image):
        return pil_to_rgb(image)
    if not isinstance(image, np.ndarray):
        raise ValueError(
            f"image must be a numpy array or a PIL image, not {type(image).__name__}"
        )
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
    raise ValueError(
        f"image must be HxW, HxWx1, HxWx3 or HxWx4, got shape {tuple(image.shape)}"
    )


def check_size(rgb: np.ndarray, min_side: int = MIN_SIDE) -> None:
    """Raise ValueError when either side is below ``min_side`` pixels."""
    h, w = rgb.shape[:2]
    if h < min_side or w < min_side:
        raise ValueError(f"image is {w}x{h}; robustlab needs at least {min_side}x{min_side} pixels")


def load_image(path: str | Path, max_pixels: int = MAX_PIXELS) -> tuple[np.ndarray, np.ndarray | None]:
    """Decode ``path`` to (HxWx3 uint8 RGB, alpha or None), applying EXIF orientation.

    Raises:
        ImageError: unreadable, truncated, not an image, or larger than ``max_pixels``.
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            w, h = img.size
            if w * h > max_pixels:
                raise ImageError(f"too large: {w}x{h} pixels exceeds the limit of {max_pixels}")
            with warnings.catch_warnings():
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                img.load()
            img = ImageOps.exif_transpose(img) or img
            return pil_to_rgb(img)
    except ImageError:
        raise
    except FileNotFoundError:
        raise ImageError("file not found") from None
    except Image.DecompressionBombError as exc:
        raise ImageError(f"too large: {exc}") from None
    except Image.UnidentifiedImageError:
        raise ImageError("not an image (unrecognised format)") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombWarning) as exc:
        raise ImageError(f"unreadable: {exc}") from None
