"""Random batched corruptions split into their draws and a deterministic apply.

Fidelity of a random batched corruption is checked in two parts that need no model:

* fed the exact path's own draws (``apply_matched``), the batched arithmetic gives the
  exact path's pixels (identical, or within the shift's documented ``matched_mad``);
* its torch draws follow the same distribution as the exact path's (two-sample
  Kolmogorov-Smirnov per kind of draw, over many sample ids).

Together they say the two paths are the same random corruption; what still differs
between their errors on a model is the randomness of single draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import as_batch, as_images, on_device
from scipy.stats import ks_2samp

from robustlab.pipeline import apply_shift, load_prepared
from robustlab.seeding import derive_seed, make_rng
from robustlab.shifts.batched import apply, apply_matched
from robustlab.shifts.batched._ops import generators
from robustlab.shifts.corruptions import list_corruptions
from robustlab.shifts.registry import get_shift
from robustlab.suites import Protocol

LEVELS = (1, 2, 3, 4, 5)
# The corruptions split into draw, apply and replay (the scenes': tests/test_batched_scenes.py)
NAMES = sorted(n for n in list_corruptions("all") if get_shift(n, batched=True).parts)


def _parts(name: str):
    return get_shift(name, batched=True).parts


def _photos(samples_dir, protocol, n_photos: int, n_ids: int):
    from robustlab.data.sources import discover

    samples = list(discover(samples_dir, labels_csv=samples_dir / "labels.csv"))
    picked = samples[:: max(1, len(samples) // n_photos)][:n_photos]
    imgs = np.stack([load_prepared(s, protocol).rgb for s in picked for _ in range(n_ids)])
    ids = [f"photo{i // n_ids}/draw{i % n_ids}.jpg" for i in range(len(imgs))]
    return imgs, ids


@pytest.fixture(scope="module")
def small(samples_dir):
    """Three real photos at 64x64, two sample ids each."""
    return _photos(samples_dir, Protocol(resize=73, crop=64), 3, 2)


@pytest.fixture(scope="module")
def many(samples_dir):
    """One real photo at 40x40 under 64 sample ids: 64 draws of everything."""
    return _photos(samples_dir, Protocol(resize=46, crop=40), 1, 64)


@pytest.mark.parametrize("name", NAMES)
def test_matched_draws_give_the_exact_pixels(small, name):
    imgs, ids = small
    x = as_batch(imgs)
    bound = _parts(name).matched_mad
    for lv in LEVELS:
        ours = as_images(apply_matched(name, lv, x, ids, seed=3))
        exact = np.stack([apply_shift(im, sid, name, lv, 3) for im, sid in zip(imgs, ids)])
        mad = float(np.abs(ours.astype(float) - exact).mean())
        if bound == 0:
            assert np.array_equal(ours, exact), (name, lv, mad)
        else:
            assert mad <= bound, (name, lv, mad, bound)
        # the draws matter: the torch draws give another image
        assert not np.array_equal(as_images(apply(name, lv, x, ids, seed=3)), ours)


@pytest.mark.parametrize("name", NAMES)
def test_matched_draws_on_a_wide_image(small, name):
    # H != W, and a side over 256 (fog's plasma map grows to 512): a swapped axis or the
    # wrong corner of a draw shows here, not on the square photos
    from PIL import Image

    imgs = np.stack([np.asarray(Image.fromarray(im).resize((260, 24))) for im in small[0][:2]])
    ids = small[1][:2]
    ours = as_images(apply_matched(name, 5, as_batch(imgs), ids, seed=3))
    exact = np.stack([apply_shift(im, sid, name, 5, 3) for im, sid in zip(imgs, ids)])
    mad = float(np.abs(ours.astype(float) - exact).mean())
    assert mad <= _parts(name).matched_mad, (name, mad)
    if _parts(name).matched_mad == 0:
        assert np.array_equal(ours, exact), (name, mad)


@pytest.mark.parametrize("name", NAMES)
def test_torch_draws_follow_the_exact_paths_distribution(many, name):
    imgs, ids = many
    x = as_batch(imgs)
    parts = _parts(name)
    sh = get_shift(name)
    for lv in LEVELS:
        params = sh.params[lv]
        seeds = [derive_seed(0, sid, name, lv) for sid in ids]
        ours = parts.draw(x, params, generators(seeds, x.device))
        theirs = [
            parts.replay(im, params, make_rng(derive_seed(0, sid, name, lv)))
            for im, sid in zip(imgs, ids)
        ]
        assert set(ours) == set(theirs[0]), name
        for key, value in ours.items():
            other = torch.cat([t[key] for t in theirs])
            assert value.shape == other.shape, (name, lv, key)
            a = _sample(value)
            b = _sample(other)
            # Fixed seeds: the p-value is fixed too. 1e-4 tolerates no real difference at
            # these sample sizes (a wrong range, scale or count is p < 1e-10).
            p = ks_2samp(a, b).pvalue
            assert p > 1e-4, (name, lv, key, p, a.mean(), b.mean(), a.std(), b.std())


def _sample(t: torch.Tensor, n: int = 20_000) -> np.ndarray:
    flat = t.double().flatten().cpu().numpy()
    if flat.size <= n:
        return flat
    return flat[np.random.default_rng(0).choice(flat.size, n, replace=False)]


def test_every_batched_corruption_is_split_or_does_not_draw():
    """A batched corruption without random parts would escape the matched-draw contract:
    it must then give the same pixels whatever the seed."""

    x = on_device(
        torch.randint(
            0, 256, (2, 3, 32, 40), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)
        )
    )
    entries = [get_shift(n, batched=True) for n in list_corruptions("all")]
    unsplit = [sh.name for sh in entries if sh.batched is not None and sh.parts is None]
    assert unsplit, "the deterministic corruptions are batched too"
    for name in unsplit:
        for lv in LEVELS:
            assert torch.equal(
                apply(name, lv, x, ["a", "b"], seed=0), apply(name, lv, x, ["a", "b"], seed=1)
            ), (name, lv)
