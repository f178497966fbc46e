"""The one fine-tuning loop gives the numbers the separate loops it replaced gave.

Plain fine-tuning and the training methods (stability training, corruption augmentation)
used to run in two copies of the optimiser loop. The values below were measured with those
copies (commit 308eb34) on the same synthetic images, seed and config; the unified loop
must reproduce them: the same batches, flips, noise and draws give the same losses and
weights, up to float noise. A changed batch order, an extra draw from the generator or a
forgotten flip moves them by far more than the tolerance.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.train import TrainConfig

# (class index, wnid) of four ImageNet classes; three images each.
CLASSES = ("n01440764", "n01443537", "n01484850", "n01491361")
N_IMAGES = 3
STEPS, BATCH = 3, 2
# Big enough steps that every step moves the weights visibly, small enough that the
# training stays well-conditioned (float noise is not amplified).
LR = {"linear": 1e-2, "full": 1e-4}
# Tensors whose change from the base weights is compared (the head in both modes; the
# stem in full mode only).
WATCHED = ("classifier.weight", "classifier.bias", "conv_stem.weight")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A class-folder tree of smooth, seeded synthetic pictures (lossless PNG, so no
    decoder can change a pixel)."""
    from PIL import Image

    root = tmp_path_factory.mktemp("loop") / "data"
    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[:96, :128] / 96.0
    for c, wnid in enumerate(CLASSES):
        (root / wnid).mkdir(parents=True)
        for k in range(N_IMAGES):
            f = rng.uniform(1, 6, size=3)
            phase = rng.uniform(0, 2 * np.pi, size=3)
            rgb = [
                0.5 + 0.4 * np.sin(f[i] * (xx * (c + 1) + yy * (k + 1)) + phase[i])
                for i in range(3)
            ]
            pix = (np.stack(rgb, axis=-1) * 255).round().astype(np.uint8)
            Image.fromarray(pix).save(root / wnid / f"img{k}.png")
    return root


def _method(name):
    from robustlab.workflows.train.augment import CorruptionAugmentation
    from robustlab.workflows.train.stability import StabilityTraining

    return {
        "plain": None,
        "stability": StabilityTraining(0.1, 0.5),
        "aug": CorruptionAugmentation(("blur", "weather", "digital"), clean_fraction=0.3),
    }[name]


def run_short(images, out, mode: str, method: str) -> dict:
    """Train briefly and return the numbers the goldens hold."""
    import torch

    from robustlab.models import load_model
    from robustlab.workflows.train import make_split, train_on_cells

    base = load_model("lite0", device="cpu")
    split = make_split(base, images, test_fraction=0.25)
    tr = train_on_cells(
        "lite0",
        images,
        [(CLEAN_SHIFT, 0)],
        split,
        config=TrainConfig(mode=mode, steps=STEPS, batch_size=BATCH, lr=LR[mode], seed=3),
        out=out,
        device="cpu",
        method=_method(method),
    )
    rec = json.loads(tr.checkpoint.with_suffix(".json").read_text())
    ref = base.module.state_dict()
    tuned = torch.load(tr.checkpoint, weights_only=True)
    deltas = {}
    for k in WATCHED:
        d = (tuned[k] - ref[k]).double()
        deltas[k] = [float(d.sum()), float(d.norm())]
    return {
        "losses": list(tr.losses),
        "deltas": deltas,
        "drawn": (rec.get("method") or {}).get("drawn"),
    }


# Measured with the two-loop code (commit 308eb34), CPU, torch float32.
GOLDEN: dict = {
    ("linear", "plain"): {
        "losses": [9.066134452819824, 5.995516777038574, 8.910882949829102],
        "deltas": {
            "classifier.weight": [-13759.888004460488, 17.8748670708037],
            "classifier.bias": [-28.115107960999012, 0.8933315848276829],
            "conv_stem.weight": [0.0, 0.0],
        },
        "drawn": None,
    },
    ("linear", "stability"): {
        "losses": [9.759998321533203, 6.883907318115234, 9.336864471435547],
        "deltas": {
            "classifier.weight": [-14950.187219353713, 19.27373784683715],
            "classifier.bias": [-28.991896584630013, 0.9207558494135785],
            "conv_stem.weight": [0.0, 0.0],
        },
        "drawn": {"clean": 6},
    },
    ("linear", "aug"): {
        "losses": [8.456327438354492, 4.558395862579346, 10.23588752746582],
        "deltas": {
            "classifier.weight": [-14223.322998048447, 18.29028061769837],
            "classifier.bias": [-27.995523773133755, 0.8891950424563536],
            "conv_stem.weight": [0.0, 0.0],
        },
        "drawn": {"clean": 1, "impulse_noise": 3, "shot_noise": 2},
    },
    ("full", "plain"): {
        "losses": [9.066134452819824, 6.285709381103516, 7.616757392883301],
        "deltas": {
            "classifier.weight": [-135.90367851828705, 0.17817640524925543],
            "classifier.bias": [-0.27483332753763534, 0.008734430807456837],
            "conv_stem.weight": [0.0276260773971444, 0.005729870516028962],
        },
        "drawn": None,
    },
    ("full", "stability"): {
        "losses": [9.691420555114746, 6.4558820724487305, 8.082547187805176],
        "deltas": {
            "classifier.weight": [-120.74284310075564, 0.1845148657979518],
            "classifier.bias": [-0.2816979128983803, 0.008951236892007887],
            "conv_stem.weight": [0.024256634002085775, 0.0058951075844558345],
        },
        "drawn": {"clean": 6},
    },
    ("full", "aug"): {
        "losses": [8.456327438354492, 5.208917617797852, 9.82343864440918],
        "deltas": {
            "classifier.weight": [-132.93274912886045, 0.17316032452810043],
            "classifier.bias": [-0.2754740089876577, 0.00875595466531907],
            "conv_stem.weight": [0.017412504224921577, 0.005472059421691733],
        },
        "drawn": {"clean": 1, "impulse_noise": 3, "shot_noise": 2},
    },
}


# Every method in linear mode and plain training in full mode run by default; the two
# method-in-full-mode pairs (back-propagation through the whole network, 6 CPU s each) are
# slow: what they add is the pairing, each half of which a default case checks.
@pytest.mark.parametrize(
    "mode, method",
    [
        ("linear", "plain"),
        ("linear", "stability"),
        ("linear", "aug"),
        ("full", "plain"),
        pytest.param("full", "stability", marks=pytest.mark.slow),
        pytest.param("full", "aug", marks=pytest.mark.slow),
    ],
)
def test_the_unified_loop_reproduces_the_old_loops(
    images, tmp_path, mode, method, two_torch_threads
):
    got = run_short(images, tmp_path, mode, method)
    want = GOLDEN[(mode, method)]
    assert got["drawn"] == want["drawn"]
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=1e-4)
    for k, (total, norm) in want["deltas"].items():
        # a weight that must not move stays bit-identical
        if norm == 0.0:
            assert got["deltas"][k] == [0.0, 0.0], k
        else:
            np.testing.assert_allclose(got["deltas"][k][1], norm, rtol=1e-3)
            assert abs(got["deltas"][k][0] - total) <= 1e-3 * (abs(total) + norm), k
