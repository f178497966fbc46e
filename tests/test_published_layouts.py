"""Published benchmark folders read as downloaded (robustlab.data.published).

Each test builds a tiny copy of a released layout from real photos of the repository's
shared-mini copy (center crops of 224, as ImageNet-C and ImageNet-9 publish them), then
evaluates lite0 on it and checks the cells, labels and counts stored in the database.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from conftest import MINI
from PIL import Image

from robustlab.data.labels import get_label_space
from robustlab.data.published import LAYOUTS, detect, read_published
from robustlab.errors import InputError
from robustlab.workflows.evaluate import EvaluateRequest, evaluate, make_plan
from robustlab.store import Store

PHOTOS = MINI / "imagenet-samples"
# (file in shared-mini, wnid, ImageNet-1k index, ImageNet-9 folder)
TENCH = ("n01440764_tench.JPEG", "n01440764", 0, "08_fish")
HEN = ("n01514859_hen.JPEG", "n01514859", 8, "01_bird")
GECKO = ("n01675722_banded_gecko.JPEG", "n01675722", 38, "03_reptile")
PHOTOS_USED = (TENCH, HEN, GECKO)


def crop224(name: str) -> Image.Image:
    """The ImageNet-C protocol's image of a photo: shorter side 256, center crop 224."""
    img = Image.open(PHOTOS / name).convert("RGB")
    w, h = img.size
    s = 256 / min(w, h)
    img = img.resize((round(w * s), round(h * s)), Image.BILINEAR)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    return img.crop((left, top, left + 224, top + 224))


def evaluate_here(root, db, **kw):
    return evaluate("lite0", root, db=db, workers=0, progress=False, device="cpu", **kw)


def stored(db, res):
    """(run row, predictions) of the run ``evaluate`` returned."""
    store = Store(db)
    rid = res.run_id
    return store.get_run(rid), store.predictions([rid])


# ------------------------------------------------------------------------ ImageNet-C
@pytest.fixture(scope="module")
def imagenet_c(tmp_path_factory):
    """<corruption>/<severity>/<wnid>/<file>: gaussian_noise 1 and 3, contrast 5 (the
    gecko missing there), plus a stray file and a folder that is no severity."""
    root = tmp_path_factory.mktemp("imagenet-c")
    for shift, sev in (("gaussian_noise", 1), ("gaussian_noise", 3), ("contrast", 5)):
        for name, wnid, _, _ in PHOTOS_USED:
            if (shift, name) == ("contrast", GECKO[0]):
                continue
            out = root / shift / str(sev) / wnid / name
            out.parent.mkdir(parents=True, exist_ok=True)
            img = crop224(name)
            if shift == "contrast":  # a lower-contrast copy, written as the set is: JPEG
                arr = np.asarray(img, dtype=np.float32)
                img = Image.fromarray(((arr - arr.mean()) * 0.3 + arr.mean()).astype(np.uint8))
            img.save(out, quality=85)
    # Severity 3 holds byte copies of severity 1: the model must see exactly those files.
    shutil.rmtree(root / "gaussian_noise" / "3")
    shutil.copytree(root / "gaussian_noise" / "1", root / "gaussian_noise" / "3")
    (root / "gaussian_noise" / "6").mkdir()
    (root / "README.txt").write_text("ImageNet-C\n")
    return root


def test_imagenet_c_is_detected_and_read(imagenet_c):
    layout = detect(imagenet_c)
    assert layout is LAYOUTS["imagenet-c"]
    pub = read_published(imagenet_c, layout)
    assert pub.clean is None
    assert pub.cells == [("gaussian_noise", 1), ("gaussian_noise", 3), ("contrast", 5)]
    assert [s.id for s in pub.samples] == sorted(f"{w}/{n}" for n, w, _, _ in PHOTOS_USED)
    assert {s.class_name for s in pub.samples} == {w for _, w, _, _ in PHOTOS_USED}
    reasons = dict(pub.skipped)
    assert reasons["gaussian_noise/6"] == "not a severity folder (1 to 5)"
    assert reasons["README.txt"] == "not inside a cell folder"
    gecko = f"{GECKO[1]}/{GECKO[0]}"
    assert pub.file(gecko, "contrast/5") is None
    assert pub.file(gecko, "gaussian_noise/1") == imagenet_c / "gaussian_noise/1" / gecko


def test_imagenet_c_cells_labels_and_counts_in_the_db(imagenet_c, tmp_path):
    db = tmp_path / "r.duckdb"
    res = evaluate_here(imagenet_c, db)
    got = {(r.shift, str(r.level)): r.n for r in res.table.itertuples()}
    # No clean cell: ImageNet-C publishes none. The gecko is missing from contrast/5.
    assert got == {("gaussian_noise", "1"): 3, ("gaussian_noise", "3"): 3, ("contrast", "5"): 2}
    run, pred = stored(db, res)
    assert run["suite"] == "imagenet-c-published" and run["label_space"] == "imagenet1k"
    assert run["config"]["published"]["layout"] == "imagenet-c"
    # No clean cell: the baseline checks count the images and classes of all cells.
    assert Store(db).run_stats(res.run_id) == {"n_samples": 3, "n_classes": 3}
    labels = pred.drop_duplicates("sample_id").set_index("sample_id")["label"].to_dict()
    assert labels == {f"{w}/{n}": i for n, w, i, _ in PHOTOS_USED}
    skipped = {tuple(x) for x in run["skipped"]}
    gecko = f"{GECKO[1]}/{GECKO[0]}"
    assert (gecko, "contrast/5: no file for this image in contrast/5/") in skipped
    assert ("gaussian_noise/6", "not a severity folder (1 to 5)") in skipped
    # Byte copies give the same predictions; the contrast files another.
    p = pred.set_index(["shift", "level", "sample_id"])
    for sid in labels:
        assert list(p.loc[("gaussian_noise", "1", sid), "top5_ids"]) == list(
            p.loc[("gaussian_noise", "3", sid), "top5_ids"]
        )
    # --suite may name the benchmark's own suite; another suite would shift the set again.
    again = evaluate_here(imagenet_c, db, suite="imagenet-c", shifts=["contrast"])
    assert list(again.table["shift"]) == ["contrast"] and again.run_id != res.run_id
    with pytest.raises(InputError, match="published ImageNet-C layout"):
        evaluate_here(imagenet_c, db, suite="imagenet9")
    with pytest.raises(InputError, match="has no 'fog' folders"):
        evaluate_here(imagenet_c, db, shifts=["fog"])
    with pytest.raises(InputError, match="--masks does not apply"):
        evaluate_here(imagenet_c, db, masks=str(imagenet_c))


def test_one_corruption_folder_is_read_on_its_own(imagenet_c):
    """Each ImageNet-C tar unpacks to one folder per corruption; that folder is a set too."""
    one = imagenet_c / "gaussian_noise"
    assert detect(one) is LAYOUTS["imagenet-c"]
    pub = read_published(one, LAYOUTS["imagenet-c"])
    assert pub.cells == [("gaussian_noise", 1), ("gaussian_noise", 3)]
    assert pub.folders == {("gaussian_noise", 1): "1", ("gaussian_noise", 3): "3"}
    assert len(pub.samples) == 3 and ("6", "not a severity folder (1 to 5)") in pub.skipped


# ------------------------------------------------------------------------ ImageNet-9
@pytest.fixture(scope="module")
def imagenet_9(tmp_path_factory):
    """bg_challenge: <variant>/val/<NN_class>/<file> for original, only_fg, mixed_same and
    mixed_rand; mixed_same holds the originals again, mixed_rand puts the tench on a
    gray field; fg_mask/ and an unknown class folder are not test images."""
    root = tmp_path_factory.mktemp("bg_challenge")
    for variant in ("original", "only_fg", "mixed_same", "mixed_rand"):
        for name, wnid, _, cls in PHOTOS_USED:
            out = root / variant / "val" / cls / f"{wnid}_{name.split('_')[1]}.JPEG"
            out.parent.mkdir(parents=True, exist_ok=True)
            img = crop224(name)
            if variant == "only_fg":
                arr = np.asarray(img).copy()
                arr[:, :56] = 0
                img = Image.fromarray(arr)
            elif variant == "mixed_rand" and name == TENCH[0]:
                img = Image.new("RGB", (224, 224), (128, 128, 128))
            img.save(out, quality=95)
    (root / "fg_mask" / "val" / "08_fish").mkdir(parents=True)
    np.save(root / "fg_mask" / "val" / "08_fish" / "x.npy", np.zeros((2, 2)))
    stray = root / "original" / "val" / "09_unknown" / "y.JPEG"
    stray.parent.mkdir()
    crop224(HEN[0]).save(stray)
    return root


def test_imagenet_9_cells_labels_and_counts_in_the_db(imagenet_9, tmp_path):
    assert detect(imagenet_9) is LAYOUTS["imagenet9"]
    db = tmp_path / "r.duckdb"
    df = evaluate_here(imagenet_9, db)
    got = {(r.shift, str(r.level)): r.n for r in df.table.itertuples()}
    assert got == {
        ("clean", "0"): 3,
        ("only_fg", "default"): 3,
        ("mixed_same", "default"): 3,
        ("mixed_rand", "default"): 3,
    }
    run, pred = stored(db, df)
    assert run["suite"] == "imagenet9-published" and run["label_space"] == "imagenet9"
    space = get_label_space("imagenet9")
    labels = pred.drop_duplicates("sample_id").set_index("sample_id")["label"].to_dict()
    assert labels == {
        f"{cls}/{w}_{n.split('_')[1]}.JPEG": space.index_of(cls) for n, w, _, cls in PHOTOS_USED
    }
    # The official rule: top-1 over the 1,000 classes, correct when mapped to the label.
    for r in pred.itertuples():
        assert r.correct == (int(r.top5_ids[0]) in space.imagenet_ids[r.label])
    skipped = {tuple(x) for x in run["skipped"]}
    assert ("fg_mask", "foreground masks (.npy), not a test variant") in skipped
    assert ("09_unknown/y.JPEG", "class folder '09_unknown' is not in 'imagenet9'") in skipped
    # mixed_same holds the originals: the same predictions as the clean cell.
    p = pred.set_index(["shift", "sample_id"])
    for sid in labels:
        assert list(p.loc[("clean", sid), "top5_ids"]) == list(
            p.loc[("mixed_same", sid), "top5_ids"]
        )
    from robustlab.workflows.report import build_report
    from robustlab.workflows.report.gather import gather

    d = gather(db, run_ids=[df.run_id], n_resamples=20)
    same = pred[pred["shift"] == "mixed_same"]["correct"].mean()
    rand = pred[pred["shift"] == "mixed_rand"]["correct"].mean()
    assert d.bg_gap["bg_gap"].iloc[0] == pytest.approx(same - rand)
    res = build_report(db, tmp_path / "r.html", n_resamples=20)
    assert "bg-gap" in res.tables and res.grids >= 1
    assert not any("no longer holds" in n for n in res.notes)


# --------------------------------------------------------------------- XIMAGENET-12
@pytest.fixture(scope="module")
def ximagenet_12(tmp_path_factory):
    """The folder names of XIMAGENET-12's code: image/ (originals, any size), masks/,
    image_r/, combine/ (random background) and segmented_image_transparent/ with
    <stem>_segmented.png RGBA files; blur_bg/ in robustlab's own name."""
    root = tmp_path_factory.mktemp("ximagenet12")
    for name, wnid, _, _ in PHOTOS_USED:
        img = Image.open(PHOTOS / name).convert("RGB")
        img = img.resize((img.width * 3 // 4, img.height * 3 // 4))
        stem = name.removesuffix(".JPEG")
        for folder in (
            "image",
            "image_r",
            "combine",
            "blur_bg",
            "masks",
            "segmented_image_transparent",
        ):
            (root / folder / wnid).mkdir(parents=True, exist_ok=True)
        img.save(root / "image" / wnid / name, quality=95)
        rgb = np.asarray(Image.open(root / "image" / wnid / name).convert("RGB"))
        alpha = np.zeros(rgb.shape[:2], np.uint8)
        alpha[rgb.shape[0] // 4 : -rgb.shape[0] // 4] = 255
        Image.fromarray(alpha).save(root / "masks" / wnid / f"{stem}.png")
        # Transparent: the original's colours with alpha 0 on the background.
        Image.fromarray(np.dstack([rgb, alpha]), "RGBA").save(
            root / "segmented_image_transparent" / wnid / f"{stem}_segmented.png"
        )
        hsv = np.asarray(img.convert("HSV")).copy()
        hsv[..., 0] = 5
        Image.fromarray(hsv, "HSV").convert("RGB").save(root / "image_r" / wnid / name)
        img.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(root / "combine" / wnid / name)
        if name != HEN[0]:
            img.filter(__import__("PIL.ImageFilter").ImageFilter.GaussianBlur(3)).save(
                root / "blur_bg" / wnid / name
            )
    (root / "notes").mkdir()
    return root


def test_ximagenet_12_cells_labels_and_counts_in_the_db(ximagenet_12, tmp_path):
    assert detect(ximagenet_12) is LAYOUTS["ximagenet12"]
    db = tmp_path / "r.duckdb"
    df = evaluate_here(ximagenet_12, db)
    got = {(r.shift, str(r.level)): r.n for r in df.table.itertuples()}
    assert got == {
        ("clean", "0"): 3,
        ("blur_bg", "default"): 2,  # the hen is missing there
        ("color_r", "default"): 3,
        ("random_bg", "add"): 3,
        ("transparent", "default"): 3,
    }
    run, pred = stored(db, df)
    assert run["suite"] == "ximagenet12-published" and run["label_space"] == "imagenet1k"
    labels = pred.drop_duplicates("sample_id").set_index("sample_id")["label"].to_dict()
    assert labels == {f"{w}/{n}": i for n, w, i, _ in PHOTOS_USED}
    skipped = {tuple(x) for x in run["skipped"]}
    assert ("masks", "foreground masks, not a test scenario") in skipped
    assert ("notes", "not an XIMAGENET-12 scenario folder") in skipped
    hen = f"{HEN[1]}/{HEN[0]}"
    assert (hen, "blur_bg/default: no file for this image in blur_bg/") in skipped
    # <stem>_segmented.png is the same image; its alpha is dropped, leaving the colours
    # of the original: the same predictions as the clean cell.
    p = pred.set_index(["shift", "sample_id"])
    for sid in labels:
        assert list(p.loc[("clean", sid), "top5_ids"]) == list(
            p.loc[("transparent", sid), "top5_ids"]
        )


# ------------------------------------------------------------------------ ImageNet-D
def test_imagenet_d_is_detected_with_its_label_space(tmp_path):
    root = tmp_path / "ImageNet-D"
    for rel, (name, *_rest) in zip(
        ("background/alarm_clock/a.png", "texture/backpack/b.png", "material/t-shirt/c.png"),
        PHOTOS_USED,
    ):
        (root / rel).parent.mkdir(parents=True)
        crop224(name).save(root / rel)
    (root / "questions").mkdir()
    (root / "questions" / "background.csv").write_text("image,answer\n")
    assert detect(root) is LAYOUTS["imagenet-d"]
    plan = make_plan(EvaluateRequest.build("lite0", root, device="cpu"))
    space = plan.label_space
    assert space.name == "imagenet-d"
    assert [space.classes[lab] for lab in plan.labels] == ["alarm clock", "t-shirt", "backpack"]
    assert plan.cells == [("clean", 0)]
    record = plan.record
    assert record.config["published"] == {"layout": "imagenet-d", "benchmark": "ImageNet-D"}
    assert ["questions/background.csv", "not an image file (extension '.csv')"] in record.skipped
    # A suite makes it a source folder again (shifts applied on the fly to its photos).
    with pytest.raises(InputError, match="'background' is not in label space"):
        make_plan(
            EvaluateRequest.build(
                "lite0", root, device="cpu", suite="imagenet-c", shifts=["contrast"]
            )
        )


def test_other_folders_are_not_published_layouts(tmp_path):
    (tmp_path / "n01440764").mkdir()
    crop224(TENCH[0]).save(tmp_path / "n01440764" / "x.JPEG")
    (tmp_path / "original" / "n01440764").mkdir(parents=True)  # no val/, no scenario
    assert detect(tmp_path) is None


def test_ce_without_a_clean_cell_has_no_relative_ce():
    """A downloaded ImageNet-C has no clean cell: CE and mCE are defined, relative CE not."""
    import pandas as pd

    from robustlab.metrics.mce import alexnet_cells, corruption_errors, mce

    errors = [0.3, 0.4, 0.5, 0.6, 0.7]
    cells = pd.DataFrame(
        {"shift": ["gaussian_noise"] * 5, "level": ["1", "2", "3", "4", "5"], "error": errors}
    )
    ce = corruption_errors(cells, alexnet_cells()).set_index("shift")
    alex = alexnet_cells().set_index(["shift", "level"])["error"]
    expected = sum(errors) / sum(alex[("gaussian_noise", str(s))] for s in range(1, 6))
    assert ce.loc["gaussian_noise", "ce"] == pytest.approx(expected)
    assert np.isnan(ce.loc["gaussian_noise", "relative_ce"])
    summary = mce(ce.reset_index())
    assert summary["mce"] == pytest.approx(expected) and np.isnan(summary["relative_mce"])


def test_cli_another_suite_on_a_published_folder_is_one_line(imagenet_9, tmp_path, capsys):
    from robustlab import cli

    rc = cli.main(
        ["evaluate", "lite0", "--data", str(imagenet_9), "--suite", "imagenet-c",
         "--db", str(tmp_path / "r.duckdb"), "--no-progress"]
    )  # fmt: skip
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and "Traceback" not in "\n".join(err)
    assert err[0].startswith("robustlab evaluate: error: ") and "ImageNet-9" in err[0]
    assert err[1:] == ["  hint: leave out --suite imagenet-c (or name --suite imagenet9)"]


def test_cell_folder_links_leaving_the_root_are_skipped_with_the_reason(imagenet_c, tmp_path):
    """The link rule (robustlab.files.safety) holds for published layouts too: a severity folder
    or a corruption folder that links out of the data root is listed, never read."""
    root = tmp_path / "imagenet-c"
    shutil.copytree(imagenet_c, root)
    outside = tmp_path / "elsewhere"
    shutil.copytree(imagenet_c / "gaussian_noise" / "1", outside)
    (root / "gaussian_noise" / "5").symlink_to(outside)
    (root / "brightness").symlink_to(tmp_path)
    published = read_published(root, detect(root))
    assert ("gaussian_noise", 5) not in published.cells
    assert "brightness" not in {c[0] for c in published.cells}
    reasons = dict(published.skipped)
    assert "link leaves the folder" in reasons["gaussian_noise/5"]
    assert "link leaves the folder" in reasons["brightness"]


def test_mine_reads_a_published_layout_cell_by_cell(imagenet_c, tmp_path):
    """Hard-image mining over a downloaded ImageNet-C locates each candidate in its own
    cell folder (the run's recorded folders), not at a path the layout does not have
    (it crashed copying ``<root>/<wnid>/<file>``)."""
    from robustlab.workflows.imagenet_d.mine import mine

    result = mine(
        imagenet_c,
        surrogates=["lite0"],
        k=1,
        db=tmp_path / "m.duckdb",
        out=tmp_path / "hard",
        workers=0,
        progress=False,
        device="cpu",
    )
    table = result.table
    assert len(table) == 8  # 3 photos x 3 cells, the gecko missing from contrast 5
    for shift, level, sid, path in zip(
        table["shift"], table["level"], table["sample_id"], table["path"]
    ):
        assert path == str(imagenet_c / shift / str(level) / sid)
