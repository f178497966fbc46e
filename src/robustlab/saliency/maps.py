"""A saliency map as stored and the object mask it is compared with, on the model's pixels.

Why here: the workflow stores each map as a small thumbnail and the report draws it over
the image again, so writing and reading the thumbnail are one pair; the object mask goes
through the model's own resize and crop (:func:`input_mask`) so that map and mask meet on
the pixels the model sees, in the run and in the report alike.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robustlab.store.schema import SALIENCY_MAP_SIDE


def input_mask(mask: np.ndarray, preprocessing) -> np.ndarray:
    """An HxW bool mask through the model's resize and crop (bilinear, then >= half):
    the mask of the pixels the model sees."""
    prep = dataclasses.replace(preprocessing, interpolation="bilinear")
    m = np.repeat(np.asarray(mask, bool)[..., None].astype(np.uint8) * 255, 3, axis=2)
    return prep.resize_crop(m)[..., 0] >= 128


def thumbnail(saliency_map: np.ndarray, side: int = SALIENCY_MAP_SIDE) -> bytes:
    """The map's positive part at ``side`` x ``side``, uint8 scaled to its maximum."""
    import cv2

    pos = np.clip(np.asarray(saliency_map, np.float32), 0, None)
    small = cv2.resize(pos, (side, side), interpolation=cv2.INTER_AREA)
    peak = float(small.max())
    scaled = small / peak * 255.0 if peak > 0 else small
    return np.round(scaled).astype(np.uint8).tobytes()


def read_thumbnail(data: bytes, side: int = SALIENCY_MAP_SIDE) -> np.ndarray:
    """A stored thumbnail (:func:`thumbnail`) back as a ``side`` x ``side`` uint8 array."""
    return np.frombuffer(bytes(data), np.uint8).reshape(side, side)


__all__ = ["input_mask", "thumbnail", "read_thumbnail"]
