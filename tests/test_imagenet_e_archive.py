"""Evaluating the published ImageNet-E archive layout (ori/, level folders, labels.txt)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image

from robustlab.data.imagenet_e import folder_cell, is_archive, read_archive
from robustlab.workflows.evaluate import evaluate
from robustlab.store import Store


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """A tiny archive: three demo photos in ori/, an identical copy folder, a flipped
    folder missing one file, and labels.txt (ImageNet indices; one name without suffix)."""
    from robustlab.workflows.demo import demo_photos

    root = tmp_path_factory.mktemp("imagenet-e")
    photos = {p.id: p for p in demo_photos()}
    chosen = [
        ("ILSVRC2012_val_00000001", "cat/chelsea.png", 285),
        ("ILSVRC2012_val_00000002", "espresso/coffee.png", 967),
        ("ILSVRC2012_val_00000003", "motorcycle/motorcycle_left.png", 670),
    ]
    for d in ("ori", "size_0.05", "rp"):
        (root / d).mkdir()
    lines = []
    for i, (stem, pid, label) in enumerate(chosen):
        img = Image.open(photos[pid].source).convert("RGB").resize((224, 224))
        img.save(root / "ori" / f"{stem}.png")
        shutil.copy(root / "ori" / f"{stem}.png", root / "size_0.05" / f"{stem}.png")
        if i < 2:
            img.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(root / "rp" / f"{stem}.png")
        lines.append(f"{stem if i == 0 else stem + '.png'}\t{label}")
    lines.append("not-a-line-with-a-tab")
    (root / "labels.txt").write_text("\n".join(lines) + "\n")
    return root


def test_layout_is_detected_and_read(archive, tmp_path):
    assert is_archive(archive) and not is_archive(tmp_path)
    a = read_archive(archive)
    assert [s.id for s in a.samples] == [f"ILSVRC2012_val_0000000{i}.png" for i in (1, 2, 3)]
    assert [s.label for s in a.samples] == [285, 967, 670]
    assert a.cells == [("rp", "default"), ("size", "0.05")]
    assert a.skipped and "name<TAB>label" in a.skipped[0][1]
    assert folder_cell("bg_20_adv") == ("bg", "20_adv") and folder_cell("rd") == ("rd", "default")


def test_each_level_folder_is_evaluated_as_a_cell(archive, tmp_path):
    db = tmp_path / "r.duckdb"
    df = evaluate("lite0", archive, db=db, workers=0, progress=False)
    cells = {(r.shift, r.level): r.n for r in df.table.itertuples()}
    # rp lacks one file: that cell is a counted skip, not a substitute.
    assert cells == {("clean", "0"): 3, ("size", "0.05"): 3, ("rp", "default"): 2}
    assert any("rp/default" in s[1] for s in df.skipped)
    pred = Store(db).predictions([df.run_id])
    clean = pred[pred["shift"] == "clean"].set_index("sample_id")
    same = pred[pred["shift"] == "size"].set_index("sample_id")
    # The size folder holds byte copies of ori/: the model saw exactly those files.
    for sid in clean.index:
        np.testing.assert_array_equal(
            np.stack(same.loc[sid, ["top5_ids"]].to_numpy()),
            np.stack(clean.loc[sid, ["top5_ids"]].to_numpy()),
        )
    run = Store(db).get_run(df.run_id)
    assert (
        run["suite"] == "imagenet-e-archive"
        and run["config"]["folders"]["size/0.05"] == "size_0.05"
    )
    # The report treats every archive cell as an edit and re-renders the archive's files.
    from robustlab.workflows.report import build_report

    res = build_report(db, tmp_path / "r.html", n_resamples=20)
    assert res.grids == 2 and "edit-accuracy" in res.tables  # the 2 samples with every cell
    assert not any("no longer holds" in n for n in res.notes)
    with pytest.raises(ValueError, match="leave out --suite"):
        evaluate("lite0", archive, suite="imagenet-c", db=db, workers=0, progress=False)
    with pytest.raises(ValueError, match="unknown shift 'bg': no shift of the archive"):
        evaluate("lite0", archive, shifts=["bg"], db=db, workers=0, progress=False)


def test_files_that_are_not_listed_images_are_counted(archive, tmp_path):
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    root = tmp_path / "copy"
    shutil.copytree(archive, root)
    shutil.copy(root / "ori" / "ILSVRC2012_val_00000001.png", root / "ori" / "extra.png")
    (root / "ori" / "notes.txt").write_text("x\n")
    skipped = dict(read_archive(root).skipped)
    assert skipped["ori/extra.png"] == "not listed in labels.txt"
    assert skipped["ori/notes.txt"] == "not an image of the archive"
    record = make_plan(EvaluateRequest.build("lite0", root, device="cpu")).record
    assert ["ori/extra.png", "not listed in labels.txt"] in record.skipped
    assert record.n_samples == 3


def test_a_labels_csv_is_refused_not_ignored(archive, tmp_path, capsys):
    """labels.txt labels the archive; a --labels CSV the run would not read is refused in
    one line naming it, never a run scored with the labels the user meant to replace."""
    from robustlab.cli import main

    csv_path = tmp_path / "relabel.csv"
    csv_path.write_text("file,class\nori/ILSVRC2012_val_00000001.png,n01440764\n")
    argv = ["evaluate", "lite0", "--data", str(archive), "--labels", str(csv_path)]
    assert main([*argv, "--db", str(tmp_path / "r.duckdb"), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "labels.txt gives the labels" in err and str(csv_path) in err
    assert "Traceback" not in err and not (tmp_path / "r.duckdb").exists()
