"""Center zoom used by zoom_blur and snow, following the reference's ``clipped_zoom``.

The reference crops the central ``ceil(side / z)`` square, zooms it with
``scipy.ndimage.zoom(order=1)`` and trims the excess. Here height and width are handled
separately so non-square images work; on square images the numbers are the reference's.
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import zoom as _scizoom


def clipped_zoom(img: np.ndarray, zoom_factor: float) -> np.ndarray:
    """Zoom ``img`` (HxWxC float) about its center by ``zoom_factor`` >= 1, same size out."""
    h, w = img.shape[:2]
    ch, cw = int(np.ceil(h / zoom_factor)), int(np.ceil(w / zoom_factor))
    top, left = (h - ch) // 2, (w - cw) // 2
    out = _scizoom(img[top:top + ch, left:left + cw], (zoom_factor, zoom_factor, 1), order=1)
    trim_top, trim_left = (out.shape[0] - h) // 2, (out.shape[1] - w) // 2
    return out[trim_top:trim_top + h, trim_left:trim_left + w]
