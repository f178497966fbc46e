"""jpeg_compression: JPEG round trip at a low quality (ImageNet-C, digital family).

Reference: PIL ``save(buf, 'JPEG', quality=q)`` with PIL's defaults and a PIL decode.
PIL and OpenCV both drive libjpeg(-turbo) with the same settings here: the standard
quantisation tables scaled by ``quality``, 4:2:0 chroma subsampling, the standard
Huffman tables (no optimisation), the integer ("islow") DCT and fancy upsampling on
decode; the library does the RGB <-> YCbCr conversion in both. So the OpenCV round trip
gives the same bytes as PIL's, in about half the time (no PIL image objects or file-like
buffers). tests/test_corruption_jpeg.py checks that equality on real photos, so a future
wheel whose bundled codecs diverge is caught.
"""

from __future__ import annotations

import cv2
import numpy as np

from robustlab.shifts.registry import register_shift

# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [80, 65, 58, 50, 40]
_64PX = [65, 58, 50, 40, 25]
_299PX = [23, 16, 13, 8, 5]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "jpeg_compression",
    monotone=True,
    family="digital",
    params={1: 25, 2: 18, 3: 15, 4: 10, 5: 7},
    tags=("imagenet-c",),
    presets=PRESETS,
    deterministic=True,
)
def jpeg_compression(x, quality, rng, ctx):
    """JPEG artefacts: encode at ``quality`` (PIL's scale) and decode again."""
    bgr = cv2.cvtColor(np.ascontiguousarray(x, dtype=np.uint8), cv2.COLOR_RGB2BGR)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:  # not reachable for HxWx3 uint8, but never return garbage silently
        raise RuntimeError(f"JPEG encoding failed for an image of shape {x.shape}")
    return cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
