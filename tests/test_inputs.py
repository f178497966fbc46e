"""Inputs, masks and folder scans that used to give silently wrong results (issue 8).

Every file here is made in the test, so these run on a fresh clone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from robustlab.cli import main as cli
from robustlab.data.sources import discover
from robustlab.errors import InputError
from robustlab.pipeline import load_prepared
from robustlab.suites import Protocol

NOT_UTF8 = "name is not valid UTF-8 (rename it to use it)"


def _img(path: Path, size=(64, 48), value=128) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path)
    return path


def _ellipse(h: int, w: int) -> np.ndarray:
    yy, xx = np.mgrid[:h, :w]
    return ((yy - h / 2) / (0.3 * h)) ** 2 + ((xx - w / 2) / (0.3 * w)) ** 2 <= 1


# ----------------------------------------------------------------- case 4: one mask reader
def test_evaluate_reads_masks_with_the_masks_io_rules(tmp_path):
    """Green-on-black is a mask (brightest channel), a background of value 1 is background."""
    data, masks = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.png")
    _img(data / "cat" / "b.png")
    m = _ellipse(48, 64)
    green = np.zeros((48, 64, 3), np.uint8)
    green[m, 1] = 255
    Image.fromarray(green).save(_img(masks / "cat" / "a.png").parent / "a.png")
    Image.fromarray(np.where(m, 255, 1).astype(np.uint8)).save(masks / "cat" / "b.png")
    protocol = Protocol(resize=None, crop=None)
    for s in discover(data, masks=masks):
        got = load_prepared(s, protocol, with_mask=True).mask > 0
        np.testing.assert_array_equal(got, m, err_msg=s.id)


def test_masks_command_refuses_a_cached_mask_of_another_size(tmp_path):
    data, out = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.jpg", size=(500, 333))
    Image.fromarray(_ellipse(100, 100).astype(np.uint8) * 255).save(
        _img(out / "cat" / "x.png").parent / "a.png"
    )
    # the cached mask was put there by hand, not by `masks`: the folder is taken as it is
    assert cli(["masks", "--data", str(data), "--out", str(out), "--into-existing"]) == 0
    q = json.loads((out / "masks_quality.json").read_text())
    assert q["n_written"] == 0 and q["records"] == []
    assert q["skipped"] == [
        {"id": "cat/a.jpg", "reason": "mask cat/a.png is 100x100 but the image is 500x333"}
    ]


def test_mask_of_another_size_is_a_counted_skip_in_the_pipeline(tmp_path):
    data, masks = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.png")
    Image.fromarray(_ellipse(20, 20).astype(np.uint8) * 255).save(
        _img(masks / "cat" / "t.png").parent / "a.png"
    )
    (s,) = discover(data, masks=masks)
    with pytest.raises(ValueError, match="mask is 20x20 but the image is 64x48"):
        load_prepared(s, Protocol(), with_mask=True)


def test_a_mask_that_the_crop_cuts_away_is_skipped_with_that_reason(tmp_path):
    """A wide photo whose mask lies only near its ends (GrabCut found the two ends of a
    slide rule in the shared photos): the 224 px centre crop keeps none of it. The mask
    scenes skip the cell saying so, not "mask is empty", and the clean cell is scored."""
    from robustlab.errors import CellSkipped
    from robustlab.pipeline import shift_context

    data, masks = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.png", size=(400, 120))
    ends = np.zeros((120, 400), np.uint8)
    ends[20:100, 10:50] = 255
    ends[20:100, 350:390] = 255
    Image.fromarray(ends).save(_img(masks / "cat" / "x.png").parent / "a.png")
    (s,) = discover(data, masks=masks)
    prepared = load_prepared(s, Protocol(), with_mask=True)
    assert prepared.mask.shape == (224, 224) and not prepared.mask.any()
    assert "6400 foreground pixels all lie outside the protocol's 224x224 frame" in (
        prepared.mask_note
    )
    with pytest.raises(CellSkipped, match="6400 foreground pixels all lie outside"):
        shift_context(s, prepared, "blur_bg", "default", 0, Protocol())
    # a shift that does not need the mask is not stopped by it
    assert shift_context(s, prepared, "gaussian_noise", 1, 0, Protocol())["mask"] is prepared.mask
    # a mask the crop keeps something of has no note
    Image.fromarray(np.full((120, 400), 255, np.uint8)).save(masks / "cat" / "a.png")
    assert load_prepared(s, Protocol(), with_mask=True).mask_note == ""


# ----------------------------------------------------------------- case 5: same stem
def test_images_with_the_same_stem_keep_their_own_masks(tmp_path):
    data, masks = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.jpg")
    _img(data / "cat" / "a.png")
    _img(data / "cat" / "b.jpg")
    for name in ("a.jpg.png", "a.png.png", "b.png"):  # b: the older stem naming, unambiguous
        _img(masks / "cat" / name)
    got = {s.id: s.mask_path.name for s in discover(data, masks=masks)}
    assert got == {"cat/a.jpg": "a.jpg.png", "cat/a.png": "a.png.png", "cat/b.jpg": "b.png"}


def test_a_stem_named_mask_shared_by_two_images_is_refused(tmp_path):
    data, masks = tmp_path / "data", tmp_path / "masks"
    _img(data / "cat" / "a.jpg")
    _img(data / "cat" / "a.png")
    _img(masks / "cat" / "a.png")
    with pytest.raises(InputError, match=r"cat/a\.png could belong to cat/a\.jpg or cat/a\.png"):
        discover(data, masks=masks)


def test_masks_command_writes_names_that_cannot_collide(tmp_path):
    data, out = tmp_path / "data", tmp_path / "masks"
    for name, value in (("a.jpg", 60), ("a.png", 200)):
        img = np.full((48, 64, 3), value, np.uint8)
        img[12:36, 16:48] = 255 - value  # an object in the box
        (data / "cat").mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(data / "cat" / name)
    boxes = tmp_path / "boxes.csv"
    boxes.write_text("file,x0,y0,x1,y1\ncat/a.jpg,14,10,50,38\ncat/a.png,14,10,50,38\n")
    _img(out / "cat" / "a.png")  # an older stem-named mask: either image could claim it
    args = ["masks", "--data", str(data), "--out", str(out), "--bboxes", str(boxes)]
    assert cli([*args, "--into-existing"]) == 0  # the older mask was put there by hand
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.png"))
    assert written == ["cat/a.jpg.png", "cat/a.png", "cat/a.png.png"]
    assert {s.id: s.mask_path.name for s in discover(data, masks=out)} == {
        "cat/a.jpg": "a.jpg.png",
        "cat/a.png": "a.png.png",
    }


# ----------------------------------------------------------------- case 6: symlink loops
def test_symlink_loops_and_repeated_folders_are_followed_once(tmp_path):
    data = tmp_path / "data"
    _img(data / "cat" / "a.png")
    _img(data / "dog" / "b.png")
    _img(data / "store" / "birds" / "c.png")
    os.symlink("..", data / "cat" / "up")  # a loop to the data folder
    os.symlink("../dog", data / "cat" / "dogs")  # a second path to a listed folder
    os.symlink("store/birds", data / "bird")  # a link inside the data folder: once
    outside = tmp_path / "elsewhere" / "fish"
    _img(outside / "d.png")
    os.symlink(outside, data / "fish")  # a link out of the data folder: never followed
    samples = discover(data)
    assert [(s.id, s.class_name) for s in samples] == [
        ("cat/a.png", "cat"),
        ("dog/b.png", "dog"),
        ("store/birds/c.png", "store"),
    ]
    skipped = dict(samples.skipped)
    assert skipped.pop("fish").startswith("link leaves the folder being read")
    assert skipped == {
        "bird": "link to a folder listed under its own path (store/birds)",
        "cat/dogs": "link to a folder listed under its own path (dog)",
        "cat/up": "link to the data folder itself (a loop)",
    }


# ----------------------------------------------------------------- case 7: --out inside --data
def test_masks_out_inside_data_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    _img(data / "cat" / "a.png")
    assert cli(["masks", "--data", str(data), "--out", str(data / "masks")]) == 2
    assert "is inside --data" in capsys.readouterr().err
    assert not (data / "masks").exists()


# ----------------------------------------------------------------- case 8: suite without masks
@pytest.mark.parametrize("suite", ["ximagenet12", "imagenet9"])
def test_background_suite_without_masks_stops_before_the_database(tmp_path, suite):
    import robustlab

    data = tmp_path / "data"
    _img(data / "n01440764" / "a.png")
    db = tmp_path / "r.duckdb"
    with pytest.raises(InputError, match="need foreground masks.*robustlab masks"):
        robustlab.evaluate("lite0", data, suite=suite, db=db, workers=0, progress=False)
    assert not db.exists()
    empty = tmp_path / "no-masks"
    empty.mkdir()
    with pytest.raises(InputError, match="none of the 1 images has a mask.*robustlab masks"):
        robustlab.evaluate(
            "lite0", data, suite=suite, db=db, masks=empty, workers=0, progress=False
        )
    assert not db.exists()


# ----------------------------------------------------------------- labels CSV
def test_csv_rows_whose_index_contradicts_the_class_are_refused(tmp_path):
    data = tmp_path / "flat"
    _img(data / "a.png")
    _img(data / "b.png")
    (data / "labels.csv").write_text("file,wnid,index\na.png,n01440764,0\nb.png,n01440764,5\n")
    with pytest.raises(
        InputError,
        match=r"line 3: 'b.png' has wnid 'n01440764' and index 5, "
        r"but line 2 pairs class 'n01440764' with 0",
    ):
        discover(data)


def test_csv_index_that_contradicts_the_label_space_is_refused(tmp_path):
    from robustlab.data.labels import get_label_space
    from robustlab.workflows.evaluate.labels import labels_for

    data = tmp_path / "flat"
    _img(data / "a.png")
    (data / "labels.csv").write_text("file,wnid,index\na.png,n01440764,7\n")
    with pytest.raises(InputError, match=r"row 'a.png': index 7 contradicts class 'n01440764'"):
        labels_for(discover(data), get_label_space("imagenet1k"))
    # An ImageNet-1k index is what an ImageNet CSV means, whatever the suite's space.
    (data / "labels.csv").write_text("file,wnid,index\na.png,n01440764,0\n")
    assert labels_for(discover(data), get_label_space("imagenet9")) == [
        get_label_space("imagenet9").index_of("n01440764")
    ]


# ----------------------------------------------------------------- names that are not UTF-8
def test_a_name_that_is_not_utf8_is_skipped_with_a_printable_name(tmp_path):
    data = tmp_path / "data"
    _img(data / "cat" / "a.png")
    bad = os.path.join(os.fsencode(data / "cat"), b"caf\xe9.png")
    with open(bad, "wb") as fh:
        fh.write((data / "cat" / "a.png").read_bytes())
    samples = discover(data)
    assert [s.id for s in samples] == ["cat/a.png"]
    assert samples.skipped == [("cat/caf\\xe9.png", NOT_UTF8)]


# ----------------------------------------------------------------- end to end: a hostile folder
def _bomb_png(path: Path, side: int = 100_000) -> None:
    """A valid 1x1 PNG whose header claims ``side`` x ``side`` pixels (CRC fixed up)."""
    import io
    import struct
    import zlib

    buf = io.BytesIO()
    Image.new("L", (1, 1)).save(buf, "PNG")
    b = bytearray(buf.getvalue())
    b[16:24] = struct.pack(">II", side, side)
    b[29:33] = struct.pack(">I", zlib.crc32(bytes(b[12:29])))
    path.write_bytes(bytes(b))


def _hostile_folder(root: Path) -> tuple[Path, dict[str, np.ndarray], dict[str, str]]:
    """An ImageFolder with odd-but-good images (and the RGB each must decode to, made with
    Pillow directly) and bad files (with the start of the reason each must be skipped for)."""
    from PIL import ImageOps

    cls = root / "n01440764"
    cls.mkdir(parents=True)
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[:90, :120] / 120
    photo = np.clip(
        np.stack([yy, xx, 1 - xx], 2) * 220 + rng.normal(0, 15, (90, 120, 3)), 0, 255
    ).astype(np.uint8)
    grey = photo.mean(axis=2).astype(np.uint8)
    Image.fromarray(photo).save(cls / "rgb.png")
    Image.fromarray(grey).save(cls / "grey.png")
    rgba = np.dstack([photo, np.full(grey.shape, 90, np.uint8)])
    Image.fromarray(rgba).save(cls / "rgba.png")
    pal = Image.fromarray(photo).quantize(16)
    pal.info["transparency"] = 0
    pal.save(cls / "palette_alpha.png", transparency=0)
    Image.fromarray(photo).convert("CMYK").save(cls / "cmyk.jpg", quality=95)
    Image.fromarray(grey.astype(np.uint16) * 257).save(cls / "gray16.png")
    Image.fromarray(photo[:1, :1]).save(cls / "one_pixel.png")
    frames = [Image.fromarray(photo), Image.fromarray(255 - photo)]
    frames[0].save(cls / "animated.gif", save_all=True, append_images=frames[1:], duration=50)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: turn 90 degrees clockwise to view
    Image.fromarray(photo).save(cls / "exif_rotated.jpg", exif=exif, quality=95)

    def pil_rgb(name):
        with Image.open(cls / name) as im:
            im = ImageOps.exif_transpose(im)
            return np.asarray(im.convert("RGBA" if im.mode == "P" else "RGB"))[..., :3]

    good = {
        "rgb.png": photo,
        "grey.png": np.dstack([grey] * 3),
        "rgba.png": photo,
        "palette_alpha.png": pil_rgb("palette_alpha.png"),
        "cmyk.jpg": pil_rgb("cmyk.jpg"),
        "gray16.png": np.dstack([grey] * 3),
        "one_pixel.png": photo[:1, :1],
        "animated.gif": pil_rgb("animated.gif"),
        "exif_rotated.jpg": pil_rgb("exif_rotated.jpg"),
    }
    assert good["exif_rotated.jpg"].shape == (120, 90, 3)  # upright, not as stored
    jpeg = (cls / "cmyk.jpg").read_bytes()
    (cls / "truncated.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    (cls / "zero.jpg").write_bytes(b"")
    (cls / "text.jpg").write_text("this is not a JPEG\n")
    _bomb_png(cls / "bomb.png")
    with open(os.path.join(os.fsencode(cls), b"caf\xe9.png"), "wb") as fh:
        fh.write((cls / "rgb.png").read_bytes())
    (cls / "notes.txt").write_text("stray")
    os.symlink("..", cls / "loop")
    bad = {
        "n01440764/truncated.jpg": "unreadable",
        "n01440764/zero.jpg": "not an image",
        "n01440764/text.jpg": "not an image",
        "n01440764/bomb.png": "too large",
        "n01440764/caf\\xe9.png": "name is not valid UTF-8",
        "n01440764/notes.txt": "not an image file",
        "n01440764/loop": "link to the data folder",
    }
    return root, {f"n01440764/{k}": v for k, v in good.items()}, bad


def test_evaluate_over_a_hostile_folder_skips_each_bad_file_and_scores_the_rest(tmp_path):
    """Each bad file is a counted skip with its reason in the stored run; each odd but good
    image gets the prediction of its correctly decoded pixels."""
    import torch

    import robustlab
    from robustlab.models import load_model
    from robustlab.pipeline import prepare
    from robustlab.store import Store

    data, good, bad = _hostile_folder(tmp_path / "data")
    model = load_model("lite0", device="cpu")
    db = tmp_path / "r.duckdb"
    res = robustlab.evaluate(model, data, db=db, workers=0, progress=False, batch_size=4)
    assert int(res.table["n"].iloc[0]) == len(good)

    run = Store(db).get_run(res.run_id)
    reasons = {sid: why for sid, why in run["skipped"]}
    assert set(reasons) == set(bad) and run["n_skipped"] == len(bad)
    for sid, start in bad.items():
        assert reasons[sid].startswith(start), (sid, reasons[sid])

    stored = Store(db).predictions([res.run_id])
    assert sorted(stored["sample_id"]) == sorted(good)
    batch = torch.stack(
        [
            model.preprocessing.to_tensor(prepare(good[sid], Protocol()), crop=False)
            for sid in stored["sample_id"]
        ]
    )
    probs = torch.softmax(model.predict(batch).float(), dim=1)
    top = torch.topk(probs, 5, dim=1)
    for r, (sid, ids, p) in enumerate(
        zip(stored["sample_id"], stored["top5_ids"], stored["top5_probs"])
    ):
        assert int(ids[0]) == int(top.indices[r, 0]), sid
        np.testing.assert_allclose(
            np.asarray(p, np.float64), top.values[r].numpy(), atol=2e-4, err_msg=sid
        )


def test_generate_skips_a_name_that_is_not_utf8_instead_of_failing(tmp_path):
    from robustlab.workflows.generate import generate

    data = tmp_path / "data"
    _img(data / "cat" / "a.png")
    with open(os.path.join(os.fsencode(data / "cat"), b"b\xff.png"), "wb") as fh:
        fh.write((data / "cat" / "a.png").read_bytes())
    res = generate(
        "imagenet-c",
        data,
        tmp_path / "out",
        shifts=["contrast"],
        levels=[1],
        progress=False,
        workers=0,
    )
    assert (res.written, res.failed) == (1, 0)
    assert res.skipped_inputs == [("cat/b\\xff.png", NOT_UTF8)]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["skipped_inputs"] == [{"id": "cat/b\\xff.png", "reason": NOT_UTF8}]
