"""XIMAGENET-12 foreground/background scenarios (REFERENCE.md section 2).

Each scenario changes either the background or the object and leaves the other part
bit-identical, so an accuracy change can be blamed on one of them. Foreground is
``ctx["mask"] > 0``. All scenarios have one level, ``"default"``, except ``random_bg``
(``"add"``: the paper's additive blend; ``"paste"``: a clean alpha paste). The diffusion
scenario ``ai_bg`` is not implemented here.
"""

from __future__ import annotations

import cv2
import numpy as np

from robustlab.seeding import randint
from robustlab.shifts.registry import register_shift
from robustlab.shifts.scenes._common import check_image, check_mask, fit_donor, mask_bbox

TAGS = ("ximagenet12",)
FAMILY = "background"
MASK = ("mask",)


def _prep(image, ctx):
    x = check_image(image)
    return x, check_mask(ctx.get("mask"), x.shape)


def _where(mask: np.ndarray, inside: np.ndarray, outside: np.ndarray) -> np.ndarray:
    return np.where(mask[..., None], inside, outside).astype(np.uint8)


def _blur(x: np.ndarray, p: dict) -> np.ndarray:
    k = int(p["ksize"])
    return cv2.GaussianBlur(x, (k, k), float(p["sigma"]))


BLUR = {"default": {"ksize": 15, "sigma": 3.0}}


@register_shift("blur_bg", family=FAMILY, params=BLUR, needs=MASK, deterministic=True, tags=TAGS)
def blur_bg(image, p, rng, ctx):
    """Gaussian blur (15x15, sigma 3) of the background; object pixels unchanged."""
    x, m = _prep(image, ctx)
    return _where(m, x, _blur(x, p))


@register_shift("blur_obj", family=FAMILY, params=BLUR, needs=MASK, deterministic=True, tags=TAGS)
def blur_obj(image, p, rng, ctx):
    """Gaussian blur (15x15, sigma 3) of the object; background pixels unchanged."""
    x, m = _prep(image, ctx)
    return _where(m, _blur(x, p), x)


@register_shift(
    "color_grey", family=FAMILY, params={"default": {}}, needs=MASK, deterministic=True, tags=TAGS
)
def color_grey(image, p, rng, ctx):
    """Background converted to grayscale (OpenCV luma); object pixels unchanged."""
    x, m = _prep(image, ctx)
    g = cv2.cvtColor(x, cv2.COLOR_RGB2GRAY)
    return _where(m, x, np.repeat(g[..., None], 3, axis=2))


def _draw_hue(ranges, rng) -> int:
    """One integer hue drawn uniformly from the union of inclusive ``ranges``."""
    sizes = [hi - lo + 1 for lo, hi in ranges]
    k = int(randint(rng, 0, sum(sizes)))
    for (lo, _), n in zip(ranges, sizes):
        if k < n:
            return lo + k
        k -= n
    raise AssertionError("unreachable")


def _set_bg_hue(x: np.ndarray, m: np.ndarray, hue_fn) -> np.ndarray:
    hsv = cv2.cvtColor(x, cv2.COLOR_RGB2HSV)
    h = hsv[..., 0].astype(np.int32)
    hsv[..., 0] = np.where(m, h, hue_fn(h)).astype(np.uint8)
    return _where(m, x, cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB))


# OpenCV hue units (0..180). Red wraps around 0, so it is two ranges.
HUE_RANGES = {
    "color_r": {"default": {"hue_ranges": ((0, 29), (150, 180))}},
    "color_g": {"default": {"hue_ranges": ((30, 89),)}},
    "color_b": {"default": {"hue_ranges": ((90, 149),)}},
}


def _make_color(name: str, colour: str):
    def color(image, p, rng, ctx):
        x, m = _prep(image, ctx)
        hue = _draw_hue(p["hue_ranges"], rng)
        return _set_bg_hue(x, m, lambda h: np.full_like(h, hue))

    color.__doc__ = (
        f"Background hue set to one random {colour} hue (OpenCV units "
        f"{HUE_RANGES[name]['default']['hue_ranges']}); object unchanged."
    )
    color.__name__ = color.__qualname__ = name
    return register_shift(name, family=FAMILY, params=HUE_RANGES[name], needs=MASK, tags=TAGS)(
        color
    )


color_r = _make_color("color_r", "red")
color_g = _make_color("color_g", "green")
color_b = _make_color("color_b", "blue")


@register_shift(
    "rainbow",
    family=FAMILY,
    params={"default": {"shift": (0, 90), "period": 180}},
    needs=MASK,
    tags=TAGS,
)
def rainbow(image, p, rng, ctx):
    """Background hue rotated by one random amount (0..90, mod 180); object unchanged."""
    x, m = _prep(image, ctx)
    lo, hi = p["shift"]
    s = int(randint(rng, lo, hi + 1))
    return _set_bg_hue(x, m, lambda h: (h + s) % int(p["period"]))


BRIGHT = {"default": {"alpha": 1.5, "beta": 0.9, "gamma": 1.9, "ksize": 9, "sigma": 0.0}}


def _bright(x: np.ndarray, p: dict) -> np.ndarray:
    k = int(p["ksize"])
    blurred = cv2.GaussianBlur(x, (k, k), float(p["sigma"]))
    return cv2.addWeighted(x, float(p["alpha"]), blurred, float(p["beta"]), float(p["gamma"]))


@register_shift(
    "bright_bg", family=FAMILY, params=BRIGHT, needs=MASK, deterministic=True, tags=TAGS
)
def bright_bg(image, p, rng, ctx):
    """Background brightened: addWeighted(x, 1.5, GaussianBlur(x, 9x9), 0.9, 1.9)."""
    x, m = _prep(image, ctx)
    return _where(m, x, _bright(x, p))


@register_shift(
    "bright_obj", family=FAMILY, params=BRIGHT, needs=MASK, deterministic=True, tags=TAGS
)
def bright_obj(image, p, rng, ctx):
    """Object brightened: addWeighted(x, 1.5, GaussianBlur(x, 9x9), 0.9, 1.9)."""
    x, m = _prep(image, ctx)
    return _where(m, _bright(x, p), x)


@register_shift(
    "segmented",
    family=FAMILY,
    params={"default": {"fill": (0, 0, 0)}},
    needs=MASK,
    deterministic=True,
    tags=TAGS,
)
def segmented(image, p, rng, ctx):
    """Background set to black; object pixels unchanged."""
    x, m = _prep(image, ctx)
    return _where(m, x, np.asarray(p["fill"], np.uint8))


@register_shift(
    "transparent",
    family=FAMILY,
    params={"default": {"matte": (255, 255, 255)}},
    needs=MASK,
    deterministic=True,
    tags=TAGS,
    channels=4,
)
def transparent(image, p, rng, ctx):
    """RGBA: alpha 255 on the object, 0 on the background (colour there: a white matte).

    The colour channels already hold the object composited on the matte, so a reader that
    drops alpha (PIL ``convert("RGB")``, ``array_to_rgb``) or a model that needs RGB sees the
    documented white-matte image; :func:`robustlab.shifts.scenes.matte` gives the same.
    """
    x, m = _prep(image, ctx)
    rgb = _where(m, x, np.asarray(p["matte"], np.uint8))
    return np.dstack([rgb, np.where(m, 255, 0).astype(np.uint8)])


def place_object(x: np.ndarray, m: np.ndarray, rng):
    """Move the object (its mask's bounding box) to a random position that keeps it inside.

    Returns:
        (canvas with the object on black, the moved mask, (dx, dy)).
    """
    h, w = m.shape
    x0, y0, x1, y1 = mask_bbox(m)
    bh, bw = y1 - y0, x1 - x0
    ny = int(randint(rng, 0, h - bh + 1))
    nx = int(randint(rng, 0, w - bw + 1))
    moved = np.zeros_like(m)
    moved[ny : ny + bh, nx : nx + bw] = m[y0:y1, x0:x1]
    canvas = np.zeros_like(x)
    canvas[moved] = x[y0:y1, x0:x1][m[y0:y1, x0:x1]]
    return canvas, moved, (nx - x0, ny - y0)


@register_shift(
    "random_bg",
    family=FAMILY,
    params={"add": {"blend": "add"}, "paste": {"blend": "paste"}},
    needs=("mask", "background"),
    tags=TAGS,
    donor_rule="random",
    target="moved",  # placed at a random spot (segmentation.target_mask replays it)
)
def random_bg(image, p, rng, ctx):
    """Object moved to a random position on another class's image (add or paste blend).

    ``add`` follows the paper: ``addWeighted(bg, 1, fg, 1, 0)`` with ``fg`` the object on
    black, so object pixels become ``min(bg + obj, 255)``. ``paste`` replaces the donor's
    pixels under the moved mask with the object's own pixels.
    """
    x, m = _prep(image, ctx)
    bg = fit_donor(ctx.get("background"), x.shape)
    canvas, moved, _ = place_object(x, m, rng)
    if p["blend"] == "add":
        return cv2.add(bg, canvas)
    out = bg.copy()
    out[moved] = canvas[moved]
    return out
