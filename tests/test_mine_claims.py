"""ImageNet-D's two mining claims on a small real pool (slow; needs ../shared/data): ImageNet-C
severities 3-5 of real ImageNet photos, the three bundled models, each held out in turn.
benchmarks/mining.py measures the same on a larger pool (numbers in benchmarks/README.md)."""

from __future__ import annotations

import csv
import shutil

import numpy as np
import pytest

from robustlab.workflows.imagenet_d.mine import mine
from robustlab.workflows.imagenet_d.mine.analysis import leave_one_out, stored_correctness
from robustlab.store import Store

MODELS = ("lite0", "lite1", "lite2")


@pytest.mark.slow
def test_more_surrogates_harder_set_and_failures_transfer(full_samples_dir, tmp_path):
    samples_dir = full_samples_dir  # the claims need the 500 classes
    from robustlab.workflows.generate import generate
    from robustlab.models import load_model

    with open(samples_dir / "labels.csv") as fh:
        rows = list(csv.DictReader(fh))[::50][:10]  # 10 photos spread over the classes
    data = tmp_path / "data"
    for r in rows:
        (data / r["wnid"]).mkdir(parents=True)
        shutil.copy(samples_dir / r["file"], data / r["wnid"] / r["file"])
    gen = tmp_path / "gen"
    generate(
        "imagenet-c",
        data,
        gen,
        shifts=[
            "gaussian_noise",
            "defocus_blur",
            "fog",
            "contrast",
            "pixelate",
            "jpeg_compression",
        ],
        levels=[3, 4, 5],
        workers=0,
        progress=False,
    )
    db = tmp_path / "r.duckdb"
    models = [load_model(m, device="cpu") for m in MODELS]
    res = mine(gen, surrogates=models, db=db, workers=0, progress=False)
    table, correct = stored_correctness(Store(db), [[r] for r in res.run_ids], list(MODELS))
    assert correct.shape == (180, 3) and len(res.kept) == int((~correct).all(axis=1).sum())
    rotations = leave_one_out(correct, list(MODELS), draws=1000, seed=0)
    on_pool, one, two, mined, random = [], [], [], [], []
    for rot in rotations:
        c1, c2 = rot["curve"]
        assert c2["kept_fraction"] <= c1["kept_fraction"]
        on_pool.append(c1["heldout_acc_all"])
        one.append(c1["heldout_acc"])
        two.append(c2["heldout_acc"])
        t = rot["transfer"]
        # Claim 2, per held-out model: shared failures of the others are its failures too.
        assert t["mined_acc"] < t["random_lo"] and t["p_value"] < 0.01, rot
        mined.append(t["mined_acc"])
        random.append(t["random_mean"])
    # Claim 1, averaged over the held-out models: a second surrogate makes the kept set harder.
    assert np.mean(two) <= np.mean(one) < np.mean(on_pool)
