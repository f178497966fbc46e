"""XIMAGENET-12 and ImageNet-9 scenarios: each keeps exactly the pixels its definition keeps."""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import pytest

from robustlab.seeding import make_rng
from robustlab.shifts import get_shift, list_shifts
from robustlab.shifts.scenes import (
    IMAGENET9,
    XIMAGENET12,
    DonorIndex,
    choose_donor,
    matte,
    moved_mask,
)
from robustlab.shifts.scenes._common import tile_fill

ALL = XIMAGENET12 + IMAGENET9
CELLS = [(n, lv) for n in ALL for lv in get_shift(n).levels]


def _load(samples_dir, name):
    from PIL import Image

    img = Image.open(samples_dir / name).convert("RGB").resize((224, 224), Image.BILINEAR)
    return np.asarray(img).copy()


def _blob(h, w, cy, cx, ry, rx):
    yy, xx = np.mgrid[:h, :w]
    return ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1.0


@pytest.fixture(scope="module")
def scene(samples_dir, photo):
    """A real photo, an object mask on it, and a real donor photo with its own mask."""
    names = sorted(p.name for p in samples_dir.glob("*.JPEG"))
    donor = _load(samples_dir, names[37])
    mask = _blob(224, 224, 120, 100, 60, 80)
    donor_mask = _blob(224, 224, 100, 140, 50, 40)
    return photo, mask, donor, donor_mask


def _ctx(scene, **kw):
    x, m, d, dm = scene
    ctx = {"mask": m.astype(np.uint8) * 255, "background": d, "background_mask": dm}
    ctx.update(kw)
    return ctx


def _run(name, level, scene, seed=0, **kw):
    return get_shift(name).apply(scene[0], level, make_rng(seed), _ctx(scene, **kw))


def test_registered_with_suite_tags():
    # ai_bg (diffusion inpainting, tests/test_inpaint.py) is the suite's thirteenth scenario
    assert tuple(s.name for s in list_shifts(tag="ximagenet12")) == XIMAGENET12 + ("ai_bg",)
    assert tuple(s.name for s in list_shifts(tag="imagenet9")) == IMAGENET9
    from robustlab.suites import get_suite

    assert len(get_suite("ximagenet12").cells()) == 14
    assert len(get_suite("imagenet9").cells()) == 7
    for n in ALL:
        assert "mask" in get_shift(n).needs


@pytest.mark.parametrize("name", [n for n in ALL if not get_shift(n).deterministic])
def test_random_scenarios_make_every_choice_in_their_draw(scene, name):
    """The entry's draw is all the randomness the shift uses: after the draw, the cell's
    generator is where the shift leaves it; so whoever calls the draw (the batched
    replay, the moved object's mask) gets the choices the pixels were made with."""
    sh = get_shift(name)
    assert sh.draw is not None, name
    for level in sh.levels:
        for seed in range(4):
            after_shift, after_draw = make_rng(seed), make_rng(seed)
            sh.apply(scene[0], level, after_shift, _ctx(scene))
            draws = sh.draw(scene[0], sh.params[level], after_draw, _ctx(scene))
            assert draws and all(isinstance(v, (int, tuple)) for v in draws.values())
            assert after_shift.bit_generator.state == after_draw.bit_generator.state


def test_colour_scenes_use_their_drawn_hue(scene):
    x, m = scene[0], scene[1]
    for name in ("color_r", "color_g", "color_b"):
        sh = get_shift(name)
        hue = sh.draw(x, sh.params["default"], make_rng(4), {})["hue"]
        out = _run(name, "default", scene, seed=4)
        hsv = cv2.cvtColor(out, cv2.COLOR_RGB2HSV)[~m]
        saturated = hsv[(hsv[:, 1] > 100) & (hsv[:, 2] > 100), 0]  # grey pixels have no hue
        assert int(np.bincount(saturated).argmax()) == hue % 180, name


def test_blur_bg_and_blur_obj(scene):
    x, m = scene[0], scene[1]
    blurred = cv2.GaussianBlur(x, (15, 15), 3)
    bg = _run("blur_bg", "default", scene)
    np.testing.assert_array_equal(bg[m], x[m])
    np.testing.assert_array_equal(bg[~m], blurred[~m])
    obj = _run("blur_obj", "default", scene)
    np.testing.assert_array_equal(obj[~m], x[~m])
    np.testing.assert_array_equal(obj[m], blurred[m])


def test_color_grey(scene):
    x, m = scene[0], scene[1]
    out = _run("color_grey", "default", scene)
    np.testing.assert_array_equal(out[m], x[m])
    bg = out[~m].astype(int)
    assert (bg[:, 0] == bg[:, 1]).all() and (bg[:, 1] == bg[:, 2]).all()


@pytest.mark.parametrize(
    "name,ranges",
    [
        ("color_r", [(0, 29), (150, 180)]),
        ("color_g", [(30, 89)]),
        ("color_b", [(90, 149)]),
    ],
)
def test_background_hue_in_range(scene, name, ranges):
    x, m = scene[0], scene[1]
    for seed in range(4):
        out = _run(name, "default", scene, seed=seed)
        np.testing.assert_array_equal(out[m], x[m])
        hsv = cv2.cvtColor(out, cv2.COLOR_RGB2HSV)
        sat = (~m) & (hsv[..., 1] > 60) & (hsv[..., 2] > 60)
        hues = hsv[..., 0][sat].astype(int)
        assert hues.size > 500
        med = int(np.median(hues))
        # uint8 HSV round trips move a hue by a unit or two at most
        assert any(lo - 2 <= med <= hi + 2 for lo, hi in ranges) or (
            name == "color_r" and med >= 178
        )
        assert np.percentile(np.abs(hues - med), 90) <= 3


def test_rainbow_rotates_background_hue(scene):
    x, m = scene[0], scene[1]
    out = _run("rainbow", "default", scene, seed=3)
    np.testing.assert_array_equal(out[m], x[m])
    h0 = cv2.cvtColor(x, cv2.COLOR_RGB2HSV)[..., 0].astype(int)
    h1 = cv2.cvtColor(out, cv2.COLOR_RGB2HSV)[..., 0].astype(int)
    sat = (~m) & (cv2.cvtColor(x, cv2.COLOR_RGB2HSV)[..., 1] > 80)
    d = (h1[sat] - h0[sat]) % 180
    shift = int(np.median(d))
    assert 0 <= shift <= 92
    assert np.mean(np.minimum(np.abs(d - shift), 180 - np.abs(d - shift)) <= 3) > 0.9


def test_bright_bg_and_obj(scene):
    x, m = scene[0], scene[1]
    ref = cv2.addWeighted(x, 1.5, cv2.GaussianBlur(x, (9, 9), 0), 0.9, 1.9)
    out = _run("bright_bg", "default", scene)
    np.testing.assert_array_equal(out[m], x[m])
    np.testing.assert_array_equal(out[~m], ref[~m])
    assert out[~m].mean() > x[~m].mean()
    out = _run("bright_obj", "default", scene)
    np.testing.assert_array_equal(out[~m], x[~m])
    np.testing.assert_array_equal(out[m], ref[m])


def test_segmented_only_fg_no_fg(scene):
    x, m = scene[0], scene[1]
    seg = _run("segmented", "default", scene)
    assert (seg[~m] == 0).all()
    np.testing.assert_array_equal(seg[m], x[m])
    np.testing.assert_array_equal(_run("only_fg", "default", scene), seg)
    nofg = _run("no_fg", "default", scene)
    assert (nofg[m] == 0).all()
    np.testing.assert_array_equal(nofg[~m], x[~m])


def test_transparent_rgba_and_matte(scene):
    x, m = scene[0], scene[1]
    out = _run("transparent", "default", scene)
    np.testing.assert_array_equal(out[..., 3], np.where(m, 255, 0))
    np.testing.assert_array_equal(out[..., :3][m], x[m])
    assert (out[..., :3][~m] == 255).all()
    np.testing.assert_array_equal(matte(out), out[..., :3])
    assert (matte(out, (0, 0, 0))[~m] == 0).all()


@pytest.mark.parametrize("level", ["add", "paste"])
def test_random_bg_moves_object_onto_donor(scene, level):
    x, m, donor = scene[0], scene[1], scene[2]
    out = _run("random_bg", level, scene, seed=11)
    sh = get_shift("random_bg")
    offset = sh.draw(x, sh.params[level], make_rng(11), {"mask": m})["offset"]
    moved = moved_mask(m, offset)
    assert moved.sum() == m.sum() and offset != (0, 0)
    np.testing.assert_array_equal(out[~moved], donor[~moved])
    if level == "paste":
        np.testing.assert_array_equal(out[moved], x[m])
    else:
        expect = np.minimum(donor[moved].astype(int) + x[m].astype(int), 255)
        np.testing.assert_array_equal(out[moved], expect)
    # different seeds move the object to different places
    shifts = {sh.draw(x, sh.params[level], make_rng(s), {"mask": m})["offset"] for s in range(8)}
    assert len(shifts) > 1


def test_random_bg_resizes_donor(scene):
    big = cv2.resize(scene[2], (300, 260))
    out = _run("random_bg", "paste", scene, seed=1, background=big)
    assert out.shape == (224, 224, 3)


def test_only_bg_b_and_bbox_override(scene):
    x, m = scene[0], scene[1]
    ys, xs = np.nonzero(m)
    out = _run("only_bg_b", "default", scene)
    box = np.zeros_like(m)
    box[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1] = True
    assert (out[box] == 0).all()
    np.testing.assert_array_equal(out[~box], x[~box])
    out2 = _run("only_bg_b", "default", scene, bbox=(10, 20, 50, 40))
    assert (out2[20:40, 10:50] == 0).all() and out2[:20].tolist() == x[:20].tolist()


def test_only_bg_t_tiles_largest_strip(scene):
    x, m = scene[0], scene[1]
    ys, xs = np.nonzero(m)
    x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
    out = _run("only_bg_t", "default", scene)
    box = np.zeros_like(m)
    box[y0:y1, x0:x1] = True
    np.testing.assert_array_equal(out[~box], x[~box])
    # the strips: top y0*224, bottom (224-y1)*224, left 224*x0, right 224*(224-x1)
    areas = {
        "top": y0 * 224,
        "bottom": (224 - y1) * 224,
        "left": x0 * 224,
        "right": (224 - x1) * 224,
    }
    best = max(areas, key=areas.get)
    tex = {"top": x[:y0], "bottom": x[y1:], "left": x[:, :x0], "right": x[:, x1:]}[best]
    th, tw = tex.shape[:2]
    fill = out[y0:y1, x0:x1]
    for i, j in [(0, 0), (y1 - y0 - 1, x1 - x0 - 1), (th + 1, tw + 3)]:
        if i < fill.shape[0] and j < fill.shape[1]:
            np.testing.assert_array_equal(fill[i, j], tex[i % th, j % tw])


def test_only_bg_t_full_box_is_an_error(scene):
    with pytest.raises(ValueError, match="no background texture"):
        _run("only_bg_t", "default", scene, bbox=(0, 0, 224, 224))


@pytest.mark.parametrize("name", ["mixed_same", "mixed_rand", "mixed_next"])
def test_mixed_pastes_object_on_donor_texture(scene, name):
    x, m, donor, dm = scene
    out = _run(name, "default", scene)
    np.testing.assert_array_equal(out[m], x[m])
    ys, xs = np.nonzero(dm)
    bg = tile_fill(donor, (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1))
    np.testing.assert_array_equal(out[~m], bg[~m])
    assert get_shift(name).extra["donor_rule"] in ("same", "random", "next")


# ------------------------------------------------------------------ bad input
def _bad_ctxs(scene):
    m = scene[1]
    return {
        "wrong size": (dict(mask=m[:100]), "is 224x100 but the image is 224x224"),
        "empty": (dict(mask=np.zeros_like(m)), "empty"),
        "full": (dict(mask=np.ones_like(m)), "full"),
        "3-D": (dict(mask=np.dstack([m, m, m])), "2-D"),
        "missing": (dict(mask=None), "needs mask"),
    }


@pytest.mark.parametrize("name,level", CELLS)
@pytest.mark.parametrize("case", ["wrong size", "empty", "full", "3-D", "missing"])
def test_bad_mask_is_a_clear_value_error(scene, name, level, case):
    kw, msg = _bad_ctxs(scene)[case]
    with pytest.raises(ValueError, match=msg):
        _run(name, level, scene, **kw)


def test_direct_call_without_mask_is_a_value_error(scene):
    shift = get_shift("blur_bg")
    with pytest.raises(ValueError, match="mask is missing"):
        shift.fn(scene[0], shift.params["default"], make_rng(0), {})


@pytest.mark.parametrize("name", ["mixed_same", "random_bg"])
def test_missing_or_bad_donor(scene, name):
    level = get_shift(name).levels[0]
    with pytest.raises(ValueError, match="background"):
        _run(name, level, scene, background=None)
    with pytest.raises(ValueError, match="background"):
        _run(name, level, scene, background=scene[2].astype(np.float32))
    if name == "mixed_same":
        with pytest.raises(ValueError, match="background_mask is empty"):
            _run(name, level, scene, background_mask=np.zeros((50, 50), bool))
        # the donor's box alone is enough for the tiling
        out = _run(
            name,
            level,
            scene,
            background_mask=np.zeros((224, 224), bool),
            background_bbox=(100, 50, 224, 150),
        )
        bg = tile_fill(scene[2], (100, 50, 224, 150))
        np.testing.assert_array_equal(out[~scene[1]], bg[~scene[1]])


# ------------------------------------------------------------------ donors
@dataclass(frozen=True)
class S:
    id: str
    class_name: str | None
    label: int | None = None
    mask_path: str | None = "m.png"


POOL = [S(f"{c}/{i}.jpg", c) for c in ("ant", "bee", "cat") for i in range(4)] + [
    S("dog/0.jpg", "dog")
]


def test_choose_donor_rules():
    me = POOL[1]  # ant/1
    for seed in range(20):
        d = choose_donor(POOL, me, "same", make_rng(seed))
        assert d.class_name == "ant" and d.id != me.id
        r = choose_donor(POOL, me, "random", make_rng(seed))
        assert r.class_name != "ant"
        n = choose_donor(POOL, me, "next", make_rng(seed))
        assert n.class_name == "bee"
    assert choose_donor(POOL, POOL[-1], "next", make_rng(0)).class_name == "ant"  # wraps
    seen = {choose_donor(POOL, me, "random", make_rng(s)).class_name for s in range(60)}
    assert seen == {"bee", "cat", "dog"}
    # same seed, same donor; independent of the order samples come in
    idx = DonorIndex(list(reversed(POOL)))
    assert idx.choose(me, "random", make_rng(9)) == choose_donor(POOL, me, "random", make_rng(9))


def test_choose_donor_errors():
    with pytest.raises(ValueError, match="no other sample of class 'dog'"):
        choose_donor(POOL, POOL[-1], "same", make_rng(0))
    with pytest.raises(ValueError, match="unknown donor rule"):
        choose_donor(POOL, POOL[0], "nearest", make_rng(0))
    with pytest.raises(ValueError, match="two classes"):
        choose_donor(POOL[:4], POOL[0], "random", make_rng(0))
    with pytest.raises(ValueError, match="no class name or label"):
        choose_donor([S("a", None)], S("a", None), "same", make_rng(0))
    no_masks = [S(s.id, s.class_name, mask_path=None) if s.class_name == "bee" else s for s in POOL]
    d = choose_donor(
        no_masks, POOL[0], "next", make_rng(0), eligible=lambda s: s.mask_path is not None
    )
    assert d.class_name == "cat"  # bee has no masked donor, so the next eligible class
