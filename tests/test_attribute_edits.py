"""ImageNet-E weights-free attribute edits: size, position, direction, hole fill."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from robustlab.data.sources import Sample
from robustlab.errors import MissingResourceError
from robustlab.pipeline import apply_shift, load_prepared
from robustlab.shifts import get_shift, list_shifts
from robustlab.shifts.attributes import EDITS, describe_hole_fill
from robustlab.shifts.attributes import fill as fillmod
from robustlab.shifts.attributes.position import position_levels
from robustlab.shifts.attributes.size import mask_u8, rescale, size_levels
from robustlab.suites import IMAGENET_E_PROTOCOL, get_suite


@pytest.fixture(scope="module")
def demo():
    """The six demo photos (real photos with checked-in masks) on ImageNet-E's 256x256 frame."""
    from robustlab.workflows.demo import demo_photos

    out = {}
    for ph in demo_photos():
        s = Sample(ph.id, ph.source, ph.class_name, mask_path=ph.mask)
        p = load_prepared(s, IMAGENET_E_PROTOCOL, with_mask=True)
        out[ph.id] = (p.rgb, p.mask > 0)
    return out


@pytest.fixture
def synthetic():
    """A flat background and a small textured object (unique colours) off-centre."""
    rng = np.random.default_rng(3)
    x = np.empty((96, 96, 3), np.uint8)
    x[:] = (90, 140, 200)
    m = np.zeros((96, 96), bool)
    m[20:44, 14:30] = True
    x[m] = rng.integers(0, 60, (int(m.sum()), 3))  # dark texture, far from the background
    return x, m


BG = np.array((90, 140, 200))


def _near_bg(pixels) -> np.ndarray:
    """Per pixel: within 4 levels of the flat background (OpenCV's fill is near, not exact)."""
    return (np.abs(pixels.astype(int) - BG) <= 4).all(axis=-1)


def _rate(mask):
    """Independent object pixel rate: largest component's box by area (scipy, not OpenCV)."""
    lab, n = ndimage.label(mask, structure=np.ones((3, 3)))
    boxes = ndimage.find_objects(lab)
    ys, xs = max(boxes, key=lambda b: (b[0].stop - b[0].start) * (b[1].stop - b[1].start))
    return mask[ys, xs].sum() / mask.size


def _edit(x, m, name, level, seed=0, **ctx):
    attrs = {}
    out = apply_shift(x, "s/1.png", name, level, seed, {"mask": m, "attributes": attrs, **ctx})
    return out, attrs


def test_registered_in_the_imagenet_e_suite():
    names = {s.name for s in list_shifts(tag="imagenet-e")}
    assert set(EDITS) <= names
    suite = get_suite("imagenet-e")
    assert set(EDITS) <= set(suite.shifts)
    assert get_shift("obj_size").levels == ("0.10", "0.08", "0.05")
    assert get_shift("obj_direction").levels == ("45", "90", "180", "random")
    for name in EDITS:
        assert "mask" in get_shift(name).needs and get_shift(name).family == "attribute"


@pytest.mark.parametrize("level", ["0.10", "0.08", "0.05"])
def test_size_hits_targets_on_real_photos(demo, level):
    p = get_shift("obj_size").params[level]
    reached = 0
    for sid, (x, m) in demo.items():
        try:
            r = rescale(x, mask_u8(m), p["target"])
        except ValueError as exc:  # the official code copies the original then
            assert "cannot reach" in str(exc) or "did not reach" in str(exc)
            out, attrs = _edit(x, m, "obj_size", level)
            np.testing.assert_array_equal(out, x)
            assert attrs["edited"] == 0 and attrs["steps"] == -1
            continue
        reached += 1
        # The official stop rule: within the tolerance, or floor(100 * rate) on target.
        rate = _rate(r.mask > 127)
        assert (
            abs(rate - p["target"]) <= p["tolerance"] + 1e-9
            or np.floor(rate * 100) == p["target"] * 100
        ), sid
        assert r.rate == pytest.approx(rate)
        out, attrs = _edit(x, m, "obj_size", level)
        assert attrs["object_rate"] == pytest.approx(rate, abs=1e-6)
        assert attrs["steps"] == r.steps and attrs["fill"] == "patchmatch"
        assert attrs["edited"] == 1 and attrs["how"] == r.how
        # Object pixels: the official resampled layer wherever its mask is non-zero.
        paste = r.mask > 0
        np.testing.assert_array_equal(out[paste], r.image[paste])
        if r.steps and p["target"] < _rate(m):  # shrunk: the uncovered rim is filled
            gone = m & ~paste
            assert (out[gone] != x[gone]).any(axis=1).mean() > 0.5
    assert reached >= 5


def test_size_past_the_maximum_zooms_to_the_maximum(synthetic):
    x, _ = synthetic
    # A thin ring can never cover 90% of the frame: the official code then stretches its
    # box over the whole frame (the object at its largest) instead of iterating.
    yy, xx = np.mgrid[:96, :96]
    r = np.hypot(yy - 40, xx - 50)
    m = (r > 20) & (r < 23)
    res = rescale(x, mask_u8(m), 0.9)
    assert res.how == "maximum" and res.steps == 0
    big = res.mask > 127
    assert big[0].any() and big[-1].any() and big[:, 0].any() and big[:, -1].any()
    assert res.rate == pytest.approx(_rate(big)) and res.rate < 0.9
    out, attrs = _edit(x, m, "obj_size", "0.10")  # reachable: iterates
    assert attrs["how"] == "iterate" and attrs["edited"] == 1


def test_size_unreachable_is_the_official_copy_or_a_skip(demo):
    x, m = demo["tripod/camera.png"]
    # The tripod's rate stalls below 0.3 when grown (its box runs into the frame's edges).
    with pytest.raises(ValueError, match="cannot reach|did not reach"):
        rescale(x, mask_u8(m), 0.3)
    shift = get_shift("obj_size")
    official = size_levels((0.3,))["0.30"]
    assert official["unreachable"] == "copy"
    attrs = {}
    out = shift.fn(x, official, np.random.default_rng(0), {"mask": m, "attributes": attrs})
    np.testing.assert_array_equal(out, x)
    assert "copied" in attrs["note"] and attrs["edited"] == 0
    assert attrs["object_rate"] == pytest.approx(_rate(m), abs=1e-6)
    skip = size_levels((0.3,), unreachable="skip")["0.30"]
    with pytest.raises(ValueError, match="cannot reach|did not reach"):
        shift.fn(x, skip, np.random.default_rng(0), {"mask": m})
    with pytest.raises(ValueError, match="skip|copy"):
        size_levels((0.1,), unreachable="ignore")


def test_position_moves_object_pixels_exactly_and_fills_the_hole(synthetic):
    x, m = synthetic
    full = position_levels(None)["random"]  # no base rate: the object moves at full size
    for seed in range(5):
        attrs = {}
        out = get_shift("obj_position").fn(
            x, full, np.random.default_rng(seed), {"mask": m, "attributes": attrs}
        )
        dx, dy = attrs["dx"], attrs["dy"]
        nx, ny = 14 + dx, 20 + dy
        assert 0 <= nx <= 96 - 16 and 0 <= ny <= 96 - 24
        np.testing.assert_array_equal(out[ny : ny + 24, nx : nx + 16], x[20:44, 14:30])
        moved = np.zeros_like(m)
        moved[ny : ny + 24, nx : nx + 16] = True
        # Everything else is background colour: the old place is filled, not left dark.
        assert _near_bg(out[~moved]).all()
        assert (attrs["box_x"], attrs["box_y"]) == (nx, ny) and attrs["shrunk"] == 0


def test_position_shrinks_to_the_base_rate_first(demo):
    x, m = demo["espresso/coffee.png"]
    assert get_shift("obj_position").params["random"]["base_rate"] == 0.05
    out, attrs = _edit(x, m, "obj_position", "random", seed=2)
    assert attrs["shrunk"] == 1 and attrs["edited"] == 1
    # The moved object has the size edit's 0.05 rate (moving keeps the box's pixels).
    assert attrs["object_rate"] == pytest.approx(rescale(x, mask_u8(m), 0.05).rate, abs=1e-6)
    assert attrs["rate_before"] > 0.2


def test_position_is_seeded(demo):
    x, m = demo["rocket/rocket.jpg"]
    a, _ = _edit(x, m, "obj_position", "random", seed=1)
    b, _ = _edit(x, m, "obj_position", "random", seed=1)
    np.testing.assert_array_equal(a, b)
    moves = {
        tuple(_edit(x, m, "obj_position", "random", seed=s)[1][k] for k in ("dx", "dy"))
        for s in range(6)
    }
    assert len(moves) > 3


@pytest.mark.parametrize("level,k", [("90", 1), ("180", 2)])
def test_right_angle_rotation_moves_object_pixels_exactly(synthetic, level, k):
    x, m = synthetic
    out, attrs = _edit(x, m, "obj_direction", level)
    rm = np.rot90(m, k)  # Pillow's positive angle is counter-clockwise, like rot90
    np.testing.assert_array_equal(out[rm], np.rot90(x, k)[rm])
    assert _near_bg(out[~rm]).all()
    assert attrs["angle"] == float(level)


def test_oblique_rotation_copies_object_pixels_and_fills_the_rest(synthetic):
    x, m = synthetic
    out, attrs = _edit(x, m, "obj_direction", "45")
    bg = _near_bg(out)
    colours = {tuple(c) for c in x[m]}
    obj = out[~bg]
    # Nearest-neighbour rotation: each object pixel is one of the original object's pixels,
    # and about as many as before; everything else is filled background (no dark hole).
    assert all(tuple(c) in colours for c in obj)
    assert abs(len(obj) - m.sum()) <= 0.1 * m.sum()
    assert bg[m].any() and attrs["angle"] == 45.0


def test_random_direction_is_on_the_grid_and_seeded(demo):
    x, m = demo["tripod/camera.png"]
    angles = [_edit(x, m, "obj_direction", "random", seed=s)[1]["angle"] for s in range(8)]
    assert all(-180 <= a <= 180 and a % 10 == 0 for a in angles) and len(set(angles)) > 3
    a, _ = _edit(x, m, "obj_direction", "random", seed=7)
    b, _ = _edit(x, m, "obj_direction", "random", seed=7)
    np.testing.assert_array_equal(a, b)


def test_attributes_record_complexity(demo):
    x, m = demo["motorcycle/motorcycle_left.png"]
    out, attrs = _edit(x, m, "obj_size", "0.05")
    from robustlab.shifts.attributes import hf_complexity

    # The paper's measure: mean |FFT2| of the image in [0, 1] over H and W.
    reference = np.abs(np.fft.fft2(x / 255.0, axes=(0, 1))).mean()
    assert hf_complexity(x) == pytest.approx(reference, rel=1e-5)
    assert attrs["hf_before"] == pytest.approx(hf_complexity(x), rel=1e-5)
    assert attrs["hf_after"] == pytest.approx(hf_complexity(out), rel=1e-5)
    # A small object on a smooth fill has less high-frequency content than the photo.
    assert attrs["hf_after"] < attrs["hf_before"]
    flat = np.full((64, 64, 3), 128, np.uint8)
    noisy = np.random.default_rng(0).integers(0, 256, (64, 64, 3)).astype(np.uint8)
    assert hf_complexity(noisy) > hf_complexity(flat)


BAD_MASKS = {
    "empty": lambda m: np.zeros_like(m),
    "full": lambda m: np.ones_like(m),
    "other size": lambda m: np.zeros((50, 60), bool),
}


@pytest.mark.parametrize("name", EDITS)
@pytest.mark.parametrize("case", sorted(BAD_MASKS))
def test_bad_masks_are_one_line_errors(synthetic, name, case):
    x, m = synthetic
    with pytest.raises(ValueError) as info:
        _edit(x, BAD_MASKS[case](m), name, get_shift(name).levels[0])
    assert "\n" not in str(info.value) and "mask" in str(info.value)


@pytest.mark.parametrize("name", EDITS)
def test_missing_mask_is_a_value_error(synthetic, name):
    x, _ = synthetic
    with pytest.raises(ValueError, match="needs mask"):
        apply_shift(x, "s", name, get_shift(name).levels[0], 0, {})


def test_object_touching_every_border_stays_in_place(synthetic):
    x, _ = synthetic
    m = np.zeros((96, 96), bool)
    m[:, 30:60] = True
    m[40:50, :] = True  # a cross touching all four borders: its box is the whole frame
    attrs = {}
    out = get_shift("obj_position").fn(
        x,
        position_levels(None)["random"],
        np.random.default_rng(0),
        {"mask": m, "attributes": attrs},
    )
    # As the official randint(0, 0): the object stays, pasted on the filled background.
    assert (attrs["dx"], attrs["dy"]) == (0, 0)
    np.testing.assert_array_equal(out[m], x[m])


def test_hole_fill_backends(synthetic, monkeypatch):
    x, m = synthetic
    default = describe_hole_fill()
    assert default["backend"] == "patchmatch" and len(default["fingerprint"]) == 16
    telea, ns = describe_hole_fill("telea"), describe_hole_fill("ns")
    assert telea["backend"] == "opencv-telea"
    assert len({default["fingerprint"], telea["fingerprint"], ns["fingerprint"]}) == 3
    monkeypatch.setenv(fillmod.ENV_FILL, "telea")
    _, attrs = _edit(x, m, "obj_direction", "90")
    assert attrs["fill"] == "opencv-telea"
    monkeypatch.setenv(fillmod.ENV_FILL, "ns")
    _, attrs = _edit(x, m, "obj_direction", "90")
    assert attrs["fill"] == "opencv-ns"
    monkeypatch.setenv(fillmod.ENV_FILL, "tfill")
    with pytest.raises(ValueError, match="ROBUSTLAB_EDIT_FILL: unknown value .tfill."):
        _edit(x, m, "obj_direction", "90")
    monkeypatch.setenv(fillmod.ENV_FILL, "diffusers")
    monkeypatch.delenv("ROBUSTLAB_INPAINTER", raising=False)
    with pytest.raises(MissingResourceError, match="ROBUSTLAB_INPAINTER"):
        describe_hole_fill()
    with pytest.raises(MissingResourceError, match="ROBUSTLAB_INPAINTER"):
        _edit(x, m, "obj_direction", "90")


def test_the_registry_is_the_one_record_of_the_hole_fill(monkeypatch):
    # generate and evaluate record whatever describe_resources returns; the edits depend on
    # the fill backend without naming it in ``needs``, so it must come from ``used_by``
    from robustlab.shifts.registry import describe_resources, get_resource, recorded_resources

    monkeypatch.delenv(fillmod.ENV_FILL, raising=False)
    edits = [get_shift(n) for n in EDITS]
    assert recorded_resources(edits) == ["hole_fill"]
    assert recorded_resources([get_shift("gaussian_noise")]) == []
    assert recorded_resources([get_shift("ai_bg")]) == ["inpainter"]
    rec = describe_hole_fill()
    assert describe_resources([get_shift("obj_size"), get_shift("gaussian_noise")]) == {
        "hole_fill": rec
    }
    # a cell names the backend (older manifests' format, part of the cell's identity);
    # a checkpoint's cell holds its fingerprint only
    assert get_resource("hole_fill").cell_value(rec) == f"patchmatch {rec['fingerprint']}"
    assert get_resource("inpainter").cell_value({"path": "/x", "fingerprint": "ab"}) == "ab"


class _FlatInpainter:
    """The Inpainter call: repaints outside ``keep`` with one colour; remembers the seeds."""

    def __init__(self):
        self.seeds = []

    def __call__(self, image, keep, *, seed, **kw):
        self.seeds.append(seed)
        return np.where(keep[..., None], image, np.uint8(7)).astype(np.uint8)


def test_inpainter_object_is_used_as_the_fill_with_a_seeded_draw(synthetic):
    x, m = synthetic
    inp = _FlatInpainter()
    out, attrs = _edit(x, m, "obj_direction", "180", seed=3, hole_fill=inp)
    _edit(x, m, "obj_direction", "180", seed=3, hole_fill=inp)
    _edit(x, m, "obj_direction", "180", seed=4, hole_fill=inp)
    assert attrs["fill"] == "diffusers"
    assert inp.seeds[0] == inp.seeds[1] != inp.seeds[2]
    rm = np.rot90(m, 2)
    hole = fillmod.hole_mask(m, fillmod.SETTINGS["diffusers"]["dilate"])
    assert (out[hole & ~rm] == 7).all()  # the uncovered object region is repainted
    np.testing.assert_array_equal(out[~hole & ~rm], x[~hole & ~rm])  # background kept


def _local_std(img, region):
    """Median over ``region`` of the grey level's standard deviation in a 7x7 window."""
    g = img.astype(np.float64).mean(axis=-1)
    mean = ndimage.uniform_filter(g, 7)
    var = ndimage.uniform_filter(g * g, 7) - mean**2
    return float(np.median(np.sqrt(np.maximum(var, 0))[region]))


def test_exemplar_fill_keeps_the_background_texture_where_telea_draws_smooth_streaks():
    # Fine grain all over (sigma 20 grey levels) and a large round hole: Telea's
    # fast-marching fill propagates smoothed boundary colours inwards (the radial streaks),
    # the exemplar fill copies the grain itself.
    rng = np.random.default_rng(5)
    x = np.clip(128 + rng.normal(0, 20, (128, 128, 1)), 0, 255).repeat(3, -1).astype(np.uint8)
    yy, xx = np.mgrid[:128, :128]
    m = (yy - 64) ** 2 + (xx - 64) ** 2 < 40**2
    hole = fillmod.hole_mask(m, fillmod.SETTINGS["patch"]["dilate"])
    inner = ndimage.binary_erosion(hole, iterations=6)
    bg = _local_std(x, ~hole)
    out = {b: fillmod.fill_background(x, m, None, {"hole_fill": b})[0] for b in ("patch", "telea")}
    assert _local_std(out["telea"], inner) < 0.3 * bg
    assert _local_std(out["patch"], inner) > 0.6 * bg
    for b in out:  # the background itself is never touched
        assert np.array_equal(out[b][~hole], x[~hole])


def test_exemplar_fill_is_deterministic_and_only_copies_background(demo):
    from robustlab.shifts.attributes.patchfill import patch_fill

    x, m = demo["motorcycle/motorcycle_left.png"]
    hole = fillmod.hole_mask(m, 3)
    a = patch_fill(x, hole, seed=0)
    assert np.array_equal(a, patch_fill(x, hole, seed=0))
    assert np.array_equal(a[~hole], x[~hole])
    # the object's own colours do not come back: its reddest pixels (the tank) are gone
    red = (x[..., 0].astype(int) - x[..., 1:].max(-1)) > 80
    assert (
        red[m].sum() > 500 and ((a[..., 0].astype(int) - a[..., 1:].max(-1)) > 80)[hole].sum() < 50
    )
    # another seed gives another (equally valid) fill: the seed is a recorded setting
    assert not np.array_equal(a, patch_fill(x, hole, seed=1))


def test_exemplar_fill_falls_back_to_telea_without_background_patches():
    # a 4-pixel frame of background holds no whole 7x7 patch to copy
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (64, 64, 3)).astype(np.uint8)
    m = np.ones((64, 64), bool)
    m[:8], m[-8:], m[:, :8], m[:, -8:] = False, False, False, False
    out, used = fillmod.fill_background(x, m, None, {"hole_fill": "patch"})
    assert used == "opencv-telea (patchmatch fallback)"
    assert np.array_equal(out, fillmod.fill_background(x, m, None, {"hole_fill": "telea"})[0])
