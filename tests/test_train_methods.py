"""Training-time robustness methods (issue 14): stability training and corruption
augmentation with held-out families, on a tiny real set and the bundled lite0.

The shared photos hold one image per class, so each class here gets three different crops
of its photo; trainings are two or three optimiser steps (what is tested is the mechanics:
the loss, where gradients go, what is drawn, what is stored, not accuracy gains).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from robustlab.errors import InputError
from robustlab.workflows.train import TrainConfig
from robustlab.workflows.train.augment import CorruptionAugmentation, pool_families
from robustlab.workflows.train.stability import StabilityTraining, noisy_copy, stability_loss

N_CLASSES, N_CROPS = 4, 3


@pytest.fixture(scope="module")
def photos(samples_dir, tmp_path_factory):
    from PIL import Image

    data = tmp_path_factory.mktemp("methods") / "data"
    with open(samples_dir / "labels.csv") as f:
        table = list(csv.DictReader(f))
    rows = [r for r in table if min(Image.open(samples_dir / r["file"]).size) >= 200][:N_CLASSES]
    for r in rows:
        img = Image.open(samples_dir / r["file"]).convert("RGB")
        w, h = img.size
        (data / r["wnid"]).mkdir(parents=True)
        for k in range(N_CROPS):
            cw, ch = int(w * 0.75), int(h * 0.75)
            x0, y0 = (w - cw) * k // (N_CROPS - 1), (h - ch) * (N_CROPS - 1 - k) // (N_CROPS - 1)
            img.crop((x0, y0, x0 + cw, y0 + ch)).save(
                data / r["wnid"] / f"{Path(r['file']).stem}_{k}.JPEG", quality=95
            )
    return data


def _softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_stability_loss_equals_hand_computation_and_only_the_noisy_side_gets_the_kl_gradient():
    import torch

    rng = np.random.default_rng(3)
    clean = rng.normal(size=(5, 7))
    noisy = clean + rng.normal(scale=0.5, size=(5, 7))
    y = np.array([0, 3, 6, 2, 2])
    w = 0.05
    p, q = _softmax(clean), _softmax(noisy)
    ce = -np.mean(np.log(p[np.arange(5), y]))
    kl = np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=1))
    tc = torch.tensor(clean, requires_grad=True)
    tn = torch.tensor(noisy, requires_grad=True)
    loss = stability_loss(tc, tn, torch.tensor(y), w)
    assert float(loss.detach()) == pytest.approx(ce + w * kl, rel=1e-10)
    loss.backward()
    onehot = np.eye(7)[y]
    # clean logits: the cross-entropy's gradient only (the clean softmax is the KL's target)
    np.testing.assert_allclose(tc.grad.numpy(), (p - onehot) / 5, atol=1e-12)
    # noisy logits: d/dz KL(p || softmax(z)) = softmax(z) - p, weighted and batch-averaged
    np.testing.assert_allclose(tn.grad.numpy(), w * (q - p) / 5, atol=1e-12)
    # weight 0 is plain cross-entropy; a subset label space scores only its columns
    assert float(stability_loss(tc, tn, torch.tensor(y), 0.0).detach()) == pytest.approx(
        ce, rel=1e-10
    )
    cols = torch.tensor([1, 4, 6])
    sub = stability_loss(tc, tn, torch.tensor([0, 2, 1, 1, 0]), w, cols)
    ps, qs = _softmax(clean[:, [1, 4, 6]]), _softmax(noisy[:, [1, 4, 6]])
    want = -np.mean(np.log(ps[np.arange(5), [0, 2, 1, 1, 0]])) + w * np.mean(
        np.sum(ps * np.log(ps / qs), axis=1)
    )
    assert float(sub.detach()) == pytest.approx(want, rel=1e-10)


def test_noisy_copy_is_bounded_uniform_pixel_noise_clipped_and_seeded():
    import torch

    mean, std = (0.5, 0.4, 0.3), (0.5, 0.25, 0.2)
    m, s = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)
    pixels = torch.rand(2, 3, 40, 40, generator=torch.Generator().manual_seed(0))
    pixels[0, :, :4] = 0.0  # black and white pixels: the noise must be clipped there
    pixels[1, :, :4] = 1.0
    x = (pixels - m) / s
    out = noisy_copy(x, 0.05, torch.Generator().manual_seed(7), mean, std)
    back = out * s + m
    diff = back - pixels
    assert float(diff.abs().max()) <= 0.05 + 1e-6
    assert float(back.min()) >= -1e-6 and float(back.max()) <= 1 + 1e-6
    inner = diff[:, :, 8:]  # away from the clipped rows: uniform in +-0.05, mean ~0
    assert float(inner.abs().max()) > 0.049 and abs(float(inner.mean())) < 2e-3
    assert float(inner.std()) == pytest.approx(0.05 / math.sqrt(3), rel=0.05)
    again = noisy_copy(x, 0.05, torch.Generator().manual_seed(7), mean, std)
    assert torch.equal(out, again)
    assert not torch.equal(out, noisy_copy(x, 0.05, torch.Generator().manual_seed(8), mean, std))


def test_augmentation_never_draws_a_held_out_family_and_is_seeded():
    fams = pool_families()
    assert set(fams) == {"noise", "blur", "weather", "digital"}
    aug = CorruptionAugmentation(("blur", "weather"), clean_fraction=0.25)
    held = set(fams["blur"]) | set(fams["weather"])
    assert set(aug.held_out_shifts) == held and not held & set(aug.train_shifts)
    draws = [aug.draw(f"cls/img{i % 37}", seed=5, step=i // 37, pos=i % 11) for i in range(4000)]
    shifts = [s for s, _ in draws]
    assert not held & set(shifts)
    assert set(shifts) == {"clean", *fams["noise"], *fams["digital"]}
    assert {lv for s, lv in draws if s != "clean"} == {1, 2, 3, 4, 5}
    assert shifts.count("clean") / len(shifts) == pytest.approx(0.25, abs=0.03)
    again = [aug.draw(f"cls/img{i % 37}", seed=5, step=i // 37, pos=i % 11) for i in range(4000)]
    other = [aug.draw(f"cls/img{i % 37}", seed=6, step=i // 37, pos=i % 11) for i in range(4000)]
    assert draws == again and draws != other

    # items() keeps each sample and replaces only its cell
    class _S:
        def __init__(self, i):
            self.id = f"c/{i}"

    out = aug.items(
        [(2, "clean", 0), (0, "clean", 0)], step=3, samples=[_S(i) for i in range(3)], seed=5
    )
    assert [i for i, _, _ in out] == [2, 0]
    assert out[0][1:] == aug.draw("c/2", seed=5, step=3, pos=0)


@pytest.mark.parametrize(
    "make, needle",
    [
        (lambda: CorruptionAugmentation(("blurr",)), "unknown corruption family 'blurr'"),
        (
            lambda: CorruptionAugmentation(("noise", "blur", "weather", "digital")),
            "every corruption family",
        ),
        (lambda: CorruptionAugmentation((), clean_fraction=1.0), "clean fraction"),
        (lambda: StabilityTraining(0.05, -0.01), "weight must be a number >= 0"),
        (lambda: StabilityTraining(0.0, 0.05), "noise must be in (0, 1]"),
        (lambda: StabilityTraining(1.5, 0.05), "noise must be in (0, 1]"),
        (lambda: StabilityTraining(float("nan"), 0.05), "noise must be in (0, 1]"),
    ],
)
def test_bad_method_parameters_are_input_errors(make, needle):
    with pytest.raises(InputError) as e:
        make()
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_stability_and_augmented_training_store_their_records(photos, tmp_path):
    import torch

    from robustlab.models import load_model
    from robustlab.store import CLEAN_SHIFT
    from robustlab.workflows.train import make_split, train_on_cells

    base = load_model("lite0", device="cpu")
    split = make_split(base, photos, test_fraction=0.3)
    assert len(split.train) == 8 and len(split.test) == 4
    cfg = TrainConfig(mode="linear", steps=2, batch_size=3, lr=1e-2)
    stab = StabilityTraining(0.1, 0.1)
    tr = train_on_cells(
        "lite0",
        photos,
        [(CLEAN_SHIFT, 0)],
        split,
        config=cfg,
        out=tmp_path,
        device="cpu",
        method=stab,
    )
    rec = json.loads(tr.checkpoint.with_suffix(".json").read_text())
    assert rec["method"]["name"] == "stability" and rec["method"]["noise"] == 0.1
    assert rec["method"]["drawn"] == {"clean": 6} and "stability" in tr.checkpoint.name
    assert len(tr.losses) == 2 and all(np.isfinite(tr.losses))
    tuned = torch.load(tr.checkpoint, weights_only=True)
    ref = base.module.state_dict()
    assert {k for k in ref if not torch.equal(ref[k], tuned[k])} == {
        "classifier.weight",
        "classifier.bias",
    }
    # the stability term takes part: weight 0 (cross-entropy only) ends elsewhere
    ce_only = train_on_cells(
        "lite0",
        photos,
        [(CLEAN_SHIFT, 0)],
        split,
        config=cfg,
        out=tmp_path,
        device="cpu",
        method=StabilityTraining(0.1, 0.0),
    )
    assert ce_only.checkpoint != tr.checkpoint
    assert not torch.equal(
        torch.load(ce_only.checkpoint, weights_only=True)["classifier.weight"],
        tuned["classifier.weight"],
    )
    # same method, same seed: the checkpoint is reused, not retrained
    assert train_on_cells(
        "lite0",
        photos,
        [(CLEAN_SHIFT, 0)],
        split,
        config=cfg,
        out=tmp_path,
        device="cpu",
        method=stab,
    ).reused

    aug = CorruptionAugmentation(("blur", "weather", "digital"), clean_fraction=0.0)
    tr2 = train_on_cells(
        "lite0",
        photos,
        [(CLEAN_SHIFT, 0)],
        split,
        config=cfg,
        out=tmp_path,
        device="cpu",
        method=aug,
    )
    rec2 = json.loads(tr2.checkpoint.with_suffix(".json").read_text())
    assert rec2["method"]["holdout_families"] == ["blur", "weather", "digital"]
    assert set(rec2["method"]["drawn"]) <= set(pool_families()["noise"])
    assert sum(rec2["method"]["drawn"].values()) == 6


@pytest.mark.slow
def test_full_stability_fine_tune_moves_the_backbone(photos, tmp_path):
    import torch

    from robustlab.models import load_model
    from robustlab.workflows.train import make_split, train_on_cells

    base = load_model("lite0", device="cpu")
    split = make_split(base, photos, test_fraction=0.3)
    tr = train_on_cells(
        "lite0",
        photos,
        [("clean", 0)],
        split,
        out=tmp_path,
        device="cpu",
        config=TrainConfig(mode="full", steps=2, batch_size=2),
        method=StabilityTraining(0.05, 0.05),
    )
    tuned = torch.load(tr.checkpoint, weights_only=True)
    ref = base.module.state_dict()
    assert not torch.equal(ref["conv_stem.weight"], tuned["conv_stem.weight"])
    stats = [k for k in ref if k.endswith(("running_mean", "running_var"))]
    assert all(torch.equal(ref[k], tuned[k]) for k in stats)


def test_test_cells_default_to_the_held_out_families():
    from robustlab.suites import get_suite
    from robustlab.workflows.train.methods import test_cells_for

    s = get_suite("imagenet-c")
    aug = CorruptionAugmentation(("blur",))
    cells = test_cells_for(aug, s, None, [1])
    assert cells == [(n, 1) for n in pool_families()["blur"]]
    assert len(test_cells_for(StabilityTraining(), s, None, None)) == 75
    assert test_cells_for(aug, s, ["fog"], [2]) == [("fog", 2)]


@pytest.mark.long
def test_cli_stability_grid_and_augmentation_store_runs_with_their_method(photos, tmp_path, capsys):
    from robustlab.cli import main
    from robustlab.store import Store

    db = tmp_path / "r.duckdb"
    common = [
        "--data",
        str(photos),
        "--steps",
        "1",
        "--train-batch-size",
        "2",
        "--out",
        str(tmp_path / "ckpt"),
        "--db",
        str(db),
        "--device",
        "cpu",
        "--shift",
        "motion_blur",
        "--level",
        "2",
    ]
    assert (
        main(
            [
                "train",
                "lite0",
                *common,
                "--method",
                "stability",
                "--stability-noise",
                "0.01,0.1",
                "--stability-weight",
                "0.05",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stability(noise=0.01,weight=0.05)" in out and "stability(noise=0.1,weight=0.05)" in out
    assert (
        main(["train", "lite0", *common, "--method", "corruption-aug", "--holdout-family", "blur"])
        == 0
    )
    out = capsys.readouterr().out
    assert "corruption-aug(holdout=blur)" in out
    runs = Store(db).runs()
    methods = {}
    for _, r in runs.iterrows():
        cfg = r["config"] if isinstance(r["config"], dict) else json.loads(r["config"])
        ft = cfg["fine_tuned"]
        methods[r["run_id"]] = None if ft is None else ft["method"]
        assert cfg["split"]["part"] == "test" and r["n_samples"] == 4
    # one un-fine-tuned base run (shared by both commands), two stability runs, one augmented
    assert sorted(str(m and m["name"]) for m in methods.values()) == [
        "None",
        "corruption-aug",
        "stability",
        "stability",
    ]
    aug = next(m for m in methods.values() if m and m["name"] == "corruption-aug")
    assert aug["holdout_families"] == ["blur"] and "motion_blur" in aug["held_out_shifts"]
    assert not set(aug["drawn"]) & set(pool_families()["blur"])


@pytest.mark.parametrize(
    "extra, needle",
    [
        (
            ["--method", "corruption-aug", "--holdout-family", "noise,blur,weather,digital"],
            "every corruption family",
        ),
        (
            ["--method", "corruption-aug", "--holdout-family", "rain"],
            "unknown corruption family 'rain'",
        ),
        (["--method", "stability", "--stability-weight", "-0.1"], "weight must be a number >= 0"),
        (["--method", "stability", "--stability-noise", "2"], "noise must be in (0, 1]"),
        (["--method", "stability", "--stability-noise", "abc"], "not a number"),
        (["--method", "stability", "--holdout-family", "blur"], "--holdout-family applies"),
        (["--method", "plain", "--stability-noise", "0.1"], "apply to --method stability only"),
    ],
)
def test_cli_bad_method_input_is_one_line(tmp_path, capsys, extra, needle):
    from test_cli_errors import assert_one_line_error, run_cli

    rc, lines, _ = run_cli(
        capsys, "train", "lite0", "--data", tmp_path, "--db", tmp_path / "r.duckdb", *extra
    )
    assert rc == 2
    assert_one_line_error(lines, "train", needle)


def test_tables_name_a_method_fine_tuned_model_by_its_method():
    from robustlab.store.naming import model_label

    stab = {"fine_tuned": {"method": {"name": "stability", "noise": 0.05, "weight": 0.1}}}
    aug = {
        "fine_tuned": {"method": {"name": "corruption-aug", "holdout_families": ["blur"]}},
        "defence": {"preprocess": {"name": "clahe"}},
    }
    assert model_label("lite0", stab) == "lite0 ft:stability(noise=0.05,weight=0.1)"
    assert model_label("lite0", aug) == "lite0 +clahe ft:corruption-aug(holdout=blur)"
    assert model_label("lite0", {"fine_tuned": {"config": {}}}) == "lite0"  # EX1/EX2 runs
    assert model_label("lite0", None) == "lite0"
