"""pixelate: box-downsample and box-upsample (ImageNet-C, digital family).

Reference: PIL ``resize((int(224 c), int(224 c)), BOX)`` then ``resize((224, 224), BOX)``.
Generalised to any size by scaling each side: ``(int(w c), int(h c))`` down, ``(w, h)``
back up; identical to the reference on 224x224 images. The resizes are Pillow's BOX
arithmetic in numba (:mod:`._box`, the same bytes), without an image object and the
conversions to and from Pillow's pixel layout: about twice as fast at 32 to 299 px.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.corruptions._box import box_resize
from robustlab.shifts.corruptions._scratch import scratch
from robustlab.shifts.registry import register_shift

# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [0.95, 0.9, 0.85, 0.75, 0.65]
_64PX = [0.9, 0.8, 0.7, 0.6, 0.5]
_299PX = [0.5, 0.4, 0.3, 0.25, 0.2]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "pixelate",
    monotone=True,
    family="digital",
    params={1: 0.6, 2: 0.5, 3: 0.4, 4: 0.3, 5: 0.25},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def pixelate(x, scale, rng, ctx):
    """Blocky image: PIL BOX resize to ``scale`` of each side and back."""
    h, w, ch = x.shape
    sw, sh = max(1, int(w * scale)), max(1, int(h * scale))
    small = box_resize(x, sw, sh, scratch("pixelate.small", (sh, sw, ch), np.uint8), "box.down")
    return box_resize(small, w, h, work="box.up")
