"""pixelate: box-downsample and box-upsample (ImageNet-C, digital family).

Reference: PIL ``resize((int(224 c), int(224 c)), BOX)`` then ``resize((224, 224), BOX)``.
Generalised to any size by scaling each side: ``(int(w c), int(h c))`` down, ``(w, h)``
back up; identical to the reference on 224x224 images.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from robustlab.shifts.registry import register_shift


@register_shift(
    "pixelate",
    family="digital",
    params={1: 0.6, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.25},
    tags=("imagenet-c",),
    deterministic=True,
)
def pixelate(x, scale, rng, ctx):
    """Blocky image: PIL BOX resize to ``scale`` of each side and back."""
    h, w = x.shape[:2]
    small = Image.fromarray(np.ascontiguousarray(x)).resize(
        (max(1, int(w * scale)), max(1, int(h * scale))), Image.BOX
    )
    return np.asarray(small.resize((w, h), Image.BOX))
