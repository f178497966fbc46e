"""Fine-tuning, splits and the EX1/EX2 protocols on a tiny real set.

The shared photos hold one image per class, so each class here gets several different
crops of its photo (real pixels, different framing) with an elliptic object mask.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest

from robustlab.workflows.train import TrainConfig, split_samples
from robustlab.workflows.train.splits import Split

N_CLASSES, N_CROPS = 4, 4


@pytest.fixture(scope="module")
def crops(samples_dir, tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("train")
    data, masks = root / "data", root / "masks"
    rows = [
        r
        for r in csv.DictReader(open(samples_dir / "labels.csv"))
        if min(Image.open(samples_dir / r["file"]).size) >= 200
    ][:N_CLASSES]
    for r in rows:
        img = Image.open(samples_dir / r["file"]).convert("RGB")
        w, h = img.size
        (data / r["wnid"]).mkdir(parents=True)
        (masks / r["wnid"]).mkdir(parents=True)
        for k in range(N_CROPS):
            s = 0.7 + 0.08 * (k % 3)
            cw, ch = int(w * s), int(h * s)
            x0, y0 = (
                int((w - cw) * k / (N_CROPS - 1)),
                int((h - ch) * ((3 * k) % N_CROPS) / (N_CROPS - 1)),
            )
            stem = f"{Path(r['file']).stem}_{k}"
            img.crop((x0, y0, x0 + cw, y0 + ch)).save(data / r["wnid"] / f"{stem}.JPEG", quality=95)
            yy, xx = np.mgrid[:ch, :cw]
            m = ((yy - ch / 2) / (0.35 * ch)) ** 2 + ((xx - cw / 2) / (0.3 * cw)) ** 2 <= 1
            Image.fromarray(m.astype(np.uint8) * 255).save(masks / r["wnid"] / f"{stem}.png")
    return data, masks


class _S:
    def __init__(self, i):
        self.id = i


def test_split_is_stratified_deterministic_and_order_free():
    ids = [f"c{c}/img{i}" for c in range(3) for i in range(10)]
    labels = [int(i[1]) for i in ids]
    a = split_samples([_S(i) for i in ids], labels, test_fraction=0.3, seed=1)
    assert len(a.test) == 9 and len(a.train) == 21
    assert all(sum(t.startswith(f"c{c}/") for t in a.test) == 3 for c in range(3))
    b = split_samples([_S(i) for i in reversed(ids)], labels[::-1], test_fraction=0.3, seed=1)
    assert a == b
    assert split_samples([_S(i) for i in ids], labels, test_fraction=0.3, seed=2).test != a.test
    assert not set(a.train) & set(a.test)
    # a one-image class cannot be on both sides: it trains
    c = split_samples([_S("x/1"), _S("y/1"), _S("y/2")], [0, 1, 1], test_fraction=0.5)
    assert c.train == ("x/1", "y/1") or c.train == ("x/1", "y/2")
    with pytest.raises(ValueError, match="empty side"):
        split_samples([_S("x/1"), _S("y/1")], [0, 1])
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_samples([_S("x/1")], [0], test_fraction=1.0)
    with pytest.raises(ValueError, match="training mode"):
        TrainConfig(mode="lora")


@pytest.fixture(scope="module")
def split(crops):
    from robustlab.models import load_model
    from robustlab.workflows.train import make_split

    data, masks = crops
    return make_split(load_model("lite0", device="cpu"), data, masks=masks, test_fraction=0.25)


def test_linear_probe_loss_decreases_and_checkpoint_round_trips(crops, split, tmp_path):
    import torch

    from robustlab.models import load_model
    from robustlab.workflows.train import train_on_cells

    data, masks = crops
    assert len(split.train) == 12 and len(split.test) == 4
    cfg = TrainConfig(mode="linear", steps=15, batch_size=6, lr=3e-3)
    tr = train_on_cells(
        "lite0",
        data,
        [("segmented", "default")],
        split,
        config=cfg,
        out=tmp_path,
        masks=masks,
        device="cpu",
    )
    first, last = np.mean(tr.losses[:3]), np.mean(tr.losses[-3:])
    assert len(tr.losses) == 15 and last < first
    rec = json.loads(tr.checkpoint.with_suffix(".json").read_text())
    assert rec["cells"] == [["segmented", "default"]] and rec["n_train_images"] == 12
    assert rec["split"]["fingerprint"] == split.fingerprint
    # the checkpoint is a plain lite0 state dict: only the head moved in a linear probe
    base = load_model("lite0", device="cpu").module.state_dict()
    tuned = torch.load(tr.checkpoint, weights_only=True)
    changed = {k for k in base if not torch.equal(base[k], tuned[k])}
    assert changed == {"classifier.weight", "classifier.bias"}
    m = load_model("lite0", weights=tr.checkpoint, device="cpu")
    assert m.weights_hash == rec["weights_hash"]
    # same config, same split: the checkpoint is reused, not retrained
    again = train_on_cells(
        "lite0",
        data,
        [("segmented", "default")],
        split,
        config=cfg,
        out=tmp_path,
        masks=masks,
        device="cpu",
    )
    assert again.reused and again.checkpoint == tr.checkpoint


@pytest.mark.slow
def test_full_fine_tune_moves_the_backbone_but_not_batchnorm_stats(crops, split, tmp_path):
    import torch

    from robustlab.models import load_model
    from robustlab.workflows.train import train_on_cells

    data, masks = crops
    tr = train_on_cells(
        "lite0",
        data,
        [("clean", 0)],
        split,
        out=tmp_path,
        masks=masks,
        device="cpu",
        config=TrainConfig(mode="full", steps=2, batch_size=4),
    )
    assert len(tr.losses) == 2 and all(np.isfinite(tr.losses))
    base = load_model("lite0", device="cpu").module.state_dict()
    tuned = torch.load(tr.checkpoint, weights_only=True)
    assert not torch.equal(base["conv_stem.weight"], tuned["conv_stem.weight"])
    stats = [k for k in base if k.endswith(("running_mean", "running_var"))]
    assert stats and all(torch.equal(base[k], tuned[k]) for k in stats)


def test_mapping_label_space_is_refused(crops, split, tmp_path):
    from robustlab.models import load_model
    from robustlab.workflows.train import finetune

    model = load_model("lite0", device="cpu", label_space="imagenet9")
    with pytest.raises(ValueError, match="no single training target"):
        finetune(model, [], [], [("clean", 0)], None, TrainConfig(), tmp_path / "x.pth")


@pytest.mark.long
def test_cli_protocols_store_runs_and_score(crops, tmp_path, capsys):
    from robustlab.cli import main
    from robustlab.store import Store

    data, masks = crops
    db = tmp_path / "r.duckdb"
    argv = [
        "train",
        "lite0",
        "--data",
        str(data),
        "--masks",
        str(masks),
        "--shift",
        "segmented",
        "--steps",
        "8",
        "--train-batch-size",
        "6",
        "--test-fraction",
        "0.25",
        "--out",
        str(tmp_path / "ckpt"),
        "--db",
        str(db),
        "--device",
        "cpu",
    ]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "robustness score S_robust" in out.out
    # progress lines (stderr is not a terminal): each training from 0 to its last step
    for cell in ("clean", "segmented"):
        lines = [ln for ln in out.err.splitlines() if ln.startswith(f"train on {cell}")]
        assert lines[0] == f"train on {cell}: 0/8 (0 %)"
        assert re.fullmatch(rf"train on {cell}: 8/8 \(100 %\), .*, loss [0-9.]+", lines[-1])
    store = Store(db)
    runs = store.runs()
    assert len(runs) == 2  # EX1 (trained on clean) and EX2 (trained on segmented)
    for _, r in runs.iterrows():
        cfg = r["config"] if isinstance(r["config"], dict) else json.loads(r["config"])
        assert r["model_spec"] == "lite0" and cfg["fine_tuned"]["config"]["mode"] == "linear"
        assert r["weights_hash"] == cfg["fine_tuned"]["weights_hash"]
        assert cfg["split"]["part"] == "test" and r["n_samples"] == 4
    cells = store.cell_table()
    assert set(zip(cells["shift"], cells["level"])) == {("clean", "0"), ("segmented", "default")}
    assert (cells["n"] == 4).all() and len(cells) == 4
    n_rows = store.count()
    # a rerun reuses both checkpoints and adds no rows
    assert main(argv) == 0
    assert "reused" in capsys.readouterr().err and store.count() == n_rows
    # EX1 alone gives a partial score
    assert (
        main(
            [*argv[:-4], "--db", str(tmp_path / "p.duckdb"), "--protocol", "ex1", "--device", "cpu"]
        )
        == 0
    )
    assert "partial robustness score" in capsys.readouterr().out


def test_scenario_score_from_runs():
    import pandas as pd

    from robustlab.workflows.train import scenario_score

    runs = pd.DataFrame(
        [
            {
                "protocol": "ex1",
                "trained_on": "clean",
                "tested_on": "clean",
                "shift": "clean",
                "top1": 0.9,
            },
            {"protocol": "ex1", "trained_on": "clean", "tested_on": "a", "shift": "a", "top1": 0.7},
            {"protocol": "ex1", "trained_on": "clean", "tested_on": "b", "shift": "b", "top1": 0.8},
            {
                "protocol": "ex2",
                "trained_on": "a",
                "tested_on": "clean",
                "shift": "clean",
                "top1": 0.5,
            },
            {"protocol": "ex2", "trained_on": "a", "tested_on": "a", "shift": "a", "top1": 0.85},
        ]
    )
    sc = scenario_score(runs, ["a", "b"])
    assert sc.mu == 0.9 and sc.sigma2_cross == pytest.approx((0.04 + 0.01) / 2)
    assert sc.sigma2_inner == pytest.approx(0.0025) and sc.missing_inner == ("b",)
    assert sc.s_robust is None and sc.s_partial == pytest.approx(1 - 0.025 - 0.0025)
    assert scenario_score(runs[runs["protocol"] == "ex2"], ["a"]) is None


def test_split_dataclass_describe(split):
    assert isinstance(split, Split)
    d = split.describe()
    assert d["n_train"] == 12 and d["n_test"] == 4 and len(d["fingerprint"]) == 32


def test_keywords_go_to_the_spec_that_owns_them_and_a_misspelt_one_is_a_type_error(tmp_path):
    """``run_protocol``/``run_method``/``train_on_cells`` keep their keyword signatures: each
    keyword lands in the typed spec of its name; an unknown one fails before anything runs,
    as Python's own TypeError with the closest names."""
    from robustlab.errors import InputError
    from robustlab.workflows.train import run_protocol, train_on_cells
    from robustlab.workflows.train.methods import run_method
    from robustlab.workflows.train.request import TrainRequest

    config = TrainConfig(steps=3)
    r = TrainRequest.from_keywords(
        "run_protocol",
        "lite0",
        tmp_path,
        {"masks": "m", "config": config, "split_seed": 4, "levels": [2], "db": "x.duckdb"},
    )
    assert (r.model.model_spec, r.model.config, r.data.data) == ("lite0", config, tmp_path)
    assert (r.data.masks, r.data.split_seed, r.cells.levels) == ("m", 4, [2])
    assert r.execution.db == "x.duckdb" and r.cells.suite == "ximagenet12"
    with pytest.raises(TypeError, match=r"run_protocol\(\) .* 'mask'; did you mean masks\?"):
        run_protocol("lite0", tmp_path, mask="m")
    with pytest.raises(TypeError, match=r"run_method\(\) .* 'confg'; did you mean config\?"):
        run_method("lite0", tmp_path, [None], confg=config)
    with pytest.raises(TypeError, match=r"train_on_cells\(\) .* 'zzz'$"):
        train_on_cells("lite0", tmp_path, [("clean", 0)], None, zzz=1)
    # A bad pixel defence is refused when the request is made, before any training.
    with pytest.raises(InputError, match="clahee"):
        run_protocol("lite0", tmp_path, preprocess="clahee")
