"""Surface-variation protocols: splits, readers (folder, ICONS-50, CIFAR-100), stored runs."""

from __future__ import annotations

import json
import logging
import pickle

import numpy as np
import pandas as pd
import pytest
from conftest import RunsACommand
from PIL import Image, ImageDraw

from robustlab.cli import main
from robustlab.errors import InputError
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.workflows.train import holdout as ho
from robustlab.models import networks as nw

SHAPES = ("circle", "square", "cross")
STYLES = {"red": ((220, 30, 30), None), "blue": ((30, 60, 220), None), "outline": (None, (0, 0, 0))}


def _draw(shape: str, size: int, style: str, dx: int) -> np.ndarray:
    fill, outline = STYLES[style]
    im = Image.new("RGB", (32, 32), "white")
    d = ImageDraw.Draw(im)
    box = (16 - size + dx, 16 - size, 16 + size + dx, 16 + size)
    if shape == "circle":
        d.ellipse(box, fill=fill, outline=outline, width=2)
    elif shape == "square":
        d.rectangle(box, fill=fill, outline=outline, width=2)
    else:
        x0, y0, x1, y1 = box
        d.rectangle((x0, 14, x1, 18), fill=fill or outline)
        d.rectangle((14 + dx, y0, 18 + dx, y1), fill=fill or outline)
    return np.asarray(im)


@pytest.fixture(scope="module")
def shapes_folder(tmp_path_factory):
    """3 classes (shapes) x 2 subtypes (small, big) x 3 styles x 4 versions (offsets)."""
    root = tmp_path_factory.mktemp("shapes")
    rows = []
    for shape in SHAPES:
        for sub, size in (("small", 7), ("big", 11)):
            for style in STYLES:
                (root / style / shape).mkdir(parents=True, exist_ok=True)
                for v, dx in enumerate((-3, -1, 1, 3)):
                    f = f"{style}/{shape}/{sub}_{v}.png"
                    Image.fromarray(_draw(shape, size, style, dx)).save(root / f)
                    rows.append(
                        {
                            "file": f,
                            "class": shape,
                            "subtype": f"{shape}-{sub}",
                            "style": style,
                            "version": f"v{v}",
                        }
                    )
    pd.DataFrame(rows).to_csv(root / "metadata.csv", index=False)
    return root


def test_style_holdout_trains_on_the_other_styles(shapes_folder):
    meta = ho.read_folder(shapes_folder).meta
    sp = ho.split_column(meta, "style=outline", seed=0, test_fraction=0.25)
    style = meta["style"].to_numpy()
    assert set(style[list(sp.held)]) == {"outline"} and len(sp.held) == 24
    assert "outline" not in set(style[list(sp.train)]) | set(style[list(sp.seen)])
    assert not set(sp.train) & set(sp.seen) and len(sp.train) + len(sp.seen) == 48
    # Each class keeps its share of the in-distribution test.
    assert meta["class"].to_numpy()[list(sp.seen)].tolist().count("circle") == 4
    again = ho.split_column(meta, "style=outline", seed=0, test_fraction=0.25)
    other = ho.split_column(meta, "style=outline", seed=1, test_fraction=0.25)
    assert again == sp and other.seen != sp.seen and other.held == sp.held
    assert sp.fingerprint(meta) != other.fingerprint(meta)


def test_subtype_holdout_keeps_every_class_in_training(shapes_folder):
    meta = ho.read_folder(shapes_folder).meta
    sp = ho.split_subtypes(meta, 1, seed=3)
    held = meta.iloc[list(sp.held)]
    assert held.groupby("class")["subtype"].nunique().to_dict() == dict.fromkeys(SHAPES, 1)
    train = meta.iloc[list(sp.train)]
    assert set(train["class"]) == set(SHAPES)
    assert not set(train["subtype"]) & set(held["subtype"])
    # N larger than a class's subtypes: all but one are held out, never all.
    assert len(ho.split_subtypes(meta, 5).held) == len(sp.held)
    named = ho.split_subtypes(meta, ["circle-big", "cross-small"])
    assert set(meta.iloc[list(named.held)]["subtype"]) == {"circle-big", "cross-small"}
    assert named.label == "subtypes:circle-big,cross-small"


def test_version_control_holds_out_one_version_of_each_icon(shapes_folder):
    meta = ho.read_folder(shapes_folder).meta
    sp = ho.split_versions(meta, seed=0)
    held = meta.iloc[list(sp.held)]
    # 3 shapes x 2 subtypes x 3 styles icons, one version each
    assert len(held) == 18 and held.groupby(["subtype", "style"]).size().eq(1).all()
    assert set(meta.iloc[list(sp.train)]["subtype"]) == set(meta["subtype"])


def test_bad_holdouts_are_one_line_errors(shapes_folder):
    meta = ho.read_folder(shapes_folder).meta
    with pytest.raises(
        InputError, match="no image has style='microsoft'; choose from blue, outline, red"
    ):
        ho.split_column(meta, "style=microsoft")
    with pytest.raises(
        InputError, match="needs a 'vendor' column; the data has class, subtype, style, version"
    ):
        ho.split_column(meta, "vendor=apple")
    with pytest.raises(InputError, match="COLUMN=VALUE"):
        ho.split_column(meta, "outline")
    one_style = meta.assign(style="red")
    with pytest.raises(InputError, match="covers every image: nothing is left to train on"):
        ho.split_column(one_style, "style=red")
    # A class drawn only in the held-out style has nothing to learn from.
    lonely = meta[(meta["class"] != "cross") | (meta["style"] == "outline")].reset_index(drop=True)
    with pytest.raises(InputError, match="cross have no training image outside style=outline"):
        ho.split_column(lonely, "style=outline")
    with pytest.raises(InputError, match="cross have no training image outside"):
        ho.split_subtypes(meta, ["cross-small", "cross-big"])
    with pytest.raises(InputError, match="no subtype 'duck'; choose from circle-big"):
        ho.split_subtypes(meta, ["duck"])
    with pytest.raises(InputError, match="no icon has several versions"):
        ho.split_versions(meta.assign(version="v0"))
    with pytest.raises(InputError, match="needs a 'version' column"):
        ho.split_versions(meta.drop(columns="version"))
    with pytest.raises(InputError, match="exactly one of"):
        ho.make_split(meta, holdout="style=red", versions=True)


def _fake_cifar100(root):
    """CIFAR-100's python layout: train/test/meta pickles with bytes keys, 3072-byte rows."""
    d = root / "cifar-100-python"
    d.mkdir()
    fine = ["apple", "pear", "dolphin", "whale", "seal"]
    coarse = ["fruit_and_vegetables", "aquatic_mammals"]
    fine_to_coarse = [0, 0, 1, 1, 1]
    rng = np.random.default_rng(0)
    for split, n in (("train", 4), ("test", 2)):
        fl = [f for f in range(5) for _ in range(n)]
        data = rng.integers(0, 256, size=(len(fl), 3072), dtype=np.uint8)
        with open(d / split, "wb") as fh:
            pickle.dump(
                {
                    b"filenames": [f"{split}_{i}.png".encode() for i in range(len(fl))],
                    b"batch_label": split.encode(),
                    b"fine_labels": fl,
                    b"coarse_labels": [fine_to_coarse[f] for f in fl],
                    b"data": data,
                },
                fh,
                protocol=2,  # as the release's (Python 2) pickles
            )
    with open(d / "meta", "wb") as fh:
        pickle.dump(
            {
                b"fine_label_names": [f.encode() for f in fine],
                b"coarse_label_names": [c.encode() for c in coarse],
            },
            fh,
            protocol=2,
        )
    return data


def test_cifar100_reader_superclasses_and_subtype_protocol(tmp_path):
    last_test = _fake_cifar100(tmp_path)
    ds = ho.read_set(tmp_path)
    assert ds.name == "cifar100" and ds.classes == ["aquatic_mammals", "fruit_and_vegetables"]
    m = ds.meta
    assert len(m) == 30 and set(m["split"]) == {"train", "test"}
    assert set(m[m["class"] == "aquatic_mammals"]["subtype"]) == {"dolphin", "whale", "seal"}
    # Pixels: the row's 3072 bytes are 3 planes of 32 x 32.
    i = int(np.flatnonzero(m["id"] == "test/test_9.png")[0])
    assert (ds.load([i], 32)[0] == last_test[9].reshape(3, 32, 32).transpose(1, 2, 0)).all()
    sp = ho.split_subtypes(m, 1, seed=0)
    held, train = m.iloc[list(sp.held)], m.iloc[list(sp.train)]
    assert set(held["split"]) == {"test"} and set(train["split"]) == {"train"}
    assert held.groupby("class")["subtype"].nunique().eq(1).all()
    assert set(m.iloc[list(sp.seen)]["split"]) == {"test"}
    marker = tmp_path / "ran"
    with open(tmp_path / "cifar-100-python" / "meta", "wb") as fh:
        pickle.dump({b"fine_label_names": RunsACommand(marker)}, fh, protocol=2)
    with pytest.raises(InputError, match="meta is refused: it asks for"):
        ho.read_set(tmp_path)
    assert not marker.exists()


def test_icons50_reader(tmp_path):
    rng = np.random.default_rng(1)
    n = 6
    np.save(
        tmp_path / "Icons-50.npy",
        {
            "image": rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
            "class": [0, 0, 0, 1, 1, 1],
            "style": ["apple", "google", "microsoft"] * 2,
            "subtype": ["duck", "owl", "duck", "cat", "cat", "tiger"],
            "rendition": ["ios-10", "7.0", "win10"] * 2,
        },
        allow_pickle=True,
    )
    ds = ho.read_set(tmp_path)
    assert ds.name == "icons50" and ds.classes == ["0", "1"]
    before = ds.fingerprint
    d = np.load(tmp_path / "Icons-50.npy", allow_pickle=True).item()
    d["image"][0, 0, 0, 0] ^= 1  # one pixel of one icon
    np.save(tmp_path / "Icons-50.npy", d, allow_pickle=True)
    assert ho.read_set(tmp_path).fingerprint != before
    assert list(ds.meta["style"]) == ["apple", "google", "microsoft"] * 2
    assert ds.load([2], 32).shape == (1, 32, 32, 3)
    sp = ho.split_column(ds.meta, "style=microsoft")
    assert len(sp.held) == 2
    (tmp_path / "x").mkdir()
    np.save(tmp_path / "x" / "Icons-50.npy", np.arange(3))
    with pytest.raises(InputError, match="not ICONS-50"):
        ho.read_icons50(tmp_path / "x")
    # A doctored file is refused before its code runs (robustlab.data.pickles).
    marker = tmp_path / "ran"
    np.save(tmp_path / "x" / "Icons-50.npy", {"image": RunsACommand(marker)}, allow_pickle=True)
    with pytest.raises(InputError, match="Icons-50.npy is refused: it asks for") as e:
        ho.read_icons50(tmp_path / "x")
    assert "download it again" in e.value.hint and not marker.exists()


def test_folder_reader_refuses_missing_files_and_columns(tmp_path):
    (tmp_path / "metadata.csv").write_text("file,label\na.png,x\n")
    with pytest.raises(InputError, match="has no class column"):
        ho.read_folder(tmp_path)
    (tmp_path / "metadata.csv").write_text("file,class\na.png,x\n")
    with pytest.raises(InputError, match="1 file\\(s\\) .* are not in"):
        ho.read_folder(tmp_path)


def test_folder_reader_never_reads_outside_its_folder(shapes_folder, tmp_path):
    """A metadata row may not name a file outside the data folder: an absolute path, one
    that climbs out with '..', a link that leaves the folder, or a folder. A link that stays
    inside is read."""
    import shutil

    root = tmp_path / "data"
    shutil.copytree(shapes_folder, root)
    secret = tmp_path / "secret.png"
    shutil.copy(root / ho.read_folder(root).meta["id"][0], secret)
    (root / "out.png").symlink_to(secret)
    (root / "in.png").symlink_to(root / ho.read_folder(root).meta["id"][0])
    (root / "adir").mkdir()
    rows = (root / "metadata.csv").read_text().splitlines()
    for bad in (str(secret), "../secret.png", "out.png", "adir"):
        (root / "bad.csv").write_text("\n".join([*rows, f"{bad},circle,,,"]) + "\n")
        with pytest.raises(InputError, match="1 file\\(s\\) .* not regular files inside") as e:
            ho.read_folder(root, metadata=root / "bad.csv")
        assert repr(bad) in str(e.value) and "'..'" in e.value.hint
    (root / "ok.csv").write_text("\n".join([*rows, "in.png,circle,,,"]) + "\n")
    ds = ho.read_folder(root, metadata=root / "ok.csv")
    (k,) = np.flatnonzero(ds.meta["id"] == "in.png")
    assert ds.load([k], 32).shape == (1, 32, 32, 3)


def test_protocol_run_is_stored_reused_and_reported(shapes_folder, tmp_path):
    ds = ho.read_folder(shapes_folder)
    sp = ho.split_versions(ds.meta, seed=0)
    cfg = ho.HoldoutConfig(width=8, epochs=6, batch_size=16, lr=1e-2, seed=0)
    db = tmp_path / "r.duckdb"
    res = ho.run_holdout(ds, sp, cfg, db=db, out=tmp_path / "ck")
    assert not res.reused and res.checkpoint.is_file() and len(res.losses) == 6
    assert res.losses[-1] < res.losses[0]
    assert res.n_held == 18 and res.n_seen == len(sp.seen)
    # Shapes whose sibling versions were trained on: well above chance (1/3).
    assert res.held_top1 >= 0.6
    store = Store(db)
    run = store.get_run(res.run_id)
    assert run["suite"] == ho.SUITE and run["status"] == "finished"
    assert run["config"]["holdout"]["held_out"] == "versions:one-per-icon"
    preds = store.predictions([res.run_id])
    assert set(preds["shift"]) == {CLEAN_SHIFT, ho.HOLDOUT_SHIFT}
    assert preds[preds["shift"] == ho.HOLDOUT_SHIFT]["correct"].mean() == pytest.approx(
        res.held_top1
    )
    again = ho.run_holdout(ds, sp, cfg, db=db, out=tmp_path / "ck")
    assert again.reused and again.run_id == res.run_id
    assert again.held_top1 == pytest.approx(res.held_top1)
    from robustlab.workflows.report.benchmark_data import holdout_table

    table = holdout_table(store.runs(), store.cell_table())
    assert table.iloc[0]["protocol"] == "versions" and table.iloc[0]["n_held"] == 18

    # The report: its own table, not a background-scenario table.
    from robustlab.workflows.report.benchmarks import surface_variation
    from robustlab.workflows.report.gather import gather, run_namer
    from robustlab.workflows.report.page import Page

    assert [run_namer(run)(i) for i in range(3)] == ["circle", "cross", "square"]
    d = gather(db, n_resamples=20, regression=False)
    assert d.surface["run_id"].tolist() == [res.run_id] and not d.scenarios
    page = Page()
    surface_variation(page, d)
    html = "".join(page.parts)
    assert page.tables == ["surface-variation"] and "versions:one-per-icon" in html


@pytest.mark.long
def test_a_killed_training_resumes_at_its_last_epoch_with_the_same_numbers(
    shapes_folder, tmp_path, caplog
):
    """Killed after epoch 1 of 2, a rerun trains epoch 2 only, from the state file, and
    stores what an uninterrupted training stores: the same losses, weights and predictions.
    An unreadable state file is said in the log and the training starts again."""
    import logging

    import torch

    ds = ho.read_folder(shapes_folder)
    sp = ho.split_column(ds.meta, "style=outline", seed=0)
    cfg = ho.HoldoutConfig(arch="shake-resnext", width=4, epochs=2, batch_size=16)
    whole = ho.run_holdout(ds, sp, cfg, db=tmp_path / "a.duckdb", out=tmp_path / "a")
    state_name = f"holdout-shake-resnext-{whole.run_id}.training-state.pth"
    assert not (tmp_path / "a" / state_name).exists()

    def killed_after_one(epoch, loss):
        if epoch == 1:
            raise KeyboardInterrupt

    db = tmp_path / "b.duckdb"
    with pytest.raises(KeyboardInterrupt):
        ho.run_holdout(ds, sp, cfg, db=db, out=tmp_path / "b", progress=killed_after_one)
    assert (tmp_path / "b" / state_name).is_file() and not db.exists()
    epochs = []
    with caplog.at_level(logging.INFO):
        resumed = ho.run_holdout(
            ds, sp, cfg, db=db, out=tmp_path / "b", progress=lambda e, _: epochs.append(e)
        )
    assert f"resuming after epoch 1 of 2 from {tmp_path / 'b' / state_name}" in caplog.text
    assert epochs == [2] and not (tmp_path / "b" / state_name).exists()
    assert resumed.run_id == whole.run_id and resumed.losses == whole.losses
    a, b = (torch.load(r.checkpoint, weights_only=True) for r in (whole, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    pd.testing.assert_frame_equal(
        Store(db).predictions().drop(columns="run_id"),
        Store(tmp_path / "a.duckdb").predictions().drop(columns="run_id"),
    )
    assert Store(db).get_run(resumed.run_id)["config"]["train"]["resumed_from_epoch"] == 1

    (tmp_path / "c").mkdir()
    (tmp_path / "c" / state_name).write_bytes(b"not a training state")
    with caplog.at_level(logging.WARNING):
        again = ho.run_holdout(ds, sp, cfg, db=tmp_path / "c.duckdb", out=tmp_path / "c")
    assert "training state not used" in caplog.text and again.losses == whole.losses


def test_a_changed_image_is_a_new_run_not_a_reused_one(shapes_folder, tmp_path):
    """The run id covers the pixels, not only the file names: an image redrawn under the
    same name trains a new run (and never resumes the old one's training state)."""
    import shutil

    root = tmp_path / "data"
    shutil.copytree(shapes_folder, root)
    cfg = ho.HoldoutConfig(width=4, epochs=1, batch_size=16)
    kw = dict(db=tmp_path / "r.duckdb", out=tmp_path / "ck")

    def run(ds):
        return ho.run_holdout(ds, ho.split_column(ds.meta, "style=outline", seed=0), cfg, **kw)

    ds = ho.read_folder(root)
    first, before = run(ds), ds.fingerprint
    assert run(ho.read_folder(root)).reused
    img = root / ds.meta["id"][0]
    pixels = np.asarray(Image.open(img).convert("RGB")).copy()
    pixels[0, 0] = 255 - pixels[0, 0]
    Image.fromarray(pixels).save(img)
    changed = ho.read_folder(root)
    assert changed.meta.equals(ds.meta) and changed.fingerprint != before
    again = run(changed)
    assert not again.reused and again.run_id != first.run_id


def test_cli_holdout_unknown_value_and_style_run(shapes_folder, tmp_path, capsys, caplog):
    db = str(tmp_path / "c.duckdb")
    args = [
        "holdout",
        "--data",
        str(shapes_folder),
        "--db",
        db,
        "--out",
        str(tmp_path / "ck"),
        "--epochs",
        "2",
        "--width",
        "8",
    ]
    assert main([*args, "--holdout", "style=microsoft"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        ("robustlab holdout: error: no image has style='microsoft'; choose from blue, outline, red")
    ]
    assert main([*args, "--holdout", "style=outline", "--device", "gpu0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "robustlab holdout: error: unknown device 'gpu0'" and len(err) == 2
    assert err[1].strip().startswith("hint: use one of: cpu")
    assert not Store(db).exists() or Store(db).runs().empty
    with caplog.at_level(logging.INFO, logger="robustlab"):
        assert main([*args, "--holdout", "style=outline", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "held out style=outline: trained on" in out and "held-out top-1" in out
    assert len(Store(db).runs()) == 1
    # the checkpoint folder is announced before training, and holds the checkpoint
    said = [r.getMessage() for r in caplog.records if "checkpoint and training state" in r.message]
    assert said == [
        f"checkpoint and training state go to {tmp_path / 'ck'} (--out chooses the folder)"
    ]
    assert [p.suffix for p in (tmp_path / "ck").iterdir()] == [".pth"]


def test_holdout_on_cuda_without_a_gpu_is_one_line(shapes_folder, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    args = ["holdout", "--data", str(shapes_folder), "--db", str(tmp_path / "g.duckdb")]
    args += ["--out", str(tmp_path / "ck"), "--holdout", "style=outline", "--device", "cuda"]
    assert main([*args, "--epochs", "1", "--width", "4"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == (
        "robustlab holdout: error: device 'cuda' requested but this machine has no usable CUDA GPU"
    )
    assert not any(tmp_path.rglob("*.pth"))  # refused before any training


def test_a_gpu_trains_on_the_cpus_batches_and_draws(shapes_folder):
    """On a GPU the same seeded batches, shifts, flips and Shake-Shake coefficients (all
    drawn on the CPU): the losses follow the CPU's up to floating-point arithmetic."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    ds = ho.read_folder(shapes_folder)
    rows = list(range(len(ds.meta)))
    images, labels = ds.load(rows, 32), ds.meta["class"].map(ds.classes.index).to_numpy()
    cfg = ho.HoldoutConfig(arch="shake-resnext", width=4, epochs=2, batch_size=16)
    on_cpu, cpu = ho.train_network(images, labels, len(ds.classes), cfg, device="cpu")
    net, gpu = ho.train_network(images, labels, len(ds.classes), cfg, device="cuda")
    assert next(net.parameters()).is_cuda
    # The last step's Shake-Shake coefficients, drawn on the CPU: equal bit for bit.
    shakes = [[m.last for m in n.modules() if isinstance(m, nw.ShakeShake)] for n in (on_cpu, net)]
    assert len(shakes[0]) > 0
    for (a_cpu, b_cpu), (a_gpu, b_gpu) in zip(*shakes, strict=True):
        assert torch.equal(a_cpu, a_gpu.cpu()) and torch.equal(b_cpu, b_gpu.cpu())
    # The arithmetic differs (kernels, TF32 convolutions where torch allows them).
    np.testing.assert_allclose(gpu, cpu, rtol=2e-2)
    assert ho.predict(net, images).shape == (len(rows), len(ds.classes))


def test_cli_holdout_shake_resnext_runs_and_records_its_network(shapes_folder, tmp_path, capsys):
    db = tmp_path / "s.duckdb"
    args = ["holdout", "--data", str(shapes_folder), "--db", str(db), "--out", str(tmp_path)]
    args += ["--holdout", "style=outline", "--arch", "shake-resnext", "--width", "4"]
    assert main([*args, "--epochs", "1", "--batch-size", "16", "--no-progress"]) == 0
    assert "held-out top-1" in capsys.readouterr().out
    (run,) = Store(db).runs().to_dict("records")
    assert run["model_spec"] == "holdout:shake-resnext"
    train = Store(db).get_run(run["run_id"])["config"]["train"]
    assert train["network"] == {"arch": "shake-resnext", **nw.network_params("shake-resnext", 4)}
    assert train["parameters"] > 0 and len(train["losses"]) == 1
    # The network's hyper-parameters are part of the identity: another width, another run.
    assert main([*args, "--epochs", "1", "--batch-size", "16", "--no-progress"]) == 0
    assert "reused stored run" in capsys.readouterr().out
    assert main([*args[:-1], "8", "--epochs", "1", "--batch-size", "16", "--no-progress"]) == 0
    assert len(Store(db).runs()) == 2
    # A width the network cannot have is a one-line error, not a traceback.
    assert main([*args[:-1], "6", "--epochs", "1"]) == 2
    assert "must be a multiple of 4" in capsys.readouterr().err


def test_small_cnn_run_id_is_the_identity_it_had_before_the_network_module(shapes_folder, tmp_path):
    """Stored small-cnn runs stay reusable: their identity has no ``network`` entry (only
    the new architectures add one), so the run id is the hash it always was."""
    from dataclasses import asdict

    from robustlab.records.identity import run_id

    ds = ho.read_folder(shapes_folder)
    sp = ho.split_column(ds.meta, "style=outline", seed=0)
    cfg = ho.HoldoutConfig(width=4, epochs=1, batch_size=16)
    res = ho.run_holdout(ds, sp, cfg, db=tmp_path / "o.duckdb", out=tmp_path)
    old = {
        "suite": ho.SUITE,
        "version": ho.SUITE_VERSION,
        "data": ds.fingerprint,
        "split": sp.fingerprint(ds.meta),
        "split_spec": sp.describe(),
        "config": asdict(cfg),
    }
    assert res.run_id == run_id(old)
    assert ho.HoldoutConfig(arch="timm:resnet10t").network is None


def test_timm_resnet_gets_a_cifar_stem_and_bad_arch_is_refused():
    import torch

    net = ho.build_network(ho.HoldoutConfig(arch="timm:resnet10t"), 7)
    assert net.conv1.stride == (1, 1) and isinstance(net.maxpool, torch.nn.Identity)
    assert net(torch.zeros(2, 3, 32, 32)).shape == (2, 7)
    with pytest.raises(InputError, match="msdnet or timm:NAME"):
        ho.HoldoutConfig(arch="resnet18")
    with pytest.raises(InputError, match="unknown timm model"):
        ho.build_network(ho.HoldoutConfig(arch="timm:no_such_net"), 3)


def test_icons50_folder_layout_takes_the_vendor_in_the_path(tmp_path):
    img = Image.fromarray(_draw("circle", 9, "red", 0))
    names = [
        "bird/apple_duck_1.png",
        "bird/emoji-one_owl.png",
        "bird/sub/google_duck.png",
        "cat/microsoft/cat_face.png",
        "cat/apple_cat.png",
        "cat/bulgaria_cat.png",  # "lg" inside a word: no vendor, left out
        "cat/apple_google_cat.png",
    ]  # two vendors: ambiguous, left out
    for n in names:
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        img.save(tmp_path / n)
    ds = ho.read_set(tmp_path, layout="icons50")
    got = dict(zip(ds.meta["id"], ds.meta["style"]))
    assert got == {
        "bird/apple_duck_1.png": "apple",
        "bird/emoji-one_owl.png": "emoji-one",
        "bird/sub/google_duck.png": "google",
        "cat/microsoft/cat_face.png": "microsoft",
        "cat/apple_cat.png": "apple",
    }
    assert ds.classes == ["bird", "cat"] and ds.load([0], 32).shape == (1, 32, 32, 3)
    sp = ho.split_column(ds.meta, "style=apple")
    assert len(sp.held) == 2


def test_a_filtered_set_loads_each_rows_own_image(shapes_folder):
    ds = ho.read_folder(shapes_folder)
    ds.meta = ds.meta[ds.meta["class"] == "square"].reset_index(drop=True)
    want = np.asarray(Image.open(shapes_folder / ds.meta["id"][5]))
    assert (ds.load([5], 32)[0] == want).all()


def test_cli_classes_option(shapes_folder, tmp_path, capsys):
    args = [
        "holdout",
        "--data",
        str(shapes_folder),
        "--db",
        str(tmp_path / "c.duckdb"),
        "--out",
        str(tmp_path / "ck"),
        "--epochs",
        "1",
        "--width",
        "4",
        "--holdout",
        "style=red",
    ]
    assert main([*args, "--classes", "circle,hexagon"]) == 2
    assert "no class 'hexagon'" in capsys.readouterr().err
    assert main([*args, "--classes", "circle,square"]) == 0
    run = Store(tmp_path / "c.duckdb").runs().iloc[0]
    assert run["config"]["classes"] == ["circle", "square"]


def test_the_stored_record_is_the_one_holdout_runs_always_had(shapes_folder, tmp_path):
    """A holdout run's id and stored row, spelled out as the workflow wrote them before it
    went through ``records.identity.make_record``: the data folder as read (a link is not
    resolved), the split's seed, the training config with its timings and losses."""
    from dataclasses import asdict

    from robustlab.models.devices import auto_device
    from robustlab.models.weights import weights_hash
    from robustlab.records.identity import run_id, versions

    link = tmp_path / "via-link"
    link.symlink_to(shapes_folder)
    ds = ho.read_folder(link)
    sp = ho.split_column(ds.meta, "style=outline", seed=2)
    cfg = ho.HoldoutConfig(width=4, epochs=1, batch_size=16)
    res = ho.run_holdout(ds, sp, cfg, db=tmp_path / "o.duckdb", out=tmp_path / "ck")
    identity = {
        "suite": ho.SUITE,
        "version": ho.SUITE_VERSION,
        "data": ds.fingerprint,
        "split": sp.fingerprint(ds.meta),
        "split_spec": sp.describe(),
        "config": asdict(cfg),
    }
    assert res.run_id == run_id(identity)
    run = Store(tmp_path / "o.duckdb").get_run(res.run_id)
    run["config"].pop("process")
    train = run["config"]["train"]
    timing = ("train_seconds", "train_cpu_seconds", "loadavg", "parameters", "losses")
    extra = ("device", "resumed_from_epoch", "checkpoint")
    assert sorted(train) == sorted([*asdict(cfg), *timing, *extra])
    assert train["resumed_from_epoch"] == 0
    assert train["device"] == auto_device(None)  # where it trained: recorded, not identity
    assert {k: train[k] for k in asdict(cfg)} == asdict(cfg)
    assert train["checkpoint"] == str(res.checkpoint) and train["losses"] == res.losses
    assert res.checkpoint.name == f"holdout-small-cnn-{res.run_id}.pth"
    run["config"]["train"] = None
    assert {k: run[k] for k in run if k not in ("started_at", "finished_at")} == {
        "run_id": res.run_id,
        "model_spec": "holdout:small-cnn",
        "weights_hash": weights_hash(res.checkpoint),
        "suite": ho.SUITE,
        "suite_version": ho.SUITE_VERSION,
        "data_root": str(link),
        "data_fingerprint": ds.fingerprint,
        "label_space": None,
        "preprocessing": {
            "input_size": 32,
            "mean": [0.5] * 3,
            "std": [0.25] * 3,
            "resize": "bicubic",
        },
        "seed": 2,
        "versions": json.loads(json.dumps(versions())),
        "config": {
            "holdout": json.loads(json.dumps(sp.describe(), default=str)),
            "data_layout": "folder",
            "classes": ds.classes,
            "train": None,
            "cells": [[CLEAN_SHIFT, "0"], [ho.HOLDOUT_SHIFT, sp.label]],
        },
        "status": "finished",
        "n_samples": res.n_seen + res.n_held,
        "n_skipped": 0,
        "skipped": [],
    }


def test_robustlab_holdout_stores_what_the_command_does(shapes_folder, tmp_path, capsys):
    """``robustlab.holdout`` is the command's workflow: the same run id, the same stored
    predictions and the numbers the command prints."""
    import robustlab

    by_cli, by_api = tmp_path / "cli.duckdb", tmp_path / "api.duckdb"
    flags = ["--epochs", "1", "--width", "4", "--holdout", "style=red", "--no-progress"]
    args = ["holdout", "--data", str(shapes_folder), "--classes", "circle,square", *flags]
    assert main([*args, "--db", str(by_cli), "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    done = robustlab.holdout(
        shapes_folder,
        classes=["circle", "square"],
        epochs=1,
        width=4,
        holdout="style=red",
        db=by_api,
        out=tmp_path / "b",
        progress=False,
    )
    res = done.result
    assert done.classes == ["circle", "square"] and not res.reused
    assert f"held-out top-1 {100 * res.held_top1:.1f} % (n={res.n_held}); run {res.run_id}" in out
    assert Store(by_cli).runs()["run_id"].tolist() == [res.run_id]
    a, b = Store(by_cli).predictions(), Store(by_api).predictions()
    cols = ["sample_id", "shift", "level", "label", "correct"]
    pd.testing.assert_frame_equal(a[cols], b[cols])  # trained alike: the same seed and batches
    assert np.allclose(np.stack(a["top5_probs"]), np.stack(b["top5_probs"]), atol=1e-5)
    with pytest.raises(TypeError, match="did you mean epochs"):
        robustlab.holdout(shapes_folder, epoch=1)
