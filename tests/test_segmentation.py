"""Segmentation metrics (against hand counts) and the scenario evaluator on real photos."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import make_masked_folder

from robustlab.errors import MissingResourceError
from robustlab.metrics.segmentation import (
    binary_counts,
    binary_matrix,
    class_accuracy,
    confusion_matrix,
    iou_per_class,
    mean_iou,
    pixel_accuracy,
    summarize,
)

# 3x4 maps worked out by hand below.
TRUTH = np.array([[0, 0, 1, 1], [0, 2, 2, 1], [0, 2, 2, 0]])
PRED = np.array([[0, 1, 1, 1], [0, 2, 0, 1], [2, 2, 2, 0]])


def test_confusion_matrix_by_hand():
    cm = confusion_matrix(PRED, TRUTH, 3)
    # truth 0 (5 px): pred 0,1,0,2,0 -> [3, 1, 1]; truth 1 (3 px): all 1 -> [0, 3, 0];
    # truth 2 (4 px): pred 2,0,2,2 -> [1, 0, 3]
    np.testing.assert_array_equal(cm, [[3, 1, 1], [0, 3, 0], [1, 0, 3]])
    # IoU: 3/(5+4-3)=0.5, 3/(3+4-3)=0.75, 3/(4+4-3)=0.6
    np.testing.assert_allclose(iou_per_class(cm), [0.5, 0.75, 0.6])
    assert mean_iou(cm) == pytest.approx((0.5 + 0.75 + 0.6) / 3)
    assert pixel_accuracy(cm) == pytest.approx(9 / 12)
    np.testing.assert_allclose(class_accuracy(cm), [3 / 5, 1.0, 3 / 4])


def test_absent_class_is_nan_not_zero_or_one_and_ignore_index():
    cm = confusion_matrix(np.zeros((2, 2), int), np.zeros((2, 2), int), 3)
    iou = iou_per_class(cm)
    assert iou[0] == 1.0 and np.isnan(iou[1]) and np.isnan(iou[2])
    assert mean_iou(cm) == 1.0
    truth = np.array([[0, 255], [1, 1]])
    pred = np.array([[0, 0], [1, 0]])
    cm = confusion_matrix(pred, truth, 2, ignore_index=255)
    np.testing.assert_array_equal(cm, [[1, 0], [1, 1]])
    assert pixel_accuracy(cm) == pytest.approx(2 / 3)
    assert np.isnan(pixel_accuracy(np.zeros((2, 2))))


def test_binary_counts_match_the_matrix():
    t = TRUTH > 0
    p = PRED > 0
    tp, fp, fn, tn = binary_counts(p, t)
    # fg truth: 7 px; predicted fg at 8 px; both: (0,2),(0,3),(1,1),(1,3),(2,1),(2,2) = 6
    assert (tp, fp, fn, tn) == (6, 2, 1, 3)
    np.testing.assert_array_equal(binary_matrix(tp, fp, fn, tn), confusion_matrix(p, t, 2))
    assert iou_per_class(binary_matrix(tp, fp, fn, tn))[1] == pytest.approx(6 / 9)


def test_bad_inputs():
    with pytest.raises(ValueError, match="shape"):
        confusion_matrix(np.zeros((2, 2), int), np.zeros((2, 3), int), 2)
    with pytest.raises(ValueError, match="outside"):
        confusion_matrix(np.full((2, 2), 3), np.zeros((2, 2), int), 3)
    with pytest.raises(ValueError, match="integer or bool"):
        confusion_matrix(np.zeros((2, 2)), np.zeros((2, 2), int), 2)
    with pytest.raises(ValueError, match="square"):
        iou_per_class(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="lack"):
        summarize(pd.DataFrame({"shift": ["a"], "tp": [1]}))


def test_summarize_accumulates_pixels_not_image_scores():
    counts = pd.DataFrame(
        [
            # a big object found well, a tiny one missed
            {"shift": "clean", "level": "0", "tp": 90, "fp": 10, "fn": 0, "tn": 900},
            {"shift": "clean", "level": "0", "tp": 0, "fp": 0, "fn": 10, "tn": 990},
            {"shift": "blur_bg", "level": "default", "tp": 0, "fp": 0, "fn": 0, "tn": 1000},
        ]
    )
    out = summarize(counts).set_index("shift")
    fg = 90 / (90 + 10 + 10)
    bg = 1890 / (1890 + 10 + 10)
    assert out.loc["clean", "fg_iou"] == pytest.approx(fg)
    assert out.loc["clean", "bg_iou"] == pytest.approx(bg)
    assert out.loc["clean", "miou"] == pytest.approx((fg + bg) / 2)
    assert out.loc["clean", "pixel_acc"] == pytest.approx(1980 / 2000)
    assert out.loc["clean", "image_fg_iou"] == pytest.approx((0.9 + 0.0) / 2)
    assert out.loc["clean", "n"] == 2
    # no foreground anywhere: fg IoU undefined, mIoU is the background's alone
    assert np.isnan(out.loc["blur_bg", "fg_iou"]) and out.loc["blur_bg", "miou"] == 1.0
    assert np.isnan(out.loc["blur_bg", "image_fg_iou"])


# ------------------------------------------------------------------ evaluator on real photos
@pytest.fixture(scope="module")
def masked_photos(samples_dir, tmp_path_factory):
    """4 real photos in class folders, each with an elliptic mask PNG."""
    return make_masked_folder(samples_dir, tmp_path_factory.mktemp("seg"), 4, 0.03)


@pytest.fixture(scope="module")
def seg_model():
    import torch

    from robustlab.workflows.segment import load_segmentation_model

    torch.manual_seed(0)
    return load_segmentation_model(
        "torchvision:lraspp_mobilenet_v3_large", weights="random", num_classes=3, device="cpu"
    )


def test_evaluator_counts_every_pixel_and_scores_per_scenario(masked_photos, seg_model):
    from robustlab.workflows.segment import evaluate_segmentation

    data, masks = masked_photos
    res = evaluate_segmentation(
        seg_model,
        data,
        masks=masks,
        suite="ximagenet12",
        shifts=["blur_bg", "segmented", "random_bg"],
        levels=None,
        seed=3,
        batch_size=5,
    )
    c = res.counts
    assert set(zip(c["shift"], c["level"])) == {
        ("clean", "0"),
        ("blur_bg", "default"),
        ("segmented", "default"),
        ("random_bg", "add"),
        ("random_bg", "paste"),
    }
    assert len(c) == 4 * 5 and not res.skipped
    assert (c[["tp", "fp", "fn", "tn"]].sum(axis=1) == 224 * 224).all()
    # the truth under the unmoved scenarios is the same mask as the clean one
    fg_truth = (c["tp"] + c["fn"]).groupby([c["sample_id"], c["shift"]]).first().unstack()
    assert (fg_truth["blur_bg"] == fg_truth["clean"]).all()
    assert (fg_truth["segmented"] == fg_truth["clean"]).all()
    s = res.summary.set_index(["shift", "level"])
    assert list(res.summary["shift"])[0] == "clean" and len(s) == 5
    assert ((s["pixel_acc"] >= 0) & (s["pixel_acc"] <= 1)).all()
    # the summary is the accumulated counts of each scenario
    g = c[c["shift"] == "segmented"][["tp", "fp", "fn", "tn"]].sum()
    assert s.loc[("segmented", "default"), "pixel_acc"] == pytest.approx((g.tp + g.tn) / g.sum())
    assert res.record["model"]["spec"] == "torchvision:lraspp_mobilenet_v3_large"


def test_prediction_that_equals_the_truth_scores_one(masked_photos):
    """An oracle 'network' that returns the mask itself scores mIoU 1 on unmoved scenarios
    and on random_bg (whose moved mask is replayed), proving the truths line up."""
    import torch

    from robustlab.workflows.segment import SegmentationModel, evaluate_segmentation

    data, masks = masked_photos

    class Oracle(torch.nn.Module):
        """Foreground = pixels that differ from the donor-free black fill of `segmented`."""

        def forward(self, x):
            # x is normalised; the segmented scenario has a black background, so the object
            # is where any channel is above black's normalised value.
            black = (0 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
            fg = (x - black.view(1, 3, 1, 1)).abs().amax(1) > 1e-4
            return torch.stack([(~fg).float(), fg.float()], 1)

    model = SegmentationModel(Oracle(), spec="oracle", device="cpu")
    res = evaluate_segmentation(model, data, masks=masks, shifts=["segmented"], seed=0)
    s = res.summary.set_index("shift")
    # object pixels that are exactly black would be missed; real photos have almost none
    assert s.loc["segmented", "miou"] > 0.999


def test_random_bg_truth_is_the_moved_object(masked_photos):
    from robustlab.data.sources import discover
    from robustlab.pipeline import apply_shift, load_prepared, shift_context
    from robustlab.workflows._masked import target_mask
    from robustlab.shifts.scenes import DonorPool
    from robustlab.suites import get_suite

    data, masks = masked_photos
    protocol = get_suite("ximagenet12").protocol
    samples = discover(data, masks=masks)
    s = samples[0]
    prep = load_prepared(s, protocol, with_mask=True)
    ctx = shift_context(s, prep, "random_bg", "paste", 7, protocol, DonorPool(samples))
    out = apply_shift(prep.rgb, s.id, "random_bg", "paste", 7, ctx)
    moved = target_mask(s, prep, "random_bg", "paste", 7)
    assert moved.sum() == (prep.mask > 0).sum()
    # the paste level copies the object's own pixels under the moved mask
    np.testing.assert_array_equal(
        np.sort(out[moved].reshape(-1)), np.sort(prep.rgb[prep.mask > 0].reshape(-1))
    )
    assert target_mask(s, prep, "no_fg", "default", 7) is None


def test_the_object_rule_is_a_field_of_each_shift_entry():
    """What a shift does to the object is stated where it is registered (one registry):
    the scenes that remove it are exactly those whose cells have no foreground to score."""
    from robustlab.workflows._masked import target_rule
    from robustlab.shifts.registry import list_shifts, register_shift

    rules = {s.name: s.target for s in list_shifts()}
    assert {n for n, r in rules.items() if r is None} == {"no_fg", "only_bg_b", "only_bg_t"}
    assert {n for n, r in rules.items() if r == "moved"} == {"random_bg"}
    assert target_rule("clean") == "same" and target_rule("blur_bg") == "same"
    with pytest.raises(ValueError, match="target must be one of"):
        register_shift("not_a_rule", family="test", params={1: 1}, target="gone")


def test_loader_refuses_missing_weights(tmp_path):
    from robustlab.workflows.segment import load_segmentation_model

    with pytest.raises(ValueError, match="needs weights"):
        load_segmentation_model("lraspp_mobilenet_v3_large")
    with pytest.raises(ValueError, match="unknown segmentation model"):
        load_segmentation_model("unet", weights="random")
    with pytest.raises(MissingResourceError, match="does not exist"):
        load_segmentation_model("lraspp_mobilenet_v3_large", weights=tmp_path / "none.pth")


def test_loader_round_trips_a_state_dict(tmp_path):
    import torch

    from robustlab.workflows.segment import load_segmentation_model

    torch.manual_seed(1)
    a = load_segmentation_model(
        "lraspp_mobilenet_v3_large", weights="random", num_classes=2, device="cpu"
    )
    path = tmp_path / "w.pth"
    torch.save(a.module.state_dict(), path)
    b = load_segmentation_model(
        "lraspp_mobilenet_v3_large", weights=path, num_classes=2, device="cpu"
    )
    x = [np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)]
    torch.testing.assert_close(a.logits(x), b.logits(x))
    assert len(b.weights_hash) == 16
    with pytest.raises(ValueError, match="do not fit"):
        load_segmentation_model(
            "lraspp_mobilenet_v3_large", weights=path, num_classes=5, device="cpu"
        )
