"""Hole fill: the background an edited object is pasted onto.

Moving, shrinking or rotating an object uncovers the pixels it used to hide. ImageNet-E
filled that region with TFill (a learned inpainting model) before pasting the edited object
back. Here the backend is one of the run's tool settings, like the ``ai_bg`` inpainter:

- ``patch`` (default): an exemplar fill (multi-scale PatchMatch completion,
  :mod:`.patchfill`) that copies patches of the photo's own background into the hole.
  Weights-free, seeded by its settings (the same pixels every run), about 0.2 s for a
  256x256 photo whose object covers most of it, and it leaves no object-shaped structure.
  When the background is too small to take patches from (an object covering nearly the whole
  frame) the image falls back to ``telea`` and its attributes say so;
- ``telea`` / ``ns``: OpenCV's diffusion-style inpainting (Telea's fast marching method /
  Navier-Stokes), the default before the exemplar fill. On large holes it draws radial
  streaks that converge where the object was, a silhouette a classifier can use (see
  docs/imagenet_e.md for the comparison); kept as an option and for old folders;
- ``diffusers``: the local diffusers inpainting checkpoint configured for ``ai_bg``
  (``--inpainter`` / ``ROBUSTLAB_INPAINTER``, see :mod:`robustlab.shifts.generative.inpaint`), seeded by one draw
  from the cell's generator (the seed rule), drawn after the edit's own draws.

The weights-free fills are cached per (image, hole, backend) so the size, position and
direction edits of one image fill it once.

Configuration: the run's :class:`~robustlab.settings.ToolSettings`
``edit_fill`` = ``patch`` | ``telea`` | ``ns`` | ``diffusers`` (``--edit-fill``, default
``$ROBUSTLAB_EDIT_FILL``; resolved by the planning process, then put in each cell's
``ctx["hole_fill"]`` by the workers, :func:`hole_fill_context`); a ``ctx["hole_fill"]``
given directly (a name or an inpainter) is what fills, and without one the environment's.
:func:`describe_hole_fill` is the record that ``generate`` writes to its manifest and
``evaluate`` to the run config, with a fingerprint that changes whenever the filled pixels
could: a folder or run made with one backend never resumes under another.

The hole is the object mask dilated by a few pixels, so the object's anti-aliased rim
(and a slightly loose mask) does not bleed into the background.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any

import cv2
import numpy as np

from robustlab.errors import CellSkipped
from robustlab.seeding import randint
from robustlab.shifts.attributes.patchfill import patch_fill
from robustlab.settings import EDIT_FILL_BACKENDS, VARIABLES, ToolSettings

ENV_FILL = VARIABLES["edit_fill"]
DEFAULT_BACKEND = "patch"
BACKENDS = EDIT_FILL_BACKENDS
# Parameters as data: every backend's settings, recorded in describe_hole_fill().
# patch: see robustlab.shifts.attributes.patchfill.patch_fill (em/sweeps: coarsest level,
# middle levels, full resolution); chosen on the demo photos for no visible seams within
# about 0.2 s per 256x256 photo (benchmarks/edits.py).
SETTINGS: dict[str, dict[str, Any]] = {
    "patch": {
        "dilate": 3,
        "patch": 7,
        "min_side": 32,
        "min_sources": 64,
        "em": [4, 2, 1],
        "sweeps": [4, 2, 2],
        "search": 8,
        "sharp": True,
        "seed": 0,
        "version": 1,
    },
    "telea": {"radius": 5, "dilate": 3},
    "ns": {"radius": 5, "dilate": 3},
    "diffusers": {
        "dilate": 3,
        "prompt": "empty background scenery, no object",
        "negative_prompt": "object, animal, person",
        "steps": 30,
        "guidance_scale": 7.5,
        "work_size": 512,
    },
}
_OPENCV_FLAGS = {"telea": cv2.INPAINT_TELEA, "ns": cv2.INPAINT_NS}
_CACHE_SIZE = 4
_cache: OrderedDict[bytes, tuple[np.ndarray, str]] = OrderedDict()
_cache_lock = threading.Lock()


def backend_name(value: str | None = None, settings: ToolSettings | None = None) -> str:
    """The backend: ``value``, else the ``settings``' ``edit_fill`` (for None settings, the
    environment's), else ``patch``.

    Raises:
        InputError: an unknown name (a ValueError; the message lists the known ones).
    """
    if value is None:
        tools = settings if settings is not None else ToolSettings.from_environment()
        return tools.edit_fill or DEFAULT_BACKEND
    return ToolSettings(edit_fill=str(value)).edit_fill or DEFAULT_BACKEND


def hole_fill_context(settings: ToolSettings):
    """What a cell's ``ctx["hole_fill"]`` holds for ``settings``: the backend's name, or
    for ``diffusers`` the run's inpainter, loaded (once per process)."""
    name = backend_name(settings=settings)
    if name != "diffusers":
        return name
    from robustlab.shifts.generative.inpaint import get_inpainter

    return get_inpainter(settings=settings)


def hole_mask(mask: np.ndarray, dilate: int) -> np.ndarray:
    """The region to fill: the object mask grown by ``dilate`` pixels (HxW bool)."""
    m = np.ascontiguousarray(mask, dtype=np.uint8)
    if dilate > 0:
        k = 2 * int(dilate) + 1
        m = cv2.dilate(m, np.ones((k, k), np.uint8))
    return m > 0


def _weights_free_fill(image: np.ndarray, hole: np.ndarray, name: str) -> tuple[np.ndarray, str]:
    """The ``patch`` / ``telea`` / ``ns`` fill (cached) and the name of what filled it."""
    s = SETTINGS[name]
    key = hashlib.blake2b(
        image.tobytes()
        + np.packbits(hole).tobytes()
        + f"{image.shape}{name}{json.dumps(s, sort_keys=True)}".encode(),
        digest_size=16,
    ).digest()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit[0].copy(), hit[1]
    if name == "patch":
        try:
            out = patch_fill(
                np.ascontiguousarray(image),
                hole,
                patch=s["patch"],
                min_side=s["min_side"],
                min_sources=s["min_sources"],
                em=tuple(s["em"]),
                sweeps=tuple(s["sweeps"]),
                search=s["search"],
                sharp=s["sharp"],
                seed=s["seed"],
            )
            used = "patchmatch"
        except ValueError:
            # too little background to copy patches from: Telea's fill, named in attributes
            out, used = _opencv(image, hole, "telea"), "opencv-telea (patchmatch fallback)"
    else:
        out, used = _opencv(image, hole, name), f"opencv-{name}"
    with _cache_lock:
        _cache[key] = (out, used)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return out.copy(), used


def _opencv(image: np.ndarray, hole: np.ndarray, name: str) -> np.ndarray:
    return cv2.inpaint(
        np.ascontiguousarray(image),
        hole.astype(np.uint8) * 255,
        float(SETTINGS[name]["radius"]),
        _OPENCV_FLAGS[name],
    )


def fill_background(image: np.ndarray, mask: np.ndarray, rng, ctx) -> tuple[np.ndarray, str]:
    """``image`` with the (dilated) object region filled in, and the backend's name.

    Pixels outside the hole are returned unchanged, so every pixel of the result is either
    original background or filled: an edit that composites its object on it can never
    leave a hole of stale object pixels or black.

    Raises:
        ValueError: unknown backend, or ``diffusers`` without a usable checkpoint.
    """
    given = ctx.get("hole_fill") if ctx else None
    if given is not None and not isinstance(given, str):
        # A ready inpainter object (tests, notebooks): anything with the Inpainter call.
        name, inpainter = "diffusers", given
    else:
        name, inpainter = backend_name(given), None
    hole = hole_mask(mask, SETTINGS[name]["dilate"])
    if not (~hole).any():
        raise CellSkipped(
            "the object (grown by the fill margin) covers the whole image: "
            "no background to fill from"
        )
    if name != "diffusers":
        return _weights_free_fill(image, hole, name)
    if inpainter is None:
        from robustlab.shifts.generative.inpaint import get_inpainter

        inpainter = get_inpainter()
    s = SETTINGS["diffusers"]
    seed = int(randint(rng, 0, 2**31 - 1))
    out = inpainter(
        image,
        ~hole,
        seed=seed,
        prompt=s["prompt"],
        negative_prompt=s["negative_prompt"],
        steps=s["steps"],
        guidance_scale=s["guidance_scale"],
        work_size=s["work_size"],
    )
    return np.asarray(out, dtype=np.uint8), "diffusers"


def describe_hole_fill(
    backend: str | None = None, settings: ToolSettings | None = None
) -> dict[str, Any]:
    """JSON-able record of the configured backend, with a 16-hex-digit ``fingerprint``.

    Weights-free backends: their settings and the OpenCV version (its inpainting code shapes
    the pixels; the exemplar fill starts its coarsest level from it), plus numba's for the
    exemplar fill. ``diffusers``: the settings plus the checkpoint's ``describe_inpainter()``
    record (path, fingerprint, device, dtype), without loading its weights.

    Raises:
        ValueError: unknown backend, or ``diffusers`` without a configured checkpoint.
    """
    name = backend_name(backend, settings)
    label = {"diffusers": "diffusers", "patch": "patchmatch"}.get(name, f"opencv-{name}")
    rec: dict[str, Any] = {"backend": label, **SETTINGS[name]}
    if name == "diffusers":
        from robustlab.shifts.generative.inpaint import describe_inpainter

        rec["inpainter"] = describe_inpainter(settings=settings)
    else:
        rec["opencv"] = cv2.__version__
    if name == "patch":
        import numba

        rec["numba"] = numba.__version__
    blob = json.dumps({k: v for k, v in rec.items() if k != "inpainter"}, sort_keys=True)
    if name == "diffusers":
        blob += rec["inpainter"].get("fingerprint") or ""
    rec["fingerprint"] = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return rec


__all__ = [
    "ENV_FILL",
    "BACKENDS",
    "SETTINGS",
    "backend_name",
    "hole_fill_context",
    "hole_mask",
    "fill_background",
    "describe_hole_fill",
]
