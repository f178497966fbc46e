"""Batched XIMAGENET-12 / ImageNet-9 scenes (``--shift-device``) against the exact path.

On real photos with irregular masks the deterministic scenes must give the exact path's
pixels (OpenCV's uint8 arithmetic is reproduced, so the measured difference is zero; the
assertion allows one level at a few pixels, where OpenCV's HSV conversion may end a row in
scalar code). The random scenes draw one hue per image from torch: the HSV round trip
for a given hue is checked value for value, the draws for their range and spread. Masks
travel from the worker to the main process with each photo: bad masks skip the same
cells with the same reasons as on the exact path.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from conftest import as_batch, as_images, on_device

from robustlab.masks.synthetic import random_blob
from robustlab.pipeline import apply_shift, prepare
from robustlab.shifts.batched import apply, apply_matched, has_batched
from robustlab.shifts.batched.scenes import set_background_hue
from robustlab.shifts.registry import get_shift, list_shifts
from robustlab.shifts.scenes import IMAGENET9, XIMAGENET12
from robustlab.shifts.scenes._common import mask_bbox
from robustlab.suites import get_suite

PROTOCOL = get_suite("ximagenet12").protocol
DETERMINISTIC = (
    "blur_bg",
    "blur_obj",
    "color_grey",
    "bright_bg",
    "bright_obj",
    "segmented",
    "transparent",
    "only_fg",
    "no_fg",
    "only_bg_b",
    "only_bg_t",
)
RANDOM = ("color_r", "color_g", "color_b", "rainbow")
NOT_BATCHED = ("random_bg", "mixed_same", "mixed_rand", "mixed_next", "ai_bg")


def _tensor(imgs) -> torch.Tensor:
    return as_batch(np.stack(imgs))


def _masks(masks) -> torch.Tensor:
    return on_device(torch.from_numpy(np.stack(masks)))


@pytest.fixture(scope="module")
def photos(samples_dir):
    """Six real photos prepared as the scene suites do (224x224), each with an irregular
    blob mask; one photo gets a mask touching the border, so ImageNet-9's tiling strip
    is narrow."""
    from robustlab.data.images import read_image

    files = sorted(samples_dir.glob("*.JPEG"))[:6]
    imgs = [prepare(read_image(f).rgb, PROTOCOL) for f in files]
    rng = np.random.default_rng(3)
    masks = [random_blob(224, 224, rng) for _ in imgs]
    masks[-1] = np.zeros((224, 224), bool)
    masks[-1][20:200, 2:215] = True
    ids = [f.name for f in files]
    return imgs, masks, ids


def _both(photos, name: str):
    imgs, masks, ids = photos
    boxes = on_device(torch.tensor([mask_bbox(m) for m in masks]))
    ours = apply(name, "default", _tensor(imgs), ids, masks=_masks(masks), boxes=boxes)
    exact = [
        apply_shift(img, sid, name, "default", 0, {"mask": m})[..., :3]
        for img, m, sid in zip(imgs, masks, ids)
    ]
    return as_images(ours), np.stack(exact)


def test_the_mask_scenes_are_batched_and_the_donor_and_model_ones_are_not():
    for name in XIMAGENET12 + IMAGENET9:
        assert has_batched(name) == (name not in NOT_BATCHED), name
    assert not has_batched("ai_bg")
    taking_masks = {
        sh.name for sh in list_shifts() if get_shift(sh.name, batched=True).batched_needs
    }
    assert set(DETERMINISTIC) | set(RANDOM) == taking_masks
    for name in DETERMINISTIC:
        assert get_shift(name).deterministic, name


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_scenes_match_the_exact_path(photos, name):
    ours, exact = _both(photos, name)
    diff = np.abs(ours.astype(int) - exact)
    # measured on the shared photos: 0 and 0.0 for every scene
    assert diff.max() <= 1 and diff.mean() < 1e-3, (name, diff.max(), diff.mean())
    assert not np.array_equal(exact, np.stack(photos[0])) or name == "only_bg_b"


@pytest.mark.parametrize("name", RANDOM)
def test_random_scenes_fed_the_exact_draws_give_the_exact_pixels(photos, name):
    """The random scenes are split into draw and apply; the replay is the exact scene's
    own draw function, so fed it, the batched apply gives the exact path's image (within
    the one-level HSV allowance of the deterministic scenes), and the torch draws give
    other images."""
    imgs, masks, ids = photos
    x, m = _tensor(imgs), _masks(masks)
    parts = get_shift(name, batched=True).parts
    assert parts is not None and parts.matched_mad == 0
    ours = as_images(apply_matched(name, "default", x, ids, seed=5, masks=m))
    exact = np.stack(
        [
            apply_shift(img, sid, name, "default", 5, {"mask": mk})
            for img, mk, sid in zip(imgs, masks, ids)
        ]
    )
    diff = np.abs(ours.astype(int) - exact)
    # measured on the shared photos: 0 and 0.0 for every random scene
    assert diff.max() <= 1 and diff.mean() < 1e-3, (name, diff.max(), diff.mean())
    assert not np.array_equal(exact, np.stack(imgs))
    assert not np.array_equal(as_images(apply(name, "default", x, ids, seed=5, masks=m)), ours)


@pytest.mark.parametrize("hue", [0, 29, 75, 120, 150, 180])
def test_background_hue_round_trip_matches_opencv(photos, hue):
    from robustlab.shifts.scenes.ximagenet12 import _set_bg_hue

    imgs, masks, _ = photos
    ours = as_images(set_background_hue(_tensor(imgs), _masks(masks), on_device(torch.tensor(hue))))
    exact = [_set_bg_hue(x, m, lambda h: np.full_like(h, hue)) for x, m in zip(imgs, masks)]
    diff = np.abs(ours.astype(int) - np.stack(exact))
    assert diff.max() <= 1 and diff.mean() < 1e-3, (diff.max(), diff.mean())


def _background_hue(img: np.ndarray, mask: np.ndarray) -> int:
    hue = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2HSV)[..., 0][~mask]
    return int(np.bincount(hue).argmax())


@pytest.mark.parametrize("name", ["color_r", "color_b", "rainbow"])
def test_random_scenes_draw_like_the_exact_path(name):
    """200 sample ids on a saturated image: each id's background hue is its draw. Both
    paths' draws lie in the table's range and spread over it alike (uniform: the means
    agree within 4 standard errors, both cover most of the range)."""
    n = 200
    img = np.zeros((16, 16, 3), np.uint8)
    img[..., 0] = 255  # pure red: hue 0, so rainbow's rotated hue is its draw
    mask = np.zeros((16, 16), bool)
    mask[5:10, 5:10] = True
    ids = [f"img{i}.jpg" for i in range(n)]
    x = _tensor([img] * n)
    ours = as_images(apply(name, "default", x, ids, masks=_masks([mask] * n)))
    assert (ours[:, mask] == img[mask]).all()  # the object is untouched
    exact = [apply_shift(img, sid, name, "default", 0, {"mask": mask}) for sid in ids]
    p = get_shift(name).params["default"]
    if name == "rainbow":
        allowed = set(range(p["shift"][0], p["shift"][1] + 1))
    else:
        allowed = {h for lo, hi in p["hue_ranges"] for h in range(lo, hi + 1)}
    allowed |= {h % 180 for h in allowed}  # OpenCV reads hue 180 back as 0
    ranks = sorted(allowed)
    for images in (ours, exact):
        hues = [_background_hue(im, mask) for im in images]
        assert set(hues) <= allowed, sorted(set(hues) - allowed)
        pos = np.array([ranks.index(h) for h in hues], float)
        assert len(set(hues)) > len(allowed) * 0.6
        assert abs(pos.mean() - (len(ranks) - 1) / 2) < 4 * len(ranks) / np.sqrt(12 * n)
    again = apply(name, "default", x[:3], ids[:3], masks=_masks([mask] * 3))
    assert np.array_equal(as_images(again), ours[:3])  # per-id seeds


def test_scenes_need_their_masks_and_boxes(photos):
    imgs, masks, ids = photos
    x = _tensor(imgs[:2])
    with pytest.raises(ValueError, match="masks"):
        apply("blur_bg", "default", x, ids[:2])
    with pytest.raises(ValueError, match="boxes"):
        apply("only_bg_b", "default", x, ids[:2], masks=_masks(masks[:2]))
    with pytest.raises(ValueError, match="bool"):
        apply("blur_bg", "default", x, ids[:2], masks=_masks(np.ones((2, 224, 224), np.uint8)))
    with pytest.raises(ValueError, match=r"masks must be \(2, 224, 224\)"):
        apply("blur_bg", "default", x, ids[:2], masks=_masks(np.ones((2, 64, 64), bool)))


# ------------------------------------------------------- masks through the hand-over


def _folder(tmp_path, samples_dir, masks: list[str]):
    """One photo per entry of ``masks``, with a mask of that kind (``blob``, ``empty``,
    ``full``; anything else: no mask file), in sorted order."""
    import shutil

    from robustlab.data.sources import discover
    from robustlab.masks.io import mask_name, save_mask

    mdir = tmp_path / "masks"
    for k, f in enumerate(sorted(samples_dir.glob("*.JPEG"))[: len(masks)]):
        folder = tmp_path / "data" / f"class{k % 2}"  # two classes: random_bg has donors
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, folder / f.name)
    from PIL import Image

    for s, kind in zip(discover(tmp_path / "data"), masks):
        w, h = Image.open(s.path).size
        m = {"blob": random_blob(h, w, 0), "empty": np.zeros((h, w), bool)}.get(kind)
        if kind == "full":
            m = np.ones((h, w), bool)
        if m is not None:
            save_mask(mdir / mask_name(s.id), m)
    return discover(tmp_path / "data", masks=mdir)


def test_masks_travel_with_the_photos_and_bad_ones_skip_like_the_exact_path(tmp_path, samples_dir):
    from robustlab.models.preprocess import Preprocessing
    from robustlab.execution.device_shifts import DeviceShifts, ShiftDevice
    from robustlab.execution.tasks import CellImages, Task, TaskDataset

    samples = _folder(tmp_path, samples_dir, ["blob", "empty", "full", "none"])
    cells = (("clean", 0), ("blur_bg", "default"), ("only_bg_t", "default"), ("random_bg", "add"))
    tasks = [Task(i, cells) for i in range(len(samples))]
    images = CellImages(PROTOCOL, 0, donors=samples, with_mask=True)
    pre = Preprocessing(224, 1.0, "bilinear", (0.5,) * 3, (0.5,) * 3)  # 224 in: no resize
    exact = TaskDataset(samples, tasks, images, lambda img: torch.from_numpy(img.copy()))
    shifter = DeviceShifts(pre, samples, tasks, PROTOCOL, 0, ShiftDevice("cpu", group=3))
    dataset = shifter.dataset(images)
    ours = list(shifter.wrap(dataset[i] for i in range(len(tasks))))
    assert [o[0] for o in ours] == list(range(len(tasks)))
    for i, (_, tensor, errors, _) in enumerate(ours):
        _, ref, ref_errors, _ = exact[i]
        assert errors == ref_errors, i
        if i == 0:
            assert not errors and tensor.shape[0] == len(cells)
            # blur_bg and only_bg_t batched, random_bg made by the worker: all the exact pixels
            assert torch.equal(tensor, ref.permute(0, 3, 1, 2))
    reasons = {r for _, _, errs, _ in ours for _, r in errs}
    assert {
        "blur_bg/default: mask is empty (no foreground pixels)",
        "blur_bg/default: mask is full (no background pixels)",
        "blur_bg/default: blur_bg needs mask in its context",
    } <= reasons
