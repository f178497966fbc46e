"""The presets against the official generators' outputs (tests/fixtures/presets_reference).

``benchmarks/presets_reference.py`` ran the corruption functions of hendrycks/robustness'
``make_cifar_c.py``, ``make_tinyimagenet_c.py``, ``make_imagenet_64_c.py`` and
``make_imagenet_c_inception.py`` in the reference environment, after ``np.random.seed(1000
* i + 10 * c + s)``, on shared-mini photos prepared as each script prepares its input, and
stored the prepared photos and a SHA-256 of every output. Passing
``seed=np.random.RandomState(that)`` makes robustlab draw the same numbers in the same
order; every output must be the same bytes (impulse noise aside: scikit-image draws it
from a generator no seed reaches, so its amount is compared).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import robustlab
from robustlab.data.images import read_image
from robustlab.pipeline import apply_shift, prepare, resolve_shift
from robustlab.suites import PRESET_PROTOCOLS, get_suite

FIXTURES = Path(__file__).parent / "fixtures" / "presets_reference"
PHOTOS = Path(__file__).parent / "fixtures" / "shared-mini" / "imagenet-samples"
PRESETS = ("cifar-c", "tiny-imagenet-c", "imagenet-64-c", "imagenet-c-299")


def _load(preset: str):
    data = np.load(FIXTURES / f"{preset}.npz")
    meta = json.loads(str(data["meta"]))
    return data, meta, json.loads(str(data["digests"])), json.loads(str(data["impulse"]))


@pytest.fixture(scope="module", params=PRESETS)
def reference(request):
    return (request.param, *_load(request.param))


def _digest(x: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest()


def test_preparation_is_the_scripts(reference):
    """Each preset's protocol prepares a photo as its script does (the 32 px one: squashed
    to 32x32; Resize((64, 64)); the 299 px script's resized_center_crop), pixel for pixel."""
    preset, data, meta, _, _ = reference
    for i, name in enumerate(meta["photos"]):
        rgb = read_image(PHOTOS / name).rgb
        assert np.array_equal(prepare(rgb, PRESET_PROTOCOLS[preset]), data["clean"][i]), name


@pytest.mark.parametrize("preset", PRESETS)
def test_every_corruption_bit_for_bit(preset):
    data, meta, digests, _ = _load(preset)
    bad = []
    for c, name in enumerate(meta["names"]):
        if name == "impulse_noise":
            continue
        for s in range(1, 6):
            for i, x in enumerate(data["clean"]):
                rng = np.random.RandomState(1000 * i + 10 * c + s)
                out = robustlab.corrupt(x, name, s, seed=rng, preset=preset)
                if _digest(out) != digests[f"{name}_{s}"][i]:
                    bad.append(f"{name} s{s} photo {i}")
    assert not bad, f"{preset}: {len(bad)} outputs differ from the official code: {bad[:8]}"


def test_cifar_outputs_match_value_for_value():
    """The 32 px fixture keeps the official arrays themselves: a spot check that the
    digests above stand for these values (and a readable failure if they ever differ)."""
    data, meta, _, _ = _load("cifar-c")
    c = meta["names"].index("glass_blur")
    x = data["clean"][1]
    out = robustlab.corrupt(
        x, "glass_blur", 4, seed=np.random.RandomState(1000 + 10 * c + 4), preset="cifar-c"
    )
    assert np.array_equal(out, data["glass_blur_4"][1])


@pytest.mark.parametrize("preset", PRESETS)
def test_impulse_noise_amount(preset):
    """Salt and pepper: robustlab changes about as many values as the official code did."""
    data, _, _, impulse = _load(preset)
    amounts = resolve_shift("impulse_noise", preset).params
    for s in range(1, 6):
        for i, x in enumerate(data["clean"]):
            ours = robustlab.corrupt(x, "impulse_noise", s, seed=1000 * i + s, preset=preset)
            ref = impulse[f"impulse_noise_{s}"][i]
            ours_frac = float((ours != x).mean())
            # binomial spread of the fraction changed, with room for both draws
            sd = np.sqrt(amounts[s] * (1 - amounts[s]) / x.size)
            assert abs(ours_frac - ref) <= 6 * sd + 1e-9, (s, i, ours_frac, ref)
            assert set(np.unique(ours[ours != x])) <= {0, 255}


def test_pipeline_cells_use_the_suites_preset():
    """A cell of the cifar-c suite (what generate writes and evaluate computes) is the
    preset's corruption of the prepared photo under the seed rule, not ImageNet-C's."""
    data, _, _, _ = _load("cifar-c")
    x = data["clean"][0]
    suite = get_suite("cifar-c")
    sh = resolve_shift("gaussian_noise", suite.protocol.preset)
    cell = apply_shift(x, "a.png", sh, 5, seed=3)
    imagenet = apply_shift(x, "a.png", "gaussian_noise", 5, seed=3)
    assert sh.params[5] == 0.1 and not np.array_equal(cell, imagenet)
    # the same draw (seed rule), only the constant differs: the noise scales by 0.10 / 0.38
    assert np.abs(cell.astype(int) - x).mean() < np.abs(imagenet.astype(int) - x).mean()
