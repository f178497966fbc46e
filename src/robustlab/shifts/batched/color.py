"""scikit-image's RGB -> HSV -> RGB round trip on a uint8 batch, in float64.

The exact path (:mod:`..corruptions._hsv`) runs the same double operations per pixel; here
they are whole-tensor operations with the same tie rules (the last channel among red,
green, blue equal to the maximum decides the hue sector), so the outputs agree except
where a different rounding of an intermediate flips a truncated value.
"""

from __future__ import annotations

import torch

from robustlab.shifts.batched._ops import div, to_uint8, unit


def hsv_adjust(
    x: torch.Tensor, s_scale: float = 1.0, s_shift: float = 0.0, v_shift: float = 0.0
) -> torch.Tensor:
    """``S = clip(S * s_scale + s_shift)``, ``V = clip(V + v_shift)`` in HSV; uint8 out."""
    v3 = unit(x, torch.float64)
    r, g, b = v3[:, 0], v3[:, 1], v3[:, 2]
    v = torch.maximum(torch.maximum(r, g), b)
    delta = v - torch.minimum(torch.minimum(r, g), b)
    grey = delta == 0
    safe = torch.where(grey, torch.ones_like(delta), delta)
    s = torch.where(grey, torch.zeros_like(delta), delta / torch.where(v == 0, 1.0, v))
    h = (g - b) / safe
    h = torch.where(g == v, 2.0 + (b - r) / safe, h)
    h = torch.where(b == v, 4.0 + (r - g) / safe, h)
    h = torch.remainder(div(h, 6.0), 1.0)
    h = torch.where(grey, torch.zeros_like(h), h)
    s = (s * s_scale + s_shift).clamp(0, 1)
    v = (v + v_shift).clamp(0, 1)
    hi = torch.floor(h * 6)
    f = h * 6 - hi
    p = v * (1 - s)
    q = v * (1 - f * s)
    t = v * (1 - (1 - f) * s)
    sector = torch.remainder(hi, 6).to(torch.int64)
    choices = torch.stack(
        [
            torch.stack([v, t, p]),
            torch.stack([q, v, p]),
            torch.stack([p, v, t]),
            torch.stack([p, q, v]),
            torch.stack([t, p, v]),
            torch.stack([v, p, q]),
        ]
    )  # (6, 3, N, H, W)
    idx = sector.unsqueeze(0).unsqueeze(0).expand(1, 3, *sector.shape)
    rgb = choices.gather(0, idx)[0]  # (3, N, H, W)
    return to_uint8(rgb.permute(1, 0, 2, 3))
