"""The 'segmentation' masking method: a user's own segmentation network as the masker."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from robustlab.masks.auto import AutoMasker
from robustlab.masks.quality import iou


class _NotBlack:
    """A real torch module whose class 1 is 'any channel above black' (known answer)."""

    def __new__(cls):
        import torch

        class Net(torch.nn.Module):
            def forward(self, x):
                black = (0 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor(
                    [0.229, 0.224, 0.225]
                )
                fg = (x - black.view(1, 3, 1, 1)).abs().amax(1) > 0.05
                return {"out": torch.stack([(~fg).float(), fg.float()], 1)}

        return Net()


@pytest.fixture(scope="module")
def object_on_black(samples_dir):
    """A real photo's central ellipse on black: the true mask is the ellipse."""
    rgb = np.asarray(Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB"))[
        :300, :400
    ].copy()
    h, w = rgb.shape[:2]
    yy, xx = np.mgrid[:h, :w]
    truth = ((yy - h / 2) / (h / 3)) ** 2 + ((xx - w / 2) / (w / 3)) ** 2 <= 1
    rgb[~truth] = 0
    rgb[truth] = np.maximum(rgb[truth], 30)  # no object pixel is black itself
    return rgb, truth


def test_segmentation_masker_returns_the_networks_foreground(object_on_black):
    from robustlab.workflows.segment import SegmentationModel

    rgb, truth = object_on_black
    seg = SegmentationModel(_NotBlack(), spec="not-black", device="cpu")
    masker = AutoMasker("segmentation", segmenter=seg)
    mask, info = masker(rgb)
    assert info["seed"] == "segmentation" and mask.shape == truth.shape and mask.dtype == bool
    assert iou(mask, truth) > 0.97  # only the work-copy resize (max_side 256) blurs the edge
    # a box clips the prediction to itself
    boxed, _ = masker(rgb, bbox=(0, 0, 200, 300))
    assert (
        not boxed[:, 200:].any()
        and iou(boxed, truth[:, :] & (np.arange(400) < 200)[None, :]) > 0.95
    )


def test_segmentation_method_needs_a_segmenter():
    with pytest.raises(ValueError, match="needs a segmenter"):
        AutoMasker("segmentation")
    with pytest.raises(ValueError, match="only it takes one"):
        AutoMasker("grabcut", segmenter=object())


def test_cli_segmentation_masks_with_a_torchvision_checkpoint(samples_dir, tmp_path, capsys):
    """End to end through `robustlab masks` with a real (random-weight) torchvision network."""
    import shutil

    import torch
    import torchvision.models.segmentation as tvs

    from robustlab.cli import main

    data = tmp_path / "data" / "n01440764"
    data.mkdir(parents=True)
    for f in sorted(samples_dir.glob("*.JPEG"))[:2]:
        shutil.copy(f, data / f.name)
    net = tvs.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=21)
    torch.save(net.state_dict(), tmp_path / "seg.pth")
    out = tmp_path / "masks"
    rc = main(
        [
            "masks",
            "--data",
            str(tmp_path / "data"),
            "--out",
            str(out),
            "--method",
            "segmentation",
            "--seg-model",
            "torchvision:lraspp_mobilenet_v3_large",
            "--seg-weights",
            str(tmp_path / "seg.pth"),
        ]
    )
    assert rc == 0
    assert "masks: 2 images" in capsys.readouterr().out
    assert (out / "masks_quality.csv").read_text().count("\n") == 3  # header + one row per image
    assert (
        main(
            [
                "masks",
                "--data",
                str(tmp_path / "data"),
                "--out",
                str(out),
                "--method",
                "segmentation",
                "--seg-model",
                "torchvision:lraspp_mobilenet_v3_large",
            ]
        )
        == 2
    )
