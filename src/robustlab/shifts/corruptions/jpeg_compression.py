"""jpeg_compression: JPEG round trip at a low quality (ImageNet-C, digital family).

Reference: PIL ``save(buf, 'JPEG', quality=q)`` with PIL's defaults (4:2:0 chroma
subsampling, no optimisation) and decode with PIL. Same calls here, so the bytes match as
long as Pillow bundles the same libjpeg(-turbo) behaviour.
"""

from __future__ import annotations

from io import BytesIO

import numpy as np
from PIL import Image

from robustlab.shifts.registry import register_shift


@register_shift(
    "jpeg_compression",
    family="digital",
    params={1: 25, 2: 18, 3: 15, 4: 10, 5: 7},
    tags=("imagenet-c",),
    deterministic=True,
)
def jpeg_compression(x, quality, rng, ctx):
    """JPEG artefacts: encode with PIL at ``quality`` and decode again."""
    buf = BytesIO()
    Image.fromarray(np.ascontiguousarray(x)).save(buf, "JPEG", quality=quality)
    buf.seek(0)
    with Image.open(buf) as im:  # an RGB JPEG decodes as RGB: no conversion needed
        return np.asarray(im)
