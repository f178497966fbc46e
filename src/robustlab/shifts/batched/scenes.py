"""Batched XIMAGENET-12 and ImageNet-9 scenes: per-pixel work under a foreground mask.

The exact scenes (:mod:`robustlab.shifts.scenes`) run OpenCV on one image at a time; here
the same operations (:mod:`._opencv` reproduces OpenCV's uint8 arithmetic) run on a whole
batch and the mask selects per pixel, with the scenes' own parameter tables. Batched:

* deterministic, equal to the exact path pixel for pixel on the shared photos (up to one
  level at the few pixels where OpenCV's HSV conversion ends a row in scalar code):
  ``blur_bg``, ``blur_obj``, ``color_grey``, ``bright_bg``, ``bright_obj``, ``segmented``,
  ``transparent`` (its colour channels: the white-matte composite a model sees),
  ``only_fg``, ``no_fg``, ``only_bg_b``, ``only_bg_t``;
* one random draw per image, from the image's seed-rule torch generator (so a different
  hue than numpy's draw, with the same distribution): ``color_r``, ``color_g``,
  ``color_b`` (a hue from the ranges of the table) and ``rainbow`` (a hue rotation).
  Each is split into its draw and a deterministic apply (the entry's ``parts``); the
  replay is the exact scene's own draw function (``Shift.draw``), so ``apply_matched``
  fed it gives the exact pixels.

Not batched (``evaluate --shift-device`` has the workers make them exactly, as on the
exact path): ``random_bg`` and ``mixed_same``/``mixed_rand``/``mixed_next``, which need a
donor image decoded per cell (and ``random_bg`` a random object move), and ``ai_bg``,
which runs a diffusion model.

The per-image inputs come from the worker (:func:`scene_inputs`): the prepared mask, the
object box, and why the exact path would refuse the image (:func:`problem`), so a bad
mask skips the same cells with the same reason on both paths.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

from robustlab.errors import CellSkipped
from robustlab.shifts.batched._opencv import (
    add_weighted,
    gaussian_blur,
    hsv_to_rgb,
    rgb_to_grey,
    rgb_to_hsv,
)
from robustlab.shifts.batched._ops import randint
from robustlab.shifts.registry import get_shift, register_batched

MASK = ("masks",)
BOX = ("masks", "boxes")
TILE_ERROR = "the object box covers the whole image: no background texture to tile"


# ------------------------------------------------------------------ per-image inputs


def scene_inputs(prepared) -> dict:
    """What the batched scenes need from one worker-prepared image (a ``Prepared``).

    Returns:
        ``mask`` (H, W) bool tensor or None, ``mask_error`` (the exact path's reason to
        skip a mask scene, or None; both None: the photo has no mask), ``box``
        ``(x0, y0, x1, y1)`` or None and ``box_error`` (the reason to skip a box scene).
    """
    from robustlab.shifts.scenes._common import check_mask, object_box

    out: dict = {"mask": None, "mask_error": None, "box": None, "box_error": None}
    if prepared.mask is None:
        return out
    try:
        mask = check_mask(prepared.mask, prepared.rgb.shape)
    except ValueError as exc:
        out["mask_error"] = str(exc)
        return out
    out["mask"] = torch.from_numpy(mask)
    try:
        out["box"] = tuple(int(v) for v in object_box({"bbox": prepared.bbox}, mask))
    except ValueError as exc:
        out["box_error"] = str(exc)
    return out


def problem(name: str, inputs: dict | None, shape: Sequence[int]) -> str | None:
    """Why the exact scene ``name`` would skip this image (its message), or None.

    Args:
        name: A batched scene.
        inputs: The image's :func:`scene_inputs` (None: the run loaded no masks).
        shape: The image's (height, width).
    """
    from robustlab.shifts.scenes._common import largest_background_strip

    needs = get_shift(name, batched=True).batched_needs
    if not needs:
        return None
    if inputs is None or (inputs["mask"] is None and not inputs["mask_error"]):
        return get_shift(name).missing_context({})  # as the shift itself says it
    if inputs["mask_error"]:
        return inputs["mask_error"]
    if "boxes" in needs:
        if inputs["box_error"]:
            return inputs["box_error"]
        if name == "only_bg_t" and largest_background_strip(shape, inputs["box"]) is None:
            return TILE_ERROR
    return None


def _where(masks: torch.Tensor, inside: torch.Tensor, outside: torch.Tensor) -> torch.Tensor:
    """``inside`` on the foreground, ``outside`` elsewhere (masks (N, H, W) bool)."""
    return torch.where(masks.unsqueeze(1), inside, outside)


# ------------------------------------------------------------------ XIMAGENET-12


@register_batched("blur_bg", needs=MASK)
def blur_bg(x, p, gens, *, masks):
    """Background Gaussian-blurred (the table's ksize and sigma); object unchanged."""
    return _where(masks, x, gaussian_blur(x, p["ksize"], p["sigma"]))


@register_batched("blur_obj", needs=MASK)
def blur_obj(x, p, gens, *, masks):
    """Object Gaussian-blurred; background unchanged."""
    return _where(masks, gaussian_blur(x, p["ksize"], p["sigma"]), x)


@register_batched("color_grey", needs=MASK)
def color_grey(x, p, gens, *, masks):
    """Background in OpenCV's grey; object unchanged."""
    return _where(masks, x, rgb_to_grey(x).unsqueeze(1).expand_as(x))


def set_background_hue(x: torch.Tensor, masks: torch.Tensor, hue: torch.Tensor) -> torch.Tensor:
    """The exact path's ``_set_bg_hue``: background pixels go to HSV, take the hue ``hue``
    ((N, H, W) or broadcastable, OpenCV units) and come back; object pixels unchanged."""
    h, s, v = rgb_to_hsv(x)
    return _where(masks, x, hsv_to_rgb(hue.expand_as(h), s, v))


def _hue_table(ranges) -> list[int]:
    """Every hue of the inclusive ``ranges``, in the order the exact draw counts them."""
    return [hue for lo, hi in ranges for hue in range(int(lo), int(hi) + 1)]


def _exact_draws(name: str, img: np.ndarray, p, rng) -> dict[str, torch.Tensor]:
    """The exact scene's own draws (its entry's ``draw``) for one image, as (1,) tensors:
    a random scene's replay, ``functools.partial(_exact_draws, name)``."""
    draws = get_shift(name).draw(img, p, rng, {})
    return {k: torch.tensor([int(v)]) for k, v in draws.items()}


def _hue_draw(x, p, gens) -> dict[str, torch.Tensor]:
    table = torch.tensor(_hue_table(p["hue_ranges"]), device=x.device)
    return {"hue": table[randint(gens, 0, len(table), (), x.device)]}


def _make_color(name: str):
    def color(x, p, draws, *, masks):
        return set_background_hue(x, masks, draws["hue"].view(-1, 1, 1))

    color.__doc__ = f"Background hue set to one hue drawn per image from {name}'s ranges."
    color.__name__ = color.__qualname__ = name
    replay = functools.partial(_exact_draws, name)
    return register_batched(name, needs=MASK, draw=_hue_draw, replay=replay)(color)


color_r = _make_color("color_r")
color_g = _make_color("color_g")
color_b = _make_color("color_b")


def _rotation_draw(x, p, gens) -> dict[str, torch.Tensor]:
    lo, hi = p["shift"]
    return {"amount": randint(gens, int(lo), int(hi) + 1, (), x.device)}


@register_batched(
    "rainbow",
    needs=MASK,
    draw=_rotation_draw,
    replay=functools.partial(_exact_draws, "rainbow"),
)
def rainbow(x, p, draws, *, masks):
    """Background hue rotated by one amount drawn per image from ``shift`` (inclusive)."""
    amount = draws["amount"].view(-1, 1, 1)
    h, s, v = rgb_to_hsv(x)
    return _where(masks, x, hsv_to_rgb((h + amount) % int(p["period"]), s, v))


def _bright(x: torch.Tensor, p: dict) -> torch.Tensor:
    blurred = gaussian_blur(x, p["ksize"], p["sigma"])
    return add_weighted(x, p["alpha"], blurred, p["beta"], p["gamma"])


@register_batched("bright_bg", needs=MASK)
def bright_bg(x, p, gens, *, masks):
    """Background brightened (``addWeighted`` of the image and its blur); object unchanged."""
    return _where(masks, x, _bright(x, p))


@register_batched("bright_obj", needs=MASK)
def bright_obj(x, p, gens, *, masks):
    """Object brightened; background unchanged."""
    return _where(masks, _bright(x, p), x)


def _fill(x: torch.Tensor, colour) -> torch.Tensor:
    return torch.tensor(np.asarray(colour, np.uint8), device=x.device).view(1, 3, 1, 1)


@register_batched("segmented", needs=MASK)
def segmented(x, p, gens, *, masks):
    """Background set to the table's fill colour (black)."""
    return _where(masks, x, _fill(x, p["fill"]))


@register_batched("transparent", needs=MASK)
def transparent(x, p, gens, *, masks):
    """The colour channels of the exact RGBA result: the object on the white matte."""
    return _where(masks, x, _fill(x, p["matte"]))


# ------------------------------------------------------------------ ImageNet-9


@register_batched("only_fg", needs=MASK)
def only_fg(x, p, gens, *, masks):
    """Object on black."""
    return _where(masks, x, torch.zeros_like(x))


@register_batched("no_fg", needs=MASK)
def no_fg(x, p, gens, *, masks):
    """Object pixels set to black."""
    return _where(masks, torch.zeros_like(x), x)


def _in_box(boxes: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(N, H, W) bool: inside each image's ``(x0, y0, x1, y1)`` box."""
    dev = boxes.device
    ys = torch.arange(h, device=dev).view(1, h, 1)
    xs = torch.arange(w, device=dev).view(1, 1, w)
    x0, y0, x1, y1 = (boxes[:, i].view(-1, 1, 1) for i in range(4))
    return (ys >= y0) & (ys < y1) & (xs >= x0) & (xs < x1)


@register_batched("only_bg_b", needs=BOX)
def only_bg_b(x, p, gens, *, masks, boxes):
    """Object box set to black."""
    return _where(_in_box(boxes, *x.shape[-2:]), torch.zeros_like(x), x)


def _tile_index(n: int, start: int, stop: int, src: slice) -> np.ndarray:
    """Source row (or column) of each of ``n`` positions: inside ``[start, stop)`` the strip
    ``src`` repeated from ``start`` (``np.tile``'s layout), elsewhere the position itself."""
    idx = np.arange(n)
    first, size = src.start or 0, (src.stop if src.stop is not None else n) - (src.start or 0)
    inside = slice(start, stop)
    idx[inside] = first + np.arange(stop - start) % size
    return idx


@register_batched("only_bg_t", needs=BOX)
def only_bg_t(x, p, gens, *, masks, boxes):
    """Object box filled by tiling the largest background strip outside it (per image one
    row and one column gather, the strip chosen as :func:`..scenes._common.tile_fill`)."""
    from robustlab.shifts.scenes._common import largest_background_strip

    n, c, h, w = x.shape
    rows, cols = [], []
    for x0, y0, x1, y1 in boxes.tolist():
        strip = largest_background_strip((h, w), (x0, y0, x1, y1))
        if strip is None:
            raise CellSkipped(TILE_ERROR)
        rows.append(_tile_index(h, y0, y1, strip[0]))
        cols.append(_tile_index(w, x0, x1, strip[1]))
    ri = torch.as_tensor(np.stack(rows), device=x.device).view(n, 1, h, 1).expand(n, c, h, w)
    ci = torch.as_tensor(np.stack(cols), device=x.device).view(n, 1, 1, w).expand(n, c, h, w)
    tiled = x.gather(2, ri).gather(3, ci)
    return _where(_in_box(boxes, h, w), tiled, x)
