"""spatter: water drops or mud splashes (ImageNet-C extra/validation corruption).

Follows the reference step by step, with the same dtypes (the image is float32 on
[0, 1], the noise field float64) so that the output bytes match:

1. liquid layer: ``N(loc, scale)`` per pixel (the only random draw), Gaussian-smoothed
   (scikit-image ``gaussian``, reproduced exactly by ``_gauss``), values below
   ``threshold`` zeroed.
2. water (mode 0): the layer as uint8 -> Canny edges -> L2 distance to the nearest edge
   (5x5 mask), truncated at 20 -> 3x3 box blur -> histogram equalisation -> a 3x3 emboss
   kernel -> 3x3 box blur. ``layer * that``, normalised by its maximum and scaled by
   ``intensity``, tints the image pale turquoise (175, 238, 238 on R, G, B, in that order:
   the reference treats RGB as BGR only in name).
3. mud (mode 1): the pixels above ``threshold`` form a mask, smoothed with Gaussian
   ``intensity`` (float32, as the reference), values below 0.8 dropped; mud brown
   (63, 42, 20) replaces the image in proportion to the mask.

Deviation: when no water survives the threshold (possible on small images) the
reference divides 0 by 0 and casts NaN to uint8; here the image is returned untouched.
"""

from __future__ import annotations

import cv2
import numpy as np

from robustlab.shifts.corruptions._gauss import gaussian_nearest
from robustlab.shifts.registry import register_shift

_WATER = np.array([175 / 255.0, 238 / 255.0, 238 / 255.0], dtype=np.float32)
_MUD = np.array([63 / 255.0, 42 / 255.0, 20 / 255.0], dtype=np.float32)
# emboss-like kernel that gives the drops a lit rim (integer weights: any filter2D path
# computes the same exact sums)
_EMBOSS = np.array([[-2, -1, 0], [-1, 1, 1], [0, 1, 2]], dtype=np.float32)


def _water_shading(layer: np.ndarray) -> np.ndarray:
    """float32 HxW shading of the drops from the uint8 liquid layer (reference order)."""
    edges = 255 - cv2.Canny(layer, 50, 150)
    dist = cv2.distanceTransform(edges, cv2.DIST_L2, 5)
    _, dist = cv2.threshold(dist, 20, 20, cv2.THRESH_TRUNC)
    dist = cv2.blur(dist, (3, 3)).astype(np.uint8)
    dist = cv2.equalizeHist(dist)
    dist = cv2.filter2D(dist, cv2.CV_8U, _EMBOSS)
    return cv2.blur(dist, (3, 3)).astype(np.float32)


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [
    (0.62, 0.1, 0.7, 0.7, 0.5, 0),
    (0.65, 0.1, 0.8, 0.7, 0.5, 0),
    (0.65, 0.3, 1, 0.69, 0.5, 0),
    (0.65, 0.1, 0.7, 0.69, 0.6, 1),
    (0.65, 0.1, 0.5, 0.68, 0.6, 1),
]
_64PX = [
    (0.62, 0.1, 0.7, 0.7, 0.6, 0),
    (0.65, 0.1, 0.8, 0.7, 0.6, 0),
    (0.65, 0.3, 1, 0.69, 0.6, 0),
    (0.65, 0.1, 0.7, 0.68, 0.6, 1),
    (0.65, 0.1, 0.5, 0.67, 0.6, 1),
]
_299PX = [
    (0.65, 0.3, 4, 0.69, 0.9, 0),
    (0.65, 0.3, 3.5, 0.68, 0.9, 0),
    (0.65, 0.3, 3, 0.68, 0.8, 0),
    (0.65, 0.3, 1.2, 0.65, 1.8, 1),
    (0.67, 0.4, 1.2, 0.65, 1.8, 1),
]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "spatter",
    family="extra",
    # (loc, scale, sigma, threshold, intensity, mode): N(loc, scale) liquid field smoothed
    # by Gaussian sigma and cut at threshold; intensity = water strength (mode 0, water)
    # or the mud mask's Gaussian sigma (mode 1, mud)
    params={
        1: (0.65, 0.3, 4, 0.69, 0.6, 0),
        2: (0.65, 0.3, 3, 0.68, 0.6, 0),
        3: (0.65, 0.3, 2, 0.68, 0.5, 0),
        4: (0.65, 0.3, 1, 0.65, 1.5, 1),
        5: (0.67, 0.4, 1, 0.65, 1.5, 1),
    },
    tags=("imagenet-c-extra",),
    presets=PRESETS,
)
def spatter(x, params, rng, ctx):
    """Water drops (severities 1-3) or mud splashes (4-5) from a thresholded noise field."""
    loc, scale, sigma, threshold, intensity, mode = params
    image = np.asarray(x)
    x = image.astype(np.float32) / np.float32(255.0)
    liquid = rng.normal(size=x.shape[:2], loc=loc, scale=scale)
    liquid = gaussian_nearest(liquid, sigma)
    liquid[liquid < threshold] = 0
    if mode == 0:
        layer = (liquid * 255).astype(np.uint8)
        m = layer * _water_shading(layer)  # float32
        peak = m.max()
        if peak == 0:  # no drops at all: nothing to tint
            return image
        m /= peak
        m *= np.float32(intensity)
        return np.clip(x + m[..., None] * _WATER, 0, 1) * np.float32(255)
    m = gaussian_nearest((liquid > threshold).astype(np.float32), intensity)
    m[m < 0.8] = 0
    m = m[..., None]
    return np.clip(x * (1 - m) + _MUD * m, 0, 1) * np.float32(255)
