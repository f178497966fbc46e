"""``generate``: layout, manifest, seed-rule determinism, resume, bad input, CLI."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import dead_pid, kill_after_first_file
from PIL import Image

from robustlab.cli import main
from robustlab.data.images import load_image
from robustlab.data.sources import discover
from robustlab.errors import MissingResourceError
from robustlab.workflows.generate import MANIFEST, TEMP_SUFFIX, generate
from robustlab.records.manifest import LOCK
from robustlab.pipeline import apply_shift, as_stored, cell_path, decode, encode, prepare
from robustlab.shifts import list_shifts
from robustlab.suites import IMAGENET_C_PROTOCOL
from robustlab.files.hashes import HASHES

PHOTOS = ["n01440764_tench.JPEG", "n03388043_fountain.JPEG", "n04243546_slot.JPEG"]
# Up to two of whatever ImageNet-C corruptions are registered: the engine must not care.
CORRUPTIONS = [s.name for s in list_shifts(tag="imagenet-c")][:2]
SEVERITIES = [1, 4]


def _flat_copy(samples_dir: Path, dest: Path, names=PHOTOS) -> Path:
    """A flat folder of a few shared photos plus the matching rows of labels.csv."""
    dest.mkdir(parents=True)
    rows = (samples_dir / "labels.csv").read_text().splitlines()
    keep = [rows[0]] + [r for r in rows[1:] if r.split(",")[0] in names]
    (dest / "labels.csv").write_text("\n".join(keep) + "\n")
    for n in names:
        shutil.copy(samples_dir / n, dest / n)
    return dest


def _files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, LOCK) and HASHES not in p.parts
    }


@pytest.fixture(scope="module")
def three(samples_dir, tmp_path_factory) -> Path:
    return _flat_copy(samples_dir, tmp_path_factory.mktemp("src") / "photos")


@pytest.fixture(scope="module")
def generated(three, tmp_path_factory):
    out = tmp_path_factory.mktemp("gen") / "out"
    res = generate(
        "imagenet-c", three, out, shifts=CORRUPTIONS, levels=SEVERITIES, workers=0, progress=False
    )
    return out, res


def test_layout_and_pixels(generated, three):
    out, res = generated
    n = len(PHOTOS) * len(CORRUPTIONS) * len(SEVERITIES)
    assert (res.written, res.skipped_existing, res.failed) == (n, 0, 0)
    expected = {
        f"{c}/{s}/{p.split('_')[0]}/{p}" for c in CORRUPTIONS for s in SEVERITIES for p in PHOTOS
    }
    assert set(_files(out)) == expected
    # A generated file holds exactly encode(apply_shift(prepare(source))), so evaluating on
    # the fly (as_stored) and reading the folder see the same pixels.
    for sample in discover(three):
        clean = prepare(load_image(sample.path)[0], IMAGENET_C_PROTOCOL)
        for c in CORRUPTIONS:
            for s in SEVERITIES:
                data = cell_path(out, sample, c, s, IMAGENET_C_PROTOCOL).read_bytes()
                shifted = apply_shift(clean, sample.id, c, s, 0)
                assert data == encode(shifted, IMAGENET_C_PROTOCOL)
                np.testing.assert_array_equal(decode(data), as_stored(shifted, IMAGENET_C_PROTOCOL))
                assert decode(data).shape == (224, 224, 3)


def test_manifest(generated):
    out, _ = generated
    m = json.loads((out / MANIFEST).read_text())
    for lib in ("robustlab", "numpy", "scipy", "opencv", "pillow", "scikit-image", "numba"):
        assert m["versions"][lib], lib
    assert m["seed"] == 0 and m["suite"]["name"] == "imagenet-c" and m["suite"]["version"]
    assert m["protocol"] == {
        "resize": 256,
        "crop": 224,
        "interpolation": "bilinear",
        "format": "jpeg",
        "jpeg_quality": 85,
    }
    shifts = {s.name: s for s in list_shifts()}
    assert [(c["shift"], c["level"]) for c in m["cells"]] == [
        (c, s) for c in CORRUPTIONS for s in SEVERITIES
    ]
    for c in m["cells"]:
        assert json.dumps(c["params"]) == json.dumps(
            json.loads(json.dumps(shifts[c["shift"]].params[c["level"]]))
        )
    n = len(PHOTOS) * len(CORRUPTIONS) * len(SEVERITIES)
    assert m["counts"] == {
        "written": n,
        "written_this_run": n,
        "skipped_existing": 0,
        "failed": 0,
        "skipped_inputs": 0,
    }
    assert m["converted"] == [{"id": "n03388043_fountain.JPEG", "note": "converted from L"}]
    assert m["runs"][-1]["status"] == "complete"
    assert m["runs"][-1]["workers"] == 0  # workers=0: in this process, as in evaluate and train


def test_same_files_with_two_workers(generated, three, tmp_path):
    out, _ = generated
    res = generate(
        "imagenet-c",
        three,
        tmp_path / "w2",
        shifts=CORRUPTIONS,
        levels=SEVERITIES,
        workers=2,
        progress=False,
    )
    assert res.written == len(PHOTOS) * len(CORRUPTIONS) * len(SEVERITIES)
    assert _files(tmp_path / "w2") == _files(out)
    assert json.loads((tmp_path / "w2" / MANIFEST).read_text())["runs"][-1]["workers"] == 2


def test_resume_writes_only_what_is_missing(generated, three, tmp_path):
    src, _ = generated
    out = tmp_path / "out"
    shutil.copytree(src, out)
    files = sorted(
        p
        for p in out.rglob("*")
        if p.is_file() and p.name not in (MANIFEST, LOCK) and HASHES not in p.parts
    )
    removed = files[::3]
    for p in removed:
        p.unlink()
    # What a killed run leaves behind: a temp file next to a missing cell.
    gone = dead_pid()
    stale = removed[0].with_name(f".{removed[0].name}.{gone}{TEMP_SUFFIX}")
    stale.write_bytes(b"half a jpeg")
    kept = {p: p.stat().st_mtime_ns for p in files if p not in removed}
    time.sleep(0.05)

    res = generate(
        "imagenet-c", three, out, shifts=CORRUPTIONS, levels=SEVERITIES, workers=0, progress=False
    )
    assert res.written == len(removed) and res.skipped_existing == len(kept)
    assert not stale.exists()
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    assert _files(out) == _files(src)
    m = json.loads((out / MANIFEST).read_text())
    n = len(files)
    assert m["counts"]["written"] == n  # the files in the folder, counted on disk
    assert m["counts"]["written_this_run"] == len(removed)
    assert m["counts"]["skipped_existing"] == len(kept)
    assert [r["status"] for r in m["runs"]] == ["complete", "complete"]

    with pytest.raises(ValueError, match="seed 0 -> 1"):
        generate(
            "imagenet-c",
            three,
            out,
            shifts=CORRUPTIONS,
            levels=SEVERITIES,
            seed=1,
            progress=False,
            workers=0,
        )
    with pytest.raises(ValueError, match="protocol"):
        generate("imagenet-c", three, out, shifts=CORRUPTIONS, fmt="png", progress=False, workers=0)


@pytest.mark.long
def test_killed_run_leaves_no_partial_files_and_resumes(samples_dir, tmp_path):
    names = sorted(p.name for p in samples_dir.glob("*.JPEG"))[:40]
    data = _flat_copy(samples_dir, tmp_path / "d", names)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "robustlab.cli",
        "generate",
        "imagenet-c",
        "--data",
        str(data),
        "--out",
        str(out),
        "--shifts",
        CORRUPTIONS[0],
        "--workers",
        "0",
        "--quiet",
    ]
    kill_after_first_file(cmd, out, "*.JPEG")
    finished = {p: p.stat().st_mtime_ns for p in out.rglob("*.JPEG")}
    written = {p: p.read_bytes() for p in finished}
    for p in finished:  # every final file is complete
        with Image.open(p) as im:
            im.load()
    res = generate("imagenet-c", data, out, shifts=CORRUPTIONS[:1], workers=0, progress=False)
    total = len(names) * 5
    assert res.written > 0 and res.written + res.skipped_existing == total
    # The files of the image in flight were written before the run recorded their hashes:
    # drawn again, with the same bytes; the recorded ones are kept untouched.
    redrawn = {out / rel for rel in res.redrawn}
    assert redrawn <= set(finished) and res.skipped_existing == len(finished) - len(redrawn)
    kept = {p: t for p, t in finished.items() if p not in redrawn}
    assert {p: p.stat().st_mtime_ns for p in kept} == kept
    assert {p: p.read_bytes() for p in finished} == written
    assert not [p for p in out.rglob(f"*{TEMP_SUFFIX}")]
    assert len(list(out.rglob("*.JPEG"))) == total


def png_header_only(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


@pytest.fixture
def bad_folder(samples_dir, tmp_path) -> Path:
    root = tmp_path / "bad"
    cls = root / "mixed"
    cls.mkdir(parents=True)
    photo = Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB").resize((120, 90))
    x = np.asarray(photo)
    photo.save(cls / "good.jpg")
    data = (samples_dir / "n01440764_tench.JPEG").read_bytes()
    (cls / "truncated.jpg").write_bytes(data[: len(data) // 3])
    (cls / "text.JPEG").write_text("not an image at all\n" * 10)
    photo.convert("CMYK").save(cls / "cmyk.jpg")
    Image.fromarray(x[..., 0].astype(np.uint16) * 257).save(cls / "gray16.png")
    photo.quantize(64).save(cls / "palette.png", transparency=0)
    Image.fromarray(np.dstack([x, np.full(x.shape[:2], 200, np.uint8)]), "RGBA").save(
        cls / "rgba.png"
    )
    photo.resize((20, 20)).save(cls / "tiny.png")
    (cls / "bomb.png").write_bytes(png_header_only(300_000, 300_000))
    (cls / "readme.txt").write_text("notes")
    return root


def test_bad_inputs_are_converted_or_skipped_with_reasons(bad_folder, tmp_path):
    c = CORRUPTIONS[0]
    res = generate(
        "imagenet-c",
        bad_folder,
        tmp_path / "out",
        shifts=[c],
        levels=[2],
        workers=0,
        progress=False,
    )
    written = sorted(p.stem for p in (tmp_path / "out" / c / "2" / "mixed").iterdir())
    assert written == ["cmyk", "good", "gray16", "palette", "rgba", "tiny"]
    for p in (tmp_path / "out" / c / "2" / "mixed").iterdir():
        assert decode(p.read_bytes()).shape == (224, 224, 3)
    skipped = dict(res.skipped_inputs)
    assert set(skipped) == {
        "mixed/truncated.jpg",
        "mixed/text.JPEG",
        "mixed/bomb.png",
        "mixed/readme.txt",
    }
    assert skipped["mixed/truncated.jpg"].startswith("unreadable")
    assert skipped["mixed/text.JPEG"].startswith("not an image")
    assert skipped["mixed/bomb.png"].startswith("too large")
    assert skipped["mixed/readme.txt"].startswith("not an image file")
    m = json.loads((tmp_path / "out" / MANIFEST).read_text())
    assert {d["id"]: d["reason"] for d in m["skipped_inputs"]} == skipped
    assert m["counts"]["skipped_inputs"] == 4 and m["counts"]["written"] == 6
    notes = {d["id"]: d["note"] for d in m["converted"]}
    assert notes["mixed/cmyk.jpg"] == "converted from CMYK"
    assert notes["mixed/gray16.png"].startswith("converted from I")
    assert notes["mixed/palette.png"] == "converted from P; alpha dropped"
    assert notes["mixed/rgba.png"] == "converted from RGBA; alpha dropped"
    assert "mixed/good.jpg" not in notes
    # Upscaled from under 32 px a side: generated, with a note that it is degenerate.
    assert notes["mixed/tiny.png"].startswith("tiny source 20x20 px")

    # Without resizing, the 20x20 source is too small for the shifts.
    res = generate(
        "imagenet-c",
        bad_folder,
        tmp_path / "keep",
        shifts=[c],
        levels=[2],
        keep_size=True,
        workers=0,
        progress=False,
    )
    assert dict(res.skipped_inputs)["mixed/tiny.png"].startswith("too small")
    with Image.open(tmp_path / "keep" / c / "2" / "mixed" / "good.jpg") as im:
        assert im.size == (120, 90)


def test_user_errors(three, tmp_path):
    with pytest.raises(ValueError, match="unknown suite"):
        generate("no-such-suite", three, tmp_path / "o", progress=False, workers=0)
    with pytest.raises(ValueError, match="no shift of suite"):
        generate(
            "imagenet-c",
            three,
            tmp_path / "o",
            shifts=["nothing_like_this"],
            progress=False,
            workers=0,
        )
    with pytest.raises(ValueError, match="no level 9|level 9"):
        generate("imagenet-c", three, tmp_path / "o", levels=[9], progress=False, workers=0)
    with pytest.raises(MissingResourceError, match="does not exist"):
        generate("imagenet-c", tmp_path / "missing", tmp_path / "o", progress=False, workers=0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images found"):
        generate("imagenet-c", tmp_path / "empty", tmp_path / "o", progress=False, workers=0)
    with pytest.raises(ValueError, match="inside --data"):
        generate("imagenet-c", three, three / "out", progress=False, workers=0)


def test_an_unlabelled_flat_folder_is_refused_unless_asked(three, tmp_path, capsys):
    """Images without labels would make hundreds of files evaluate cannot score: refused
    in one line naming the flag; with --unlabelled they are generated, and evaluate of the
    result says to pass --labels (which then scores them)."""
    flat = tmp_path / "flat"
    flat.mkdir()
    for p in PHOTOS[:2]:
        shutil.copy(three / p, flat / p)
    c = CORRUPTIONS[0]
    argv = ["generate", "imagenet-c", "--data", str(flat), "--out", str(tmp_path / "gen")]
    argv += ["--shift", c, "--level", "1", "--workers", "0", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("robustlab generate: error: ") and "without labels" in err[0]
    assert "--unlabelled" in err[1] and len(err) == 2
    assert not (tmp_path / "gen").exists()
    assert main([*argv, "--unlabelled"]) == 0
    capsys.readouterr()
    ev = ["evaluate", "lite0", "--data", str(tmp_path / "gen"), "--db", str(tmp_path / "r.duckdb")]
    ev += ["--workers", "0", "--no-progress"]
    assert main(ev) == 2
    err = capsys.readouterr().err
    assert "generated from unlabelled images" in err and "hint: pass --labels CSV" in err
    assert main([*ev, "--labels", str(three / "labels.csv")]) == 0


def test_cli(three, tmp_path, capsys):
    c = CORRUPTIONS[-1]
    rc = main(
        [
            "generate",
            "imagenet-c",
            "--data",
            str(three),
            "--out",
            str(tmp_path / "o"),
            "--corruptions",
            c,
            "--severities",
            "2-3",
            "--seed",
            "7",
            "--workers",
            "0",
            "--quiet",
            "--format",
            "png",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"{len(PHOTOS) * 2} written" in printed
    # each rate names its unit: source photos read, files written (2 cells: twice as many)
    rates = re.search(
        rf"\({len(PHOTOS)} source photos x 2 cells, [\d.]+ s: ([\d.e+]+) source photos/s, "
        r"([\d.e+]+) files/s\)",
        printed,
    )
    assert rates, printed
    assert float(rates[2]) / float(rates[1]) == pytest.approx(2, rel=0.01)
    assert sorted(p.name for p in (tmp_path / "o" / c / "3" / "n01440764").iterdir()) == [
        "n01440764_tench.png"
    ]
    m = json.loads((tmp_path / "o" / MANIFEST).read_text())
    assert m["seed"] == 7 and m["protocol"]["format"] == "png"

    rc = main(
        [
            "generate",
            "imagenet-c",
            "--data",
            str(tmp_path / "nope"),
            "--out",
            str(tmp_path / "o2"),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "does not exist" in err[0]
    rc = main(
        [
            "generate",
            "imagenet-c",
            "--data",
            str(three),
            "--out",
            str(tmp_path / "o3"),
            "--corruptions",
            "warp_drive",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "warp_drive" in err[0]


def test_masked_and_donor_scenarios(three, tmp_path):
    """Scene shifts get the prepared mask, and background swaps a donor of another class."""
    from robustlab.shifts import get_shift
    from robustlab.suites import list_suites

    if "ximagenet12" not in {s.name for s in list_suites()}:
        pytest.skip("XIMAGENET-12 scenarios are not registered")
    masks = tmp_path / "masks"
    masks.mkdir()
    for name in PHOTOS:
        w, h = Image.open(three / name).size
        m = np.zeros((h, w), np.uint8)
        m[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4] = 255
        Image.fromarray(m).save(masks / (Path(name).stem + ".png"))
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="--masks"):
        generate("ximagenet12", three, out, shifts=["segmented"], progress=False, workers=0)
    res = generate(
        "ximagenet12",
        three,
        out,
        shifts=["segmented", "random_bg"],
        masks=masks,
        workers=0,
        progress=False,
    )
    levels = len(get_shift("segmented").levels) + len(get_shift("random_bg").levels)
    assert (res.written, res.failed, res.skipped_inputs) == (len(PHOTOS) * levels, 0, [])
    seg = decode((out / "segmented" / "default" / "n01440764" / "n01440764_tench.png").read_bytes())
    assert seg.shape == (224, 224, 3)
    assert (seg[:20, :20] == 0).all() and seg[100:124, 100:124].any()  # black background
    # Rerunning draws the same donors: nothing changes.
    before = _files(out)
    generate(
        "ximagenet12",
        three,
        tmp_path / "again",
        shifts=["segmented", "random_bg"],
        masks=masks,
        workers=0,
        progress=False,
    )
    assert _files(tmp_path / "again") == before


def test_the_folders_checked_for_links_stay_with_the_process_that_checked(tmp_path):
    """The link rule is checked once per cell folder and run in each process; what one
    process found is never sent to another (a worker, a Ray node), which checks anew."""
    import pickle

    from robustlab.cells import Cell
    from robustlab.files.outputs import LocalFolder
    from robustlab.workflows.generate.worker import Job

    job = Job(LocalFolder(tmp_path), (Cell("contrast", 1),), IMAGENET_C_PROTOCOL, 0, 10**8, False)
    job.safe_folders.add("contrast/1/n01440764")
    sent = pickle.loads(pickle.dumps(job))
    assert sent.safe_folders == set() and job.safe_folders == {"contrast/1/n01440764"}
    assert sent.cells == job.cells and sent.out.root == job.out.root
