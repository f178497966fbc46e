"""Batched torch corruptions (``--shift-device``) against the exact path, on CPU tensors.

The contract is statistical (the draws come from torch, not numpy): per corruption the
torch images must sit as close to the exact ones as two exact draws sit to each other,
change the image as much, and order the levels the same way. The deterministic parts
(pixelate, JPEG, the Pillow resize, the glass-blur copy chain for given offsets and its
Gaussian, the motion-blur taps for a given angle, snow's zoom and grey, the reflect-mode
Gaussian) are checked value for value.
The full check with lite0 on 500 photos is benchmarks/torch_shifts.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from conftest import as_batch, as_images, on_device, skip_unless_opencv_fuses
from PIL import Image

from robustlab.pipeline import apply_shift, as_stored, load_prepared
from robustlab.shifts.batched import apply, has_batched, jpeg_roundtrip
from robustlab.shifts.corruptions import list_corruptions
from robustlab.shifts.registry import get_shift
from robustlab.suites import IMAGENET_C_PROTOCOL, Protocol

ALL = list_corruptions("all")
LEVELS = (1, 2, 3, 4, 5)
SMALL = Protocol(resize=73, crop=64)
TINY = Protocol(resize=55, crop=48)
DETERMINISTIC = (
    "defocus_blur",
    "zoom_blur",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
    "gaussian_blur",
    "saturate",
)
# Thousands of independent draws per image: two draws' images are almost equally far apart.
PER_PIXEL = ("gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "glass_blur")
# A handful of draws (an angle, a texture and its crop, a fractal, a warp) decide the image.
FEW_DRAWS = ("motion_blur", "snow", "frost", "fog", "elastic_transform")


def _tensor(imgs: np.ndarray) -> torch.Tensor:
    """CPU tensors for the runner's side (its ShiftDevice is the CPU's)."""
    return torch.from_numpy(np.ascontiguousarray(imgs)).permute(0, 3, 1, 2).contiguous()


@pytest.fixture(scope="module")
def prepared(samples_dir):
    """Two real photos at 64x64, each under two sample ids (two draws per photo)."""
    return _photos(samples_dir, SMALL, 2, 2)


@pytest.fixture(scope="module")
def draws(samples_dir):
    """One real photo at 48x48 under 16 sample ids: 16 draws of every random choice."""
    return _photos(samples_dir, TINY, 1, 16)


def _photos(samples_dir, protocol, n_photos: int, n_draws: int):
    from robustlab.data.sources import discover

    samples = list(discover(samples_dir, labels_csv=samples_dir / "labels.csv"))
    picked = samples[:: max(1, len(samples) // n_photos)][:n_photos]
    photos = [load_prepared(s, protocol).rgb for s in picked]
    imgs = np.stack([p for p in photos for _ in range(n_draws)])
    ids = [f"photo{i // n_draws}/draw{i % n_draws}.jpg" for i in range(len(imgs))]
    return imgs, ids


def _changes(imgs, ids, names) -> dict:
    """(name, level) -> (per-image mean |change| of the torch path, of the exact path)."""
    x = as_batch(imgs)
    out = {}
    for name in names:
        for lv in LEVELS:
            b = as_images(apply(name, lv, x, ids, seed=0)).astype(float)
            e = np.stack([apply_shift(im, sid, name, lv, 0) for im, sid in zip(imgs, ids)])
            out[name, lv] = (
                np.abs(b - imgs).mean((1, 2, 3)),
                np.abs(e - imgs.astype(float)).mean((1, 2, 3)),
            )
    return out


@pytest.fixture(scope="module")
def outputs(prepared):
    """(name, level) -> (torch, exact seed 0, exact seed 1) images as int arrays."""
    imgs, ids = prepared
    x = as_batch(imgs)
    out = {}
    for name in ALL:
        for lv in LEVELS:
            b = as_images(apply(name, lv, x, ids, seed=0)).astype(int)
            e = [
                np.stack([apply_shift(im, sid, name, lv, s) for im, sid in zip(imgs, ids)]).astype(
                    int
                )
                for s in (0, 1)
            ]
            out[name, lv] = (b, *e)
    return out


def _mad(a, b) -> float:
    return float(np.abs(np.asarray(a, float) - b).mean())


def test_every_corruption_is_covered_and_only_spatter_falls_back():
    assert {n for n in ALL if get_shift(n, batched=True).batched is None} == {"spatter"}
    assert not has_batched("spatter") and has_batched("frost")


@pytest.mark.parametrize("name", ALL)
def test_shape_dtype_device_and_determinism(name):
    x = on_device(
        torch.randint(
            0, 256, (3, 3, 40, 56), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
        )
    )
    ids = ["a.jpg", "b.jpg", "c.jpg"]
    out = apply(name, 3, x, ids, seed=7)
    assert out.shape == x.shape and out.dtype == torch.uint8 and out.device == x.device
    assert torch.equal(out, apply(name, 3, x, ids, seed=7))
    # An image's pixels depend on its own id and seed only, not on the rest of its batch.
    assert torch.equal(out[1:2], apply(name, 3, x[1:2], ids[1:2], seed=7))
    if name not in DETERMINISTIC:
        assert not torch.equal(out, apply(name, 3, x, ids, seed=8))


@pytest.mark.parametrize("name", DETERMINISTIC)
def test_deterministic_corruptions_match_the_exact_path(outputs, name):
    # float32/float64 arithmetic instead of the exact path's may flip a truncated value
    # by one level at rare pixels: 0.05 allows a flip at 5 % of all values, while a wrong
    # kernel, factor or colour conversion moves the mean by whole levels.
    for lv in LEVELS:
        b, e0, _ = outputs[name, lv]
        assert _mad(b, e0) <= 0.05, (name, lv, _mad(b, e0))
        if name in ("pixelate", "jpeg_compression"):  # the same integer arithmetic
            assert np.array_equal(b, e0), (name, lv)


@pytest.mark.parametrize("name", PER_PIXEL)
def test_noise_like_corruptions_are_as_far_from_the_exact_path_as_another_draw(outputs, name):
    # Both distances compare two independent draws of the same per-pixel distribution, so
    # with ~28,000 values per image they agree to a few percent.
    for lv in LEVELS:
        b, e0, e1 = outputs[name, lv]
        assert _mad(b, e0) <= 1.05 * _mad(e1, e0) + 0.3, (name, lv, _mad(b, e0), _mad(e1, e0))


@pytest.mark.parametrize("name", PER_PIXEL)
def test_noise_like_corruptions_change_the_image_as_much_as_the_exact_path(prepared, outputs, name):
    imgs, _ = prepared
    for lv in LEVELS:
        b, e0, e1 = outputs[name, lv]
        exact = (_mad(e0, imgs) + _mad(e1, imgs)) / 2
        assert abs(_mad(b, imgs) - exact) <= 0.05 * exact + 0.3, (name, lv, _mad(b, imgs), exact)


@pytest.fixture(scope="module")
def few_draw_changes(draws):
    return _changes(*draws, FEW_DRAWS)


@pytest.mark.parametrize("name", FEW_DRAWS)
def test_few_draw_corruptions_change_the_image_as_much_as_the_exact_path(few_draw_changes, name):
    # A texture, an angle, a fractal or a warp per image: the change varies a lot from draw
    # to draw, so the two paths' means over 16 draws are compared with their own standard
    # errors (4 sigma; the seeds are fixed, so the outcome is too).
    for lv in LEVELS:
        ours, exact = few_draw_changes[name, lv]
        se = np.sqrt(ours.var(ddof=1) / len(ours) + exact.var(ddof=1) / len(exact))
        assert abs(ours.mean() - exact.mean()) <= 4 * se + 0.5, (
            name,
            lv,
            ours.mean(),
            exact.mean(),
            se,
        )


def test_spatter_falls_back_to_the_exact_shift(outputs):
    for lv in LEVELS:
        b, e0, _ = outputs["spatter", lv]
        assert np.array_equal(b, e0)


@pytest.mark.parametrize("name", [n for n in ALL if n != "spatter"])
def test_levels_are_ordered_like_the_exact_path(prepared, outputs, few_draw_changes, name):
    """Stronger levels change the image more, wherever they do on the exact path.

    Not every corruption is monotone in pixel distance (saturate desaturates at 1-2 and
    oversaturates at 3-5; elastic_transform's severity 1-2 warp widely, 3-5 locally), so
    each pair of consecutive levels whose exact change differs by more than 10 % (for the
    few-draw corruptions: by more than 4 standard errors over 16 draws) must differ the
    same way here.
    """
    imgs, _ = prepared
    if name in FEW_DRAWS:
        # 16 draws per level; a pair of levels counts where the exact means differ by more
        # than 4 standard errors (fog's and frost's levels often do not)
        for a, b in itertools.pairwise(LEVELS):
            ours_a, exact_a = few_draw_changes[name, a]
            ours_b, exact_b = few_draw_changes[name, b]
            se = np.sqrt((exact_a.var(ddof=1) + exact_b.var(ddof=1)) / len(exact_a))
            if abs(exact_b.mean() - exact_a.mean()) > 4 * se:
                assert (ours_b.mean() > ours_a.mean()) == (exact_b.mean() > exact_a.mean()), (
                    name,
                    a,
                    b,
                    ours_a.mean(),
                    ours_b.mean(),
                    exact_a.mean(),
                    exact_b.mean(),
                )
        return
    exact = [
        (_mad(outputs[name, lv][1], imgs) + _mad(outputs[name, lv][2], imgs)) / 2 for lv in LEVELS
    ]
    ours = [_mad(outputs[name, lv][0], imgs) for lv in LEVELS]
    for i in range(len(LEVELS) - 1):
        if exact[i + 1] > 1.1 * exact[i]:
            assert ours[i + 1] > ours[i], (name, exact, ours)
        elif exact[i] > 1.1 * exact[i + 1]:
            assert ours[i] > ours[i + 1], (name, exact, ours)
    if name != "saturate":
        assert ours[-1] > ours[0]  # severity 5 is always stronger than severity 1


# ------------------------------------------------------- exact building blocks


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_division_by_a_constant_is_numpys_on_the_shift_device(dtype):
    # CUDA divides by a Python number as a multiplication by its reciprocal, one bit off
    # at about half of the values k / 255 (H200: elastic_transform's and saturate's pixels
    # moved); div() must give numpy's quotient everywhere.
    from robustlab.shifts.batched._ops import div, unit

    np_dtype = np.float32 if dtype == torch.float32 else np.float64
    values = np.concatenate([np.arange(256), np.random.default_rng(11).uniform(-900, 900, 4000)])
    x = on_device(torch.from_numpy(values.astype(np_dtype)))
    for d in (255.0, 6.0, 7, 448.0, 0.1):
        assert np.array_equal(div(x, d).cpu().numpy(), values.astype(np_dtype) / np_dtype(d)), d
    pixels = np.arange(256, dtype=np.uint8)
    ours = unit(on_device(torch.from_numpy(pixels)), dtype).cpu().numpy()
    assert np.array_equal(ours, pixels.astype(np_dtype) / np_dtype(255))


def test_glass_blur_copy_chain_equals_the_reference_walk():
    from robustlab.shifts.batched.blur import _shuffle_pass
    from robustlab.shifts.corruptions.glass_blur import _shuffle_pass as exact_pass

    rng = np.random.default_rng(3)
    for delta in (1, 2, 4):
        img = rng.integers(0, 256, (37, 45, 3), dtype=np.uint8)
        rows, cols = 37 - 2 * delta, 45 - 2 * delta
        offsets = rng.integers(-delta, delta, (rows * cols, 2))
        ref = img.copy()
        exact_pass(ref, offsets, delta)
        x = as_batch(img[None]).clone()
        _shuffle_pass(x, on_device(torch.from_numpy(offsets)).view(1, rows, cols, 2), delta)
        assert np.array_equal(as_images(x)[0], ref), delta


def test_motion_blur_taps_equal_imagemagick_for_the_same_angle():
    from robustlab.shifts.batched._ops import motion_blur
    from robustlab.shifts.corruptions._motion import motion_blur_uint8

    rng = np.random.default_rng(4)
    imgs = rng.integers(0, 256, (4, 96, 120, 3), dtype=np.uint8)
    angles = [-30.0, 117.0, -101.3, 44.9]
    out = as_images(motion_blur(as_batch(imgs), 15, 5, angles))
    ref = np.stack([motion_blur_uint8(im, 15, 5, a) for im, a in zip(imgs, angles)])
    assert np.array_equal(out, ref)  # float64 sums in tap order (float32 flipped ~3e-5)


@pytest.mark.parametrize("sigma", [0.7, 1.5])
def test_glass_blur_gaussian_is_scipys_bit_for_bit(sigma):
    from robustlab.shifts.batched.blur import _gaussian_scipy
    from robustlab.shifts.corruptions._gauss import gaussian_nearest

    img = np.random.default_rng(7).random((2, 37, 45, 3))
    ours = as_images(_gaussian_scipy(as_batch(img), sigma))
    assert np.array_equal(ours, np.stack([gaussian_nearest(im, sigma) for im in img]))


@pytest.mark.parametrize("size", [(224, 224), (61, 83)])
@pytest.mark.parametrize("factor", [2, 2.5, 3, 4, 4.5])
def test_snow_zoom_is_the_exact_paths_bit_for_bit(size, factor):
    from robustlab.shifts.batched._ops import clipped_zoom_exact
    from robustlab.shifts.corruptions._zoom import clipped_zoom

    layer = np.random.default_rng(8).normal(0.3, 0.3, size)
    ours = clipped_zoom_exact(on_device(torch.from_numpy(layer))[None, None], factor)[0, 0]
    assert np.array_equal(ours.cpu().numpy(), clipped_zoom(layer[..., None], factor)[..., 0])


def test_snow_grey_is_opencvs_bit_for_bit():
    import cv2

    from robustlab.shifts.batched.weather import _grey

    skip_unless_opencv_fuses()  # else OpenCV rounds its grey otherwise (the exact path does not)
    img = np.random.default_rng(9).integers(0, 256, (1, 200, 200, 3)).astype(np.float32) / 255
    ours = _grey(as_batch(img))[0, 0].cpu().numpy()
    assert np.array_equal(ours, cv2.cvtColor(img[0], cv2.COLOR_RGB2GRAY))


@pytest.mark.parametrize("sigma", [170.8, 19.52, 2.44])
def test_reflect_gaussian_through_the_fft_equals_scipy_order(sigma):
    from robustlab.shifts.batched.digital import gaussian_reflect
    from robustlab.shifts.corruptions.elastic_transform import gaussian_reflect as exact

    field = np.random.default_rng(5).uniform(-1, 1, (48, 40))
    ours = gaussian_reflect(on_device(torch.from_numpy(field))[None], sigma)[0].cpu().numpy()
    np.testing.assert_allclose(ours, exact(field, sigma), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["box", "bilinear", "bicubic", "lanczos", "hamming"])
@pytest.mark.parametrize("size", [(240, 240), (61, 83), (224, 300)])
def test_pil_resize_is_pillow_bit_for_bit(name, size):
    from robustlab.shifts.batched._ops import pil_resize

    img = np.random.default_rng(6).integers(0, 256, (101, 127, 3), dtype=np.uint8)
    ours = as_images(pil_resize(as_batch(img[None]), size, name))[0]
    filt = getattr(Image.Resampling, name.upper())
    ref = np.asarray(Image.fromarray(img).resize((size[1], size[0]), filt))
    assert np.array_equal(ours, ref)


def test_cpu_jpeg_round_trip_is_the_protocols(prepared):
    imgs, _ = prepared
    out = as_images(jpeg_roundtrip(as_batch(imgs), IMAGENET_C_PROTOCOL.jpeg_quality, "cpu"))
    ref = np.stack([as_stored(im, IMAGENET_C_PROTOCOL) for im in imgs])
    assert np.array_equal(out, ref)


@pytest.mark.long
def test_cpu_jpeg_round_trip_in_codec_processes(prepared):
    """The codec processes give the batch the calling thread gives (chunks back in order),
    and a child forked after the parent started them starts its own (a pool belongs to the
    process that made it; reusing the parent's would hang)."""
    import multiprocessing

    from robustlab.execution.codec_pool import codec_pool
    from robustlab.shifts.batched.jpeg import jpeg_roundtrip_async

    imgs, _ = prepared
    x = as_batch(np.concatenate([imgs] * 3))  # more images than chunks: order matters
    here = as_images(jpeg_roundtrip_async(x, 85, "cpu").result())
    pool = codec_pool()
    assert pool is not None
    pooled = as_images(jpeg_roundtrip_async(x, 85, "cpu", pool=pool, pool_min=1).result())
    assert np.array_equal(pooled, here)
    ctx = multiprocessing.get_context("fork")
    ours, theirs = ctx.Pipe()
    child = ctx.Process(target=_child_round_trip, args=(x.cpu().numpy(), theirs))
    child.start()
    assert ours.poll(120), "the forked child's round trip hangs"
    out = ours.recv()
    child.join(30)
    assert np.array_equal(as_images(torch.from_numpy(out)), here)


def _child_round_trip(x: np.ndarray, conn) -> None:
    # numpy both ways: torch's shared-memory tensor pickling is not what is tested here
    from robustlab.execution.codec_pool import codec_pool
    from robustlab.shifts.batched.jpeg import jpeg_roundtrip_async

    pool = codec_pool()  # None: a fork of a process with codec processes starts none
    conn.send(
        jpeg_roundtrip_async(torch.from_numpy(x), 85, "cpu", pool=pool, pool_min=1).result().numpy()
    )


def test_bad_batches_are_refused():
    x = on_device(torch.zeros((2, 3, 40, 40), dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        apply("contrast", 1, x.float(), ["a", "b"])
    with pytest.raises(ValueError, match="sample ids"):
        apply("contrast", 1, x, ["a"])
    with pytest.raises(ValueError, match="level"):
        apply("contrast", 9, x, ["a", "b"])


# ------------------------------------------------------- the runner's side


def _shifter(tasks, samples, *, group: int, size: int = 64):
    from robustlab.models.preprocess import Preprocessing
    from robustlab.execution.device_shifts import DeviceShifts, ShiftDevice

    pre = Preprocessing(
        input_size=size, crop_pct=0.875, interpolation="bicubic", mean=(0.5,) * 3, std=(0.5,) * 3
    )
    return DeviceShifts(pre, samples, tasks, SMALL, 0, ShiftDevice("cpu", group=group)), pre


def _payload(x: torch.Tensor) -> dict:
    """What a worker ships for one photo of a corruption suite (no masks, no exact cells)."""
    return {"image": x, "scene": None, "exact": {}}


def test_device_shifts_yield_every_task_in_order_with_its_cells(prepared):
    from types import SimpleNamespace

    from robustlab.execution.tasks import Task

    imgs, ids = prepared
    samples = [SimpleNamespace(id=i) for i in ids]
    cells = (("clean", 0), ("contrast", 2), ("gaussian_noise", 1))
    tasks = [Task(i, cells) for i in range(len(ids))]
    x = _tensor(imgs)
    items = [(i, _payload(x[i : i + 1]), [], []) for i in range(len(ids))]
    items[2] = (2, None, [(-1, "unreadable: test")], [])  # a photo the worker could not read
    shifter, _ = _shifter(tasks, samples, group=3)
    out = list(shifter.wrap(iter(items)))
    assert [o[0] for o in out] == list(range(len(ids)))
    assert out[2][1] is None and out[2][2] == [(-1, "unreadable: test")]
    kept = [i for i in range(len(ids)) if i != 2]
    protocol_jpeg = [
        jpeg_roundtrip(apply(name, lv, x[kept], [ids[i] for i in kept]), SMALL.jpeg_quality, "cpu")
        for name, lv in cells[1:]
    ]
    for row, i in enumerate(kept):
        cells_out = out[i][1]
        assert cells_out.shape == (3, 3, 64, 64) and cells_out.dtype == torch.uint8
        assert torch.equal(cells_out[0], x[i])  # clean: no JPEG round trip
        for j in (1, 2):  # the same pixels whichever group the photo was shifted in
            assert torch.equal(cells_out[j], protocol_jpeg[j - 1][row])


def test_device_shifts_resize_like_the_models_transform(prepared):
    from types import SimpleNamespace

    from robustlab.execution.tasks import Task

    imgs, ids = prepared
    samples = [SimpleNamespace(id=i) for i in ids[:2]]
    tasks = [Task(i, (("clean", 0),)) for i in range(2)]
    shifter, pre = _shifter(tasks, samples, group=8, size=80)
    x = _tensor(imgs[:2])
    out = list(shifter.wrap(iter([(i, _payload(x[i : i + 1]), [], []) for i in range(2)])))
    for i in range(2):
        ref = pre.to_uint8(imgs[i], crop=False)  # what a worker ships on the exact path
        assert torch.equal(out[i][1][0], ref)
