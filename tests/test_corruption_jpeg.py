"""jpeg_compression goes through OpenCV; the reference goes through PIL. Same bytes?

Both wheels bundle libjpeg-turbo; this checks, on real photos of odd sizes (not only the
five reference crops), that the OpenCV round trip equals PIL's ``save(..., quality=q)``
plus decode, which is exactly what the reference code does.
"""

from __future__ import annotations

from io import BytesIO

import numpy as np
import pytest
from PIL import Image

from robustlab.shifts.registry import get_shift


def _pil_round_trip(x: np.ndarray, quality: int) -> np.ndarray:
    buf = BytesIO()
    Image.fromarray(x).save(buf, "JPEG", quality=quality)
    buf.seek(0)
    return np.asarray(Image.open(buf).convert("RGB"))


@pytest.mark.parametrize("severity", range(1, 6))
def test_opencv_round_trip_equals_pil(samples_dir, severity):
    shift = get_shift("jpeg_compression")
    files = sorted(samples_dir.glob("*.JPEG"))[::50]  # 10 photos of assorted sizes
    assert files
    for f in files:
        x = np.asarray(Image.open(f).convert("RGB"))[:331, :257].copy()  # odd crop sizes
        ours = shift.apply(x, severity)
        assert ours.shape == x.shape and ours.dtype == np.uint8
        np.testing.assert_array_equal(
            ours, _pil_round_trip(x, shift.params[severity]), err_msg=f.name
        )
