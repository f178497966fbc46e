"""Foreground/background scenarios: XIMAGENET-12 and ImageNet-9.

Importing this package registers the scenarios (tags ``"ximagenet12"`` and
``"imagenet9"``). What each needs in ``ctx``:

- every scenario: ``mask`` (HxW, foreground > 0, same size as the image, neither empty
  nor full). Optional ``bbox`` (prepared-image pixels) for ``only_bg_b``/``only_bg_t``.
- ``random_bg``: ``background`` (donor HxWx3 uint8, any size; resized bilinearly).
- ``mixed_same``/``mixed_rand``/``mixed_next``: ``background`` and ``background_mask``
  (the donor's own mask; optional ``background_bbox``).

Donors: ``shift.extra["donor_rule"]`` names the rule (``same``/``random``/``next``);
:class:`DonorPool` decides which samples of a data set may be donors for a shift (the one
rule every path uses) and picks one with the per-sample generator (:func:`choose_donor`
and :class:`DonorIndex` are the building blocks). A random scenario's choices come from its entry's ``draw`` (``get_shift(name).draw``:
the hue, the rotation, where ``random_bg`` moves the object, as ``{"offset": (dx, dy)}``
that :func:`moved_mask` applies to the object's mask). ``transparent`` returns RGBA
(``shift.extra["channels"] == 4``); its colour channels already hold the white-matte
composite.
"""

from robustlab.shifts.scenes._common import (  # noqa: F401
    DONOR_RULES,
    DonorIndex,
    DonorPool,
    check_mask,
    choose_donor,
    mask_bbox,
    matte,
    moved_mask,
    tile_fill,
)
from robustlab.shifts.scenes import ximagenet12, imagenet9  # noqa: F401  (registers shifts)

XIMAGENET12 = (
    "blur_bg",
    "blur_obj",
    "color_grey",
    "color_r",
    "color_g",
    "color_b",
    "rainbow",
    "bright_bg",
    "bright_obj",
    "segmented",
    "transparent",
    "random_bg",
)
IMAGENET9 = ("only_fg", "no_fg", "only_bg_b", "only_bg_t", "mixed_same", "mixed_rand", "mixed_next")

__all__ = [
    "DONOR_RULES",
    "DonorIndex",
    "DonorPool",
    "choose_donor",
    "check_mask",
    "mask_bbox",
    "matte",
    "moved_mask",
    "tile_fill",
    "XIMAGENET12",
    "IMAGENET9",
]
