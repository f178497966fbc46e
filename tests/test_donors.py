"""One donor pool for every path: generate, on-the-fly evaluate, segment (issue 8, case 3).

The data set is partially masked on purpose: before the fix ``generate`` drew ImageNet-9
mix donors among masked samples only, on-the-fly evaluation among all samples and
``segment`` among the first ``--limit`` masked ones, so the "same" cell had different
pixels depending on the path.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab import pipeline
from robustlab.data.sources import discover
from robustlab.workflows.generate import generate
from robustlab.shifts.registry import get_shift
from robustlab.shifts.scenes import DonorPool
from robustlab.suites import get_suite

CLASSES = ("n01440764", "n01443537", "n01484850")  # ImageNet-1k wnids: tench, goldfish, shark
MASKED = {
    "n01440764/x0.png",
    "n01440764/x2.png",
    "n01443537/x1.png",
    "n01484850/x0.png",
    "n01484850/x3.png",
}
MIXES = ["mixed_same", "mixed_rand", "mixed_next"]


def _photo(rng, h: int, w: int) -> np.ndarray:
    """Smooth colour gradients plus noise: real-looking enough for the scene shifts."""
    yy, xx = np.mgrid[:h, :w] / max(h, w)
    base = np.stack([yy, xx, 1 - yy], axis=2) * rng.uniform(80, 200, size=3)
    return np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("donors")
    rng = np.random.default_rng(3)
    data, masks = root / "data", root / "masks"
    for c in CLASSES:
        for i in range(4):
            h, w = int(rng.integers(60, 90)), int(rng.integers(60, 90))
            (data / c).mkdir(parents=True, exist_ok=True)
            Image.fromarray(_photo(rng, h, w)).save(data / c / f"x{i}.png")
            if f"{c}/x{i}.png" in MASKED:
                yy, xx = np.mgrid[:h, :w]
                m = ((yy - h / 2) / (0.3 * h)) ** 2 + ((xx - w / 2) / (0.3 * w)) ** 2 <= 1
                (masks / c).mkdir(parents=True, exist_ok=True)
                Image.fromarray(m.astype(np.uint8) * 255).save(masks / c / f"x{i}.png")
    return data, masks


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0", device="cpu")


def _generated(out: Path, samples, cells, protocol) -> dict:
    files = {}
    for s in samples:
        for shift, level in cells:
            p = pipeline.cell_path(out, s, shift, level, protocol)
            if p.exists():
                files[(s.id, shift, level)] = pipeline.decode(p.read_bytes())[..., :3]
    return files


def test_donor_pool_rule_does_not_depend_on_the_selection(dataset):
    data, masks = dataset
    samples = discover(data, masks=masks)
    pool = DonorPool(samples)
    mixed, random_bg = get_shift("mixed_rand"), get_shift("random_bg")
    assert {s.id for c in pool.index(mixed).by_class.values() for s in c} == MASKED
    assert sum(len(c) for c in pool.index(random_bg).by_class.values()) == len(samples)
    # Whatever subset is processed, the pool is the data set's (pickled, it is the same).
    import pickle

    again = pickle.loads(pickle.dumps(pool))
    rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(1)
    assert pool.choose(samples[0], mixed, rng_a) == again.choose(samples[0], mixed, rng_b)


def test_generated_and_on_the_fly_pixels_agree_with_partial_masks_and_limit(
    dataset, tmp_path, lite0
):
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    data, masks = dataset
    out = tmp_path / "gen"
    res = generate(
        "imagenet9", data, out, shifts=MIXES, masks=masks, limit=4, progress=False, workers=0
    )
    assert res.written > 0
    samples = discover(data, masks=masks)
    cells = [(n, "default") for n in MIXES]
    generated = _generated(out, samples, cells, get_suite("imagenet9").protocol)
    assert len(generated) == res.written

    plan = make_plan(
        EvaluateRequest.build(
            lite0, data, suite="imagenet9", shifts=MIXES, masks=masks, label_space="imagenet1k"
        )
    )
    images = plan.images
    by_id = {s.id: s for s in plan.samples}
    for (sid, shift, level), img in generated.items():
        s = by_id[sid]
        fly = images.cell(s, images.base(s), shift, level)
        assert np.array_equal(fly, img), f"{sid} {shift}: on-the-fly pixels differ"


class _Recording:
    """A real (untrained) segmentation network that also keeps the images it was given."""

    def __init__(self):
        import torch

        from robustlab.workflows.segment import SegmentationModel

        torch.manual_seed(0)
        self.model = SegmentationModel(torch.nn.Conv2d(3, 2, 1), spec="conv", device="cpu")
        self.seen: dict = {}

    def __getattr__(self, name):
        return getattr(self.model, name)

    def foreground(self, images):
        self.seen.setdefault("batches", []).append([np.array(i) for i in images])
        return self.model.foreground(images)


def test_segment_uses_the_same_donors_as_generate_despite_limit(dataset, tmp_path):
    from robustlab.workflows.segment import evaluate_segmentation

    data, masks = dataset
    out = tmp_path / "gen"
    generate("ximagenet12", data, out, shifts=["random_bg"], masks=masks, progress=False, workers=0)
    protocol = get_suite("ximagenet12").protocol
    samples = discover(data, masks=masks)
    cells = [("random_bg", "add"), ("random_bg", "paste")]
    generated = _generated(out, samples, cells, protocol)
    rec = _Recording()
    res = evaluate_segmentation(
        rec, data, masks=masks, suite="ximagenet12", shifts=["random_bg"], limit=2, batch_size=1
    )
    assert res.skipped == [
        (s.id, "no mask in the masks folder") for s in samples if s.id not in MASKED
    ]
    images = [b[0] for b in rec.seen["batches"]]
    rows = list(zip(res.counts["sample_id"], res.counts["shift"], res.counts["level"]))
    compared = 0
    for (sid, shift, level), img in zip(rows, images):
        if shift == "clean":
            continue
        assert np.array_equal(img, generated[(sid, shift, level)]), f"{sid} {shift}/{level}"
        compared += 1
    assert compared == 4  # 2 samples x 2 levels
