"""XIMAGENET-12 foreground/background scenarios (REFERENCE.md section 2).

Each scenario changes either the background or the object and leaves the other part
bit-identical, so an accuracy change can be blamed on one of them. Foreground is
``ctx["mask"] > 0``. All scenarios have one level, ``"default"``, except ``random_bg``
(``"add"``: the paper's additive blend; ``"paste"``: a clean alpha paste). The diffusion
scenario ``ai_bg`` is not implemented here.

The random scenarios make their choices in one draw function each (:func:`draw_hue`,
:func:`draw_rotation`, :func:`draw_placement`, the entry's ``draw``) and then apply them:
the batched versions replay the exact draws through the same function, and
segmentation's true mask of the moved object comes from ``random_bg``'s draw, so no other
module repeats the order of the draws.
"""

from __future__ import annotations

import cv2
import numpy as np

from robustlab.seeding import randint
from robustlab.shifts.registry import register_shift
from robustlab.shifts.scenes._common import (
    check_image,
    check_mask,
    fit_donor,
    mask_bbox,
    moved_mask,
)

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


def draw_hue(image, p, rng, ctx) -> dict:
    """The colour scenes' one choice: ``hue``, an integer drawn uniformly from the union
    of the level's inclusive ``hue_ranges`` (one draw of ``rng``)."""
    ranges = p["hue_ranges"]
    sizes = [hi - lo + 1 for lo, hi in ranges]
    k = int(randint(rng, 0, sum(sizes)))
    for (lo, _), n in zip(ranges, sizes):
        if k < n:
            return {"hue": int(lo + k)}
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
        hue = draw_hue(x, p, rng, ctx)["hue"]
        return _set_bg_hue(x, m, lambda h: np.full_like(h, hue))

    color.__doc__ = (
        f"Background hue set to one random {colour} hue (OpenCV units "
        f"{HUE_RANGES[name]['default']['hue_ranges']}); object unchanged."
    )
    color.__name__ = color.__qualname__ = name
    return register_shift(
        name, family=FAMILY, params=HUE_RANGES[name], needs=MASK, tags=TAGS, draw=draw_hue
    )(color)


color_r = _make_color("color_r", "red")
color_g = _make_color("color_g", "green")
color_b = _make_color("color_b", "blue")


def draw_rotation(image, p, rng, ctx) -> dict:
    """``rainbow``'s one choice: ``amount``, the hue rotation, an integer drawn uniformly
    from the level's inclusive ``shift`` range (one draw of ``rng``)."""
    lo, hi = p["shift"]
    return {"amount": int(randint(rng, lo, hi + 1))}


@register_shift(
    "rainbow",
    family=FAMILY,
    params={"default": {"shift": (0, 90), "period": 180}},
    needs=MASK,
    tags=TAGS,
    draw=draw_rotation,
)
def rainbow(image, p, rng, ctx):
    """Background hue rotated by one random amount (0..90, mod 180); object unchanged."""
    x, m = _prep(image, ctx)
    s = draw_rotation(x, p, rng, ctx)["amount"]
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


def draw_placement(image, p, rng, ctx) -> dict:
    """``random_bg``'s one choice: where the object goes. Its mask's box moves to a
    position drawn uniformly among those that keep it inside the image (the top row
    first, then the left column).

    Returns:
        ``{"offset": (dx, dy)}``, the object's move in pixels
        (:func:`robustlab.shifts.scenes.moved_mask` gives the moved mask).
    """
    m = check_mask(ctx.get("mask"), np.shape(image))
    h, w = m.shape
    x0, y0, x1, y1 = mask_bbox(m)
    ny = int(randint(rng, 0, h - (y1 - y0) + 1))
    nx = int(randint(rng, 0, w - (x1 - x0) + 1))
    return {"offset": (nx - x0, ny - y0)}


def place_object(x: np.ndarray, m: np.ndarray, offset: tuple[int, int]):
    """The object moved by ``offset`` (a :func:`draw_placement`) onto black.

    Returns:
        (canvas with the object on black, the moved mask).
    """
    x0, y0, x1, y1 = mask_bbox(m)
    moved = moved_mask(m, offset)
    canvas = np.zeros_like(x)
    canvas[moved] = x[y0:y1, x0:x1][m[y0:y1, x0:x1]]
    return canvas, moved


@register_shift(
    "random_bg",
    family=FAMILY,
    params={"add": {"blend": "add"}, "paste": {"blend": "paste"}},
    needs=("mask", "background"),
    tags=TAGS,
    donor_rule="random",
    target="moved",  # placed at a random spot: draw_placement's offset
    draw=draw_placement,
)
def random_bg(image, p, rng, ctx):
    """Object moved to a random position on another class's image (add or paste blend).

    ``add`` follows the paper: ``addWeighted(bg, 1, fg, 1, 0)`` with ``fg`` the object on
    black, so object pixels become ``min(bg + obj, 255)``. ``paste`` replaces the donor's
    pixels under the moved mask with the object's own pixels.
    """
    x, m = _prep(image, ctx)
    bg = fit_donor(ctx.get("background"), x.shape)
    canvas, moved = place_object(x, m, draw_placement(x, p, rng, ctx)["offset"])
    if p["blend"] == "add":
        return cv2.add(bg, canvas)
    out = bg.copy()
    out[moved] = canvas[moved]
    return out
