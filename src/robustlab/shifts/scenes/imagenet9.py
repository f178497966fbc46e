"""ImageNet-9 background variants (Xiao et al., "Noise or Signal"; REFERENCE.md section 3).

Foreground is ``ctx["mask"] > 0``. The object box is ``ctx["bbox"]`` (x0, y0, x1, y1 in the
*prepared* image's pixels, x1/y1 exclusive) when the runner has one, else the mask's tight
box. The three mixes paste the object, at its own position, onto the ``only_bg_t``
version of a donor image: ``ctx["background"]`` (donor pixels), ``ctx["background_mask"]``
(the donor's mask, used to find the donor's object box; ``ctx["background_bbox"]``
overrides it). The donor is chosen by the runner with
:func:`robustlab.shifts.scenes.choose_donor` under the rule in ``shift.extra["donor_rule"]``.
"""

from __future__ import annotations

import numpy as np

from robustlab.shifts.registry import register_shift
from robustlab.shifts.scenes._common import (
    check_bbox,
    check_image,
    check_mask,
    fit_donor,
    fit_mask,
    mask_bbox,
    object_box,
    tile_fill,
)

TAGS = ("imagenet9",)
FAMILY = "background"
MASK = ("mask",)
DEFAULT = {"default": {}}
DONOR = ("mask", "background", "background_mask")


def _prep(image, ctx):
    x = check_image(image)
    return x, check_mask(ctx.get("mask"), x.shape)


@register_shift("only_fg", family=FAMILY, params=DEFAULT, needs=MASK, deterministic=True, tags=TAGS)
def only_fg(image, p, rng, ctx):
    """Object on black: every background pixel set to 0."""
    x, m = _prep(image, ctx)
    return np.where(m[..., None], x, 0).astype(np.uint8)


@register_shift(
    "no_fg",
    family=FAMILY,
    params=DEFAULT,
    needs=MASK,
    deterministic=True,
    tags=TAGS,
    target=None,  # the object is gone
)
def no_fg(image, p, rng, ctx):
    """Object removed: every object pixel set to 0, background unchanged."""
    x, m = _prep(image, ctx)
    return np.where(m[..., None], 0, x).astype(np.uint8)


@register_shift(
    "only_bg_b",
    family=FAMILY,
    params=DEFAULT,
    needs=MASK,
    deterministic=True,
    tags=TAGS,
    target=None,  # the object's box is blanked out
)
def only_bg_b(image, p, rng, ctx):
    """Object box set to black; pixels outside the box unchanged."""
    x, m = _prep(image, ctx)
    x0, y0, x1, y1 = object_box(ctx, m)
    out = x.copy()
    out[y0:y1, x0:x1] = 0
    return out


@register_shift(
    "only_bg_t",
    family=FAMILY,
    params=DEFAULT,
    needs=MASK,
    deterministic=True,
    tags=TAGS,
    target=None,  # the object's box is blanked out
)
def only_bg_t(image, p, rng, ctx):
    """Object box filled by tiling the largest background strip outside it."""
    x, m = _prep(image, ctx)
    return tile_fill(x, object_box(ctx, m))


def _mixed(image, ctx):
    x, m = _prep(image, ctx)
    bg = fit_donor(ctx.get("background"), x.shape)
    if ctx.get("background_bbox") is not None:
        # the donor's own box is all the tiling needs; its mask may then be unusable
        box = check_bbox(ctx["background_bbox"], x.shape)
    else:
        box = mask_bbox(fit_mask(ctx.get("background_mask"), x.shape, name="background_mask"))
    canvas = tile_fill(bg, box)
    canvas[m] = x[m]
    return canvas


for _name, _rule, _what in (
    ("mixed_same", "same", "another image of the same class"),
    ("mixed_rand", "random", "an image of a random other class"),
    ("mixed_next", "next", "an image of the next class"),
):

    def _fn(image, p, rng, ctx):
        return _mixed(image, ctx)

    _fn.__doc__ = f"Object pasted at its own position onto the only_bg_t background of {_what}."
    _fn.__name__ = _fn.__qualname__ = _name
    globals()[_name] = register_shift(
        _name,
        family=FAMILY,
        params=DEFAULT,
        needs=DONOR,
        deterministic=True,
        tags=TAGS,
        donor_rule=_rule,
    )(_fn)
