"""HSV saturation/value adjustment, bit-exact with the reference's scikit-image round trip.

The reference (brightness, saturate) does ``rgb2hsv(x / 255.)``, changes one channel,
``hsv2rgb`` and ``np.clip(.., 0, 1) * 255`` before the caller's uint8 truncation. That
allocates a dozen full-size float64 temporaries. Here the same IEEE double operations run
per pixel in one numba loop, in the same order and with the same tie rules (the last
matching channel among red, green, blue decides the hue sector; hue ``(h / 6) % 1``
Python-style; ``floor(6 h)`` cast to uint8 then ``% 6``), so each pixel's result is the
reference's to the last bit. tests/test_corruption_hsv.py checks every 24-bit colour.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_LEVELS = np.arange(256, dtype=np.float64) / 255.0


@njit(cache=True, nogil=True)
def _hsv_adjust(img, levels, s_scale, s_shift, v_shift, out):
    """``out = uint8(clip(hsv2rgb(adj(rgb2hsv(img / 255))), 0, 1) * 255)``.

    ``adj`` sets ``S = clip(S * s_scale + s_shift, 0, 1)`` and ``V = clip(V + v_shift, 0, 1)``;
    with (1, 0, 0) both are exact identities, so one kernel serves brightness and saturate.
    ``levels[v]`` is ``v / 255.``, looked up rather than divided (same doubles, faster).
    """
    height, width = img.shape[0], img.shape[1]
    for i in range(height):
        for j in range(width):
            r = levels[img[i, j, 0]]
            g = levels[img[i, j, 1]]
            b = levels[img[i, j, 2]]
            v = max(r, max(g, b))
            delta = v - min(r, min(g, b))
            if delta == 0.0:  # grey (and black): the reference zeroes hue and saturation
                h = 0.0
                s = 0.0
            else:
                s = delta / v
                # numpy assigns red, then green, then blue: the last match wins on ties
                if b == v:
                    h = 4.0 + (r - g) / delta
                elif g == v:
                    h = 2.0 + (b - r) / delta
                else:
                    h = (g - b) / delta
                # (h / 6) % 1 as np.remainder does it; h / 6 lies in [-1/6, 5/6], where
                # fmod(x, 1) is x itself, so only the sign fix-up remains
                h = h / 6.0
                if h < 0.0:
                    h += 1.0
                elif h == 0.0:
                    h = 0.0  # -0.0 -> +0.0, like copysign(0, 1) in numpy's divmod
            s = min(max(s * s_scale + s_shift, 0.0), 1.0)
            v = min(max(v + v_shift, 0.0), 1.0)
            # hsv2rgb
            hi = math.floor(h * 6)
            f = h * 6 - hi
            p = v * (1 - s)
            q = v * (1 - f * s)
            t = v * (1 - (1 - f) * s)
            sector = np.uint8(hi) % 6
            if sector == 0:
                rr, gg, bb = v, t, p
            elif sector == 1:
                rr, gg, bb = q, v, p
            elif sector == 2:
                rr, gg, bb = p, v, t
            elif sector == 3:
                rr, gg, bb = p, q, v
            elif sector == 4:
                rr, gg, bb = t, p, v
            else:
                rr, gg, bb = v, p, q
            out[i, j, 0] = np.uint8(min(max(rr, 0.0), 1.0) * 255)
            out[i, j, 1] = np.uint8(min(max(gg, 0.0), 1.0) * 255)
            out[i, j, 2] = np.uint8(min(max(bb, 0.0), 1.0) * 255)
    return out


def hsv_adjust(
    img: np.ndarray, s_scale: float = 1.0, s_shift: float = 0.0, v_shift: float = 0.0
) -> np.ndarray:
    """Scale/shift saturation and shift value of an HxWx3 uint8 RGB image; uint8 out."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    out = np.empty_like(img)
    return _hsv_adjust(img, _LEVELS, float(s_scale), float(s_shift), float(v_shift), out)
