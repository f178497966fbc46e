"""Composites with a known mask, for measuring automatic maskers on real pixels.

Real photos have no ground-truth masks here, so we make them: a smooth random blob is cut
from the centre of one photo (where ImageNet objects usually sit) and pasted onto another
photo. The blob's outline is the exact mask; both sides of it are real image content.
"""

from __future__ import annotations

import cv2
import numpy as np

from robustlab.seeding import make_rng


def random_blob(
    height: int,
    width: int,
    rng,
    *,
    area: tuple[float, float] = (0.15, 0.4),
    harmonics: int = 4,
    wobble: float = 0.18,
) -> np.ndarray:
    """A smooth star-shaped blob near the image centre covering ``area`` of the image."""
    rng = make_rng(rng)
    target = rng.uniform(*area) * height * width
    cy = height / 2 + rng.uniform(-0.12, 0.12) * height
    cx = width / 2 + rng.uniform(-0.12, 0.12) * width
    amps = rng.uniform(-wobble, wobble, harmonics)
    phases = rng.uniform(0, 2 * np.pi, harmonics)
    theta = np.linspace(0, 2 * np.pi, 360, endpoint=False)
    radius = 1 + sum(a * np.cos((k + 2) * theta + p) for k, (a, p) in enumerate(zip(amps, phases)))
    aspect = rng.uniform(0.7, 1.4)
    base = np.sqrt(target / (np.pi * np.mean(radius**2)))
    xs = cx + base * radius * np.cos(theta) * np.sqrt(aspect)
    ys = cy + base * radius * np.sin(theta) / np.sqrt(aspect)
    mask = np.zeros((height, width), np.uint8)
    cv2.fillPoly(mask, [np.round(np.stack([xs, ys], 1)).astype(np.int32)], 1)
    return mask > 0


def composite(
    foreground: np.ndarray, background: np.ndarray, rng, size: int = 224, **blob_kw
) -> tuple[np.ndarray, np.ndarray]:
    """Paste a blob of ``foreground`` onto ``background`` (both resized to size x size).

    Returns:
        (HxWx3 uint8 composite, HxW bool true mask).
    """
    fg = cv2.resize(
        np.ascontiguousarray(foreground[..., :3]), (size, size), interpolation=cv2.INTER_AREA
    )
    bg = cv2.resize(
        np.ascontiguousarray(background[..., :3]), (size, size), interpolation=cv2.INTER_AREA
    )
    mask = random_blob(size, size, rng, **blob_kw)
    out = bg.copy()
    out[mask] = fg[mask]
    return out, mask
