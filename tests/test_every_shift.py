"""Every registered shift through the same checks: registering a shift is what tests it.

The registry is the list (:func:`robustlab.shifts.registry.list_shifts`), so a new shift is
checked here the moment it is registered, with no test written for it:

* output: uint8, the input's height and width, 3 channels (4 where the entry says
  ``channels=4``), and not the input unchanged at some level;
* determinism per seed (the seed rule: ``pipeline.apply_shift``), and seed sensitivity: a
  shift registered ``deterministic`` gives the same image for every seed, a random one
  another image for another seed at some level;
* any size: an odd-sized image (61 x 47) and the smallest allowed (32 x 32) keep their size;
* any source: a greyscale and an RGBA source, brought to RGB by the one conversion of the
  image reader (:func:`robustlab.data.images.array_to_rgb`), give valid images;
* strength monotone in level where the entry says ``monotone=True``: the mean absolute
  change from the clean image does not fall from one level to the next (on three real
  photos, two seeds each);
* the batched version, where one exists, fed the exact path's draws, gives the exact
  path's image (within the entry's ``matched_mad``, at least the 0.05 levels that float32
  arithmetic may flip at rare pixels).

Inputs are the demo's real photos with their checked-in object masks; a shift's context
keys (mask, box, class, a background donor with its mask) are filled from them. Shifts that
need a loaded model (an inpainter, a background diffusion model, a guide classifier:
resources with a loader, :func:`robustlab.shifts.registry.register_resource`) cannot run
their real levels on a CPU test budget; their own modules test them with tiny random-weight
models (tests/test_inpaint.py, tests/test_guided_bg.py), and this module checks that every
such shift is named there.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from robustlab.data.images import array_to_rgb
from robustlab.pipeline import apply_shift
from robustlab.shifts.registry import get_resource, list_shifts

TESTS = Path(__file__).parent
SIZE = 96
IMAGE_KEYS = {"mask", "bbox", "class_name", "background", "background_mask"}


def _needs_a_model(sh) -> bool:
    return any(k not in IMAGE_KEYS and get_resource(k).load is not None for k in sh.needs)


SHIFTS = list(list_shifts())
CHECKED = [sh.name for sh in SHIFTS if not _needs_a_model(sh)]
MODEL_SHIFTS = [sh.name for sh in SHIFTS if _needs_a_model(sh)]


def _resize(a: np.ndarray, w: int, h: int) -> np.ndarray:
    interp = cv2.INTER_AREA if a.ndim == 3 else cv2.INTER_NEAREST
    return cv2.resize(a, (w, h), interpolation=interp)


@pytest.fixture(scope="module")
def photos():
    """The demo photos (real photos with checked-in masks) at 96 x 96, the smallest object
    first (a scene that tiles or moves the object needs background around it):
    ``(rgb, mask uint8 0/255, bbox, class_name)`` each."""
    from robustlab.data.sources import Sample
    from robustlab.workflows.demo import demo_photos
    from robustlab.pipeline import load_prepared
    from robustlab.suites import Protocol

    out = []
    for ph in demo_photos():
        s = Sample(ph.id, ph.source, ph.class_name, mask_path=ph.mask)
        p = load_prepared(s, Protocol(resize=SIZE, crop=SIZE), with_mask=True)
        mask = np.where(p.mask > 0, 255, 0).astype(np.uint8)
        out.append((p.rgb, mask, p.bbox, ph.class_name))
    return sorted(out, key=lambda p: int((p[1] > 0).sum()))


def _box(mask: np.ndarray) -> tuple[int, int, int, int]:
    ys, xs = np.nonzero(mask)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def _context(sh, photo, donor, size: tuple[int, int] | None = None) -> dict:
    """The context keys ``sh`` needs, from a photo and another photo as the donor."""
    rgb, mask, _, cls = photo
    drgb, dmask, _, _ = donor
    if size is not None:
        mask, drgb, dmask = _resize(mask, *size), _resize(drgb, *size), _resize(dmask, *size)
    full = {
        "mask": mask,
        "bbox": _box(mask),
        "class_name": cls,
        "background": drgb,
        "background_mask": dmask,
    }
    return {k: v for k, v in full.items() if k in sh.needs or k == "bbox"}


def _run(sh, img, level, seed, ctx, sid="photo.jpg") -> np.ndarray:
    return apply_shift(img, sid, sh, level, seed, ctx)


def _check_image(sh, out: np.ndarray, h: int, w: int, where: str) -> None:
    channels = int(sh.extra.get("channels", 3))
    assert out.dtype == np.uint8, (sh.name, where, out.dtype)
    assert out.shape == (h, w, channels), (sh.name, where, out.shape)


def _shift(name):
    return next(sh for sh in SHIFTS if sh.name == name)


@pytest.mark.parametrize("name", CHECKED)
def test_output_seed_rule_and_determinism(photos, name):
    sh = _shift(name)
    photo, donor = photos[0], photos[1]
    img = photo[0]
    ctx = _context(sh, photo, donor)
    changed, seed_matters = False, False
    for lv in sh.levels:
        a = _run(sh, img, lv, 0, ctx)
        _check_image(sh, a, SIZE, SIZE, f"level {lv}")
        np.testing.assert_array_equal(a, _run(sh, img, lv, 0, ctx), err_msg=f"{name} {lv}")
        changed |= not np.array_equal(a[..., :3], img)
        other = _run(sh, img, lv, 1, ctx)
        if sh.deterministic:
            np.testing.assert_array_equal(a, other, err_msg=f"{name} {lv}: deterministic")
        else:
            seed_matters |= not np.array_equal(a, other)
    assert changed, f"{name} leaves the image unchanged at every level"
    # A random shift may have no freedom on one photo (an object too large to move), so
    # the other photos are tried before the seed is said to be ignored.
    for photo, donor in zip(photos[1:], photos[2:] + photos[:1]):
        if sh.deterministic or seed_matters:
            break
        ctx = _context(sh, photo, donor)
        seed_matters = any(
            not np.array_equal(_run(sh, photo[0], lv, 0, ctx), _run(sh, photo[0], lv, 1, ctx))
            for lv in sh.levels
        )
    why_not = sh.extra.get("random_only_with")  # random only when so configured
    assert sh.deterministic or seed_matters or why_not, f"{name} is random but ignores the seed"


@pytest.mark.parametrize("name", CHECKED)
def test_odd_and_smallest_sizes(photos, name):
    sh = _shift(name)
    photo, donor = photos[1], photos[2]
    for w, h in ((61, 47), (32, 32)):
        img = _resize(photo[0], w, h)
        ctx = _context(sh, photo, donor, size=(w, h))
        if "mask" in sh.needs and not ctx["mask"].any():  # pragma: no cover - fixture guard
            pytest.fail(f"the {w}x{h} mask lost the object")
        for lv in sh.levels:
            _check_image(sh, _run(sh, img, lv, 0, ctx), h, w, f"{w}x{h} level {lv}")


@pytest.mark.parametrize("name", CHECKED)
def test_greyscale_and_rgba_sources(photos, name):
    sh = _shift(name)
    photo, donor = photos[2], photos[3]
    rgb = photo[0]
    grey = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 200, np.uint8)])
    ctx = _context(sh, photo, donor)
    lv = sh.levels[-1]
    for source in (grey, rgba):
        img, _ = array_to_rgb(source)
        _check_image(sh, _run(sh, img, lv, 0, ctx), SIZE, SIZE, f"{source.shape} source")
    # a greyscale source stays a valid image: its three equal channels are not an error
    img, _ = array_to_rgb(grey)
    assert img.shape == rgb.shape and np.array_equal(img[..., 0], img[..., 2])


MONOTONE = [n for n in CHECKED if _shift(n).monotone]


def test_the_monotone_declarations_are_the_imagenet_c_designs():
    """ImageNet-C's severities grow in strength by design, but five official parameter tables
    do not grow in pixel change (measured on the demo photos; faithful to the original):
    glass_blur (level 4 iterates less than 3), frost (levels 4-5 blend less frost than 3),
    elastic_transform (levels 1-2 carry the large affine of the 244-px tables), saturate
    (level 3 amplifies less than 4-5 but more than 1-2 desaturate), spatter (mud after water)."""
    corruptions = {sh.name for sh in SHIFTS if {"imagenet-c", "imagenet-c-extra"} & sh.tags}
    not_monotone = {"glass_blur", "frost", "elastic_transform", "saturate", "spatter"}
    assert set(MONOTONE) == corruptions - not_monotone


@pytest.mark.parametrize("name", MONOTONE)
def test_strength_grows_with_the_level(photos, name):
    sh = _shift(name)
    changes = []
    for photo, donor in zip(photos[:3], photos[1:4]):
        img = photo[0]
        ctx = _context(sh, photo, donor)
        row = [
            np.mean([np.abs(_run(sh, img, lv, s, ctx).astype(float) - img).mean() for s in (0, 1)])
            for lv in sh.levels
        ]
        changes.append(row)
    mean = np.mean(changes, axis=0)
    # half a level of slack for two random draws; a swapped table entry moves it by levels
    assert np.all(np.diff(mean) >= -0.5), (name, np.round(mean, 2))


def _batched(name) -> bool:
    from robustlab.shifts.registry import get_shift

    return get_shift(name, batched=True).batched is not None


BATCHED = [n for n in CHECKED if _batched(n)]


@pytest.mark.parametrize("name", BATCHED)
def test_the_batched_version_fed_the_exact_draws_is_the_exact_image(photos, name):
    from robustlab.shifts.batched import apply_matched
    from robustlab.shifts.registry import get_shift

    sh = get_shift(name, batched=True)
    picked = photos[:2]
    imgs = np.stack([p[0] for p in picked])
    masks = np.stack([p[1] > 0 for p in picked])
    boxes = torch.as_tensor([_box(p[1]) for p in picked], dtype=torch.int64)
    ids = [f"photo{i}.jpg" for i in range(len(picked))]
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous()
    kw = {}
    if "masks" in sh.batched_needs:
        kw["masks"] = torch.from_numpy(masks)
    if "boxes" in sh.batched_needs:
        kw["boxes"] = boxes
    bound = max(sh.parts.matched_mad if sh.parts is not None else 0.0, 0.05)
    for lv in sh.levels:
        ours = apply_matched(name, lv, x, ids, seed=3, **kw).permute(0, 2, 3, 1).numpy()
        exact = np.stack(
            [
                _run(sh, p[0], lv, 3, _context(sh, p, photos[2]), sid)[..., :3]
                for p, sid in zip(picked, ids)
            ]
        )
        mad = float(np.abs(ours.astype(float) - exact).mean())
        assert mad <= bound, (name, lv, mad, bound)


def test_shifts_that_need_a_model_are_tested_with_tiny_models():
    """The shifts this module cannot run (a loaded model in their context) are each tested
    by name in a module that builds a tiny random-weight model for them."""
    assert MODEL_SHIFTS, "no shift needs a model: drop this exemption"
    own = {
        "ai_bg": "test_inpaint.py",
        "bg_complexity": "test_guided_bg.py",
        "bg_complexity_adv": "test_guided_bg.py",
    }
    assert set(MODEL_SHIFTS) == set(own), MODEL_SHIFTS
    for name, module in own.items():
        assert f'"{name}"' in (TESTS / module).read_text(encoding="utf-8"), (name, module)
