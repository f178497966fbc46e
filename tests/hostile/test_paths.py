"""Hostile paths against every command: outputs never clobber inputs, links never leave
the data root, the review app serves only images inside it (docs/DEVELOPING.md, "Safety
rules"). Each command runs through the real CLI on real photos with lite0."""

from __future__ import annotations

import csv
import io
import os
import secrets

import pytest
from PIL import Image

from robustlab.data.sources import discover
from robustlab.store import Store

from .conftest import digest, error_lines, run_cli

LEAVES = "link leaves the folder being read"


@pytest.fixture(scope="module")
def db(hostile):
    """A results database of one real lite0 run on the hostile data (clean images)."""
    from robustlab.cli import main

    path = hostile["world"] / "results.duckdb"
    code = main(
        ["evaluate", "lite0", "--data", str(hostile["data"]), "--db", str(path), "--workers", "0"]
    )
    assert code == 0
    return path


# ------------------------------------------------------------------ links (finding 2)
def test_discover_follows_no_link_out_of_the_data(hostile):
    samples = discover(hostile["data"])
    assert sorted(s.id for s in samples) == sorted(hostile["photos"] + hostile["bad"])
    skipped = dict(samples.skipped)
    for rel in hostile["traps"]:
        assert skipped[rel].startswith(LEAVES), (rel, skipped.get(rel))
    c5 = hostile["classes"][5]
    assert "symbolic link" in skipped[f"{c5}/selfloop.JPEG"]
    assert skipped[f"{c5}/pipe.JPEG"] == "not a regular file"


def test_masks_folder_links_out_are_not_masks(hostile, tmp_path):
    """A mask found through a link out of the masks folder is no mask."""
    c0 = hostile["classes"][0]
    masks = tmp_path / "masks"
    (masks / c0).mkdir(parents=True)
    photo = next(p for p in hostile["photos"] if p.startswith(c0))
    Image.new("L", (8, 8), 255).save(hostile["world"] / "stray.png")
    os.symlink(hostile["world"] / "stray.png", masks / f"{photo}.png")
    samples = discover(hostile["data"], masks=masks)
    assert all(s.mask_path is None for s in samples)


def test_evaluate_reads_only_the_photos_inside(hostile, db, capsys):
    """6 photos predicted (the 2 bad files skipped as unreadable); no photo of the
    ancestor, no /proc or / file (on an unguarded walk: hundreds of predictions)."""
    code, out, _ = run_cli(["results", "--db", db, "--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0 and [(r["shift"], int(r["n"])) for r in rows] == [
        ("clean", len(hostile["photos"]))
    ]
    run = Store(db).runs().iloc[0]
    skipped = dict(map(tuple, run["skipped"] if "skipped" in run else []))
    assert not skipped or all(rel in skipped for rel in hostile["traps"])


def test_labels_csv_rows_outside_the_data_are_skipped(hostile, tmp_path):
    flat = tmp_path / "flat"
    flat.mkdir()
    photo = hostile["data"] / hostile["photos"][0]
    (flat / "a.JPEG").write_bytes(photo.read_bytes())
    other = sorted(hostile["outside"].iterdir())[0]
    (flat / "labels.csv").write_text(
        f"file,class\na.JPEG,x\n../{other.name},y\n{other},z\n/etc/passwd,w\n"
    )
    samples = discover(flat)
    assert [s.id for s in samples] == ["a.JPEG"]
    reasons = dict(samples.skipped)
    assert reasons["/etc/passwd"].startswith("listed in labels.csv but outside the data folder")
    assert reasons[f"../{other.name}"].startswith(
        "listed in labels.csv but outside the data folder"
    )


@pytest.mark.slow
def test_a_generated_cell_swapped_for_a_link_out_is_not_read(hostile, tmp_path, capsys, caplog):
    gen = tmp_path / "g"
    argv = ["generate", "imagenet-c", "--data", hostile["data"], "--out", gen]
    argv += ["--shifts", "gaussian_noise", "--level", "1", "--workers", "0", "--no-progress"]
    assert run_cli(argv, capsys)[0] == 0
    cells = sorted(p for p in (gen / "gaussian_noise" / "1").rglob("*") if p.is_file())
    assert len(cells) == len(hostile["photos"])
    cells[0].unlink()
    os.symlink(sorted(hostile["outside"].iterdir())[0], cells[0])
    db = tmp_path / "e.duckdb"
    argv = ["evaluate", "lite0", "--data", gen, "--db", db, "--workers", "0"]
    code, _, err = run_cli([*argv, "--shift", "gaussian_noise", "--level", "1"], capsys)
    assert code == 0 and "link out of the generated folder" in caplog.text
    code, out, _ = run_cli(["results", "--db", db, "--format", "csv"], capsys)
    n = {r["shift"]: int(r["n"]) for r in csv.DictReader(io.StringIO(out))}
    assert n == {"clean": len(hostile["photos"]), "gaussian_noise": len(hostile["photos"]) - 1}


# ------------------------------------------------------------------ outputs (finding 1)
def _clobber_cases(h, db):
    link = h["world"] / "report-link.html"
    if not link.is_symlink():
        os.symlink(db, link)
    detour = h["data"] / ".." / db.name
    return [
        ["report", "--db", db, "--out", db, "--no-grid"],
        ["report", "--db", db, "--out", link, "--no-grid"],
        ["results", "--db", db, "--output", db],
        ["results", "--db", db, "--output", detour, "--format", "csv"],
        ["review", "--data", h["data"], "--db", db, "--export", db],
        ["review", "--data", h["data"], "--db", db, "--export", h["data"] / "final.csv"],
        ["evaluate", "lite0", "--data", h["data"], "--db", h["data"] / h["photos"][0]],
        ["masks", "--data", h["data"], "--out", h["data"]],
        ["masks", "--data", h["data"], "--out", h["world"]],
        ["generate", "imagenet-c", "--data", h["data"], "--out", h["world"], "--workers", "0"],
        ["mine", "--data", h["gen"], "--db", db, "--out", h["world"], "--surrogates", "lite0"],
        ["results", "--db", db, "--export", h["data"]],
    ]


@pytest.mark.parametrize("case", range(12))
def test_no_output_overwrites_or_enters_an_input(hostile, db, case, capsys):
    argv = _clobber_cases(hostile, db)[case]
    before = digest(db)
    photos = {p: digest(hostile["data"] / p) for p in hostile["photos"]}
    listing = sorted(os.listdir(hostile["world"]))
    code, _, err = run_cli(argv, capsys)
    assert code in (2, 3), err
    assert len(error_lines(err)) == 1 and "Traceback" not in err
    assert digest(db) == before
    assert {p: digest(hostile["data"] / p) for p in hostile["photos"]} == photos
    assert sorted(os.listdir(hostile["world"])) == listing
    assert (
        not list(hostile["data"].rglob("*.rltmp")) and not (hostile["data"] / "final.csv").exists()
    )


def test_a_file_of_another_kind_is_replaced_only_with_force(hostile, db, tmp_path, capsys):
    script = tmp_path / "notes.py"
    script.write_text("print('mine')\n")
    photo = tmp_path / "photo.html"  # an image under a page's name: still not a page
    photo.write_bytes((hostile["data"] / hostile["photos"][0]).read_bytes())
    code, _, err = run_cli(["results", "--db", db, "--output", script], capsys)
    assert code == 2 and "--force" in err and script.read_text() == "print('mine')\n"
    code, _, err = run_cli(["report", "--db", db, "--out", photo, "--no-grid"], capsys)
    assert code == 2 and digest(photo) == digest(hostile["data"] / hostile["photos"][0])
    code, _, _ = run_cli(["results", "--db", db, "--output", script, "--force"], capsys)
    assert code == 0 and "lite0" in script.read_text()
    # The command's own kind is replaced without --force, through a temp file.
    page = tmp_path / "report.html"
    page.write_text("<!DOCTYPE html><html><body>OLD-PAGE</body></html>")
    code, _, _ = run_cli(["report", "--db", db, "--out", page, "--no-grid"], capsys)
    assert code == 0 and "lite0" in page.read_text() and "OLD-PAGE" not in page.read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_export_parquet_never_replaces_a_foreign_file(hostile, db, tmp_path, capsys):
    out = tmp_path / "export"
    out.mkdir()
    (out / "runs.parquet").write_text("my notes")
    code, _, err = run_cli(["results", "--db", db, "--export", out], capsys)
    assert code == 2 and (out / "runs.parquet").read_text() == "my notes"
    code, _, _ = run_cli(["results", "--db", db, "--export", out, "--force"], capsys)
    assert code == 0 and (out / "runs.parquet").read_bytes().startswith(b"PAR1")
    code, _, _ = run_cli(["results", "--db", db, "--export", out], capsys)  # its own kind
    assert code == 0 and not [p for p in out.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------ overlap (finding 3)
def test_data_inside_out_is_refused_both_ways_and_through_links(hostile, capsys):
    gen = hostile["gen"]
    cell = gen / "gaussian_noise" / "1"
    link = hostile["world"] / "gen-link"
    if not link.is_symlink():
        os.symlink(gen, link)
    before = {p: digest(p) for p in cell.rglob("*.JPEG")}
    for out in (gen, link):
        argv = ["generate", "imagenet-c", "--data", cell, "--out", out]
        argv += ["--shifts", "gaussian_noise", "--level", "1", "--workers", "0"]
        code, out_text, err = run_cli(argv, capsys)
        assert code == 2 and "is inside --out" in err and len(error_lines(err)) == 1
        assert "written" not in out_text
    assert not (gen / "manifest.json").exists()
    assert {p: digest(p) for p in cell.rglob("*.JPEG")} == before


# ------------------------------------------------------------------ review app (finding 4)
def test_review_app_serves_only_decodable_images_inside_the_root(hostile, tmp_path):
    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.app import create_app
    from robustlab.store.reviews import ReviewStore

    rs = load_review_set(hostile["data"])
    ids = [item.id for item in rs.items]
    assert not any("passwd" in i or "away" in i for i in ids)
    token = secrets.token_urlsafe(8)
    client = create_app(rs, ReviewStore(tmp_path / "r.duckdb"), token).test_client()

    def get(index):
        return client.get(f"/image/{index}", headers={"X-Review-Token": token})

    for item in rs.items:
        response = get(item.index)
        if item.id in hostile["bad"]:
            assert response.status_code == 415  # never the text as image/jpeg
            continue
        assert response.status_code == 200 and response.mimetype == "image/jpeg"
        Image.open(io.BytesIO(response.data)).verify()
    # Files swapped for links after the set was read: out of the root, a folder, a loop.
    swapped = [i for i in rs.items if i.id in hostile["photos"]][:3]
    keep = {}
    for item, target in zip(swapped, ["/etc/passwd", str(hostile["outside"]), "/proc/self"]):
        keep[item.path] = item.path.read_bytes()
        item.path.unlink()
        os.symlink(target, item.path)
    try:
        for item in swapped:
            response = get(item.index)
            assert response.status_code == 404 and b"root:" not in response.data
    finally:
        for path, data in keep.items():
            path.unlink()
            path.write_bytes(data)


# ------------------------------------------------------------------ every command
def _commands(h, db, tmp):
    d, gen = h["data"], h["gen"]
    c3 = h["classes"][3]
    return {
        "evaluate": ["evaluate", "lite0", "--data", d, "--db", tmp / "e.duckdb", "--workers", "0"],
        "generate": [
            *("generate", "imagenet-c", "--data", d, "--out", tmp / "g"),
            *("--shifts", "gaussian_noise", "--level", "1", "--workers", "0", "--no-progress"),
        ],
        "masks": ["masks", "--data", d, "--out", tmp / "m", "--max-side", "64"],
        "results": ["results", "--db", db],
        "summary": ["results", "--db", db, "--summary"],
        "report": ["report", "--db", db, "--out", tmp / "r.html", "--resamples", "20"],
        "review-export": [
            "review",
            "--data",
            d,
            "--db",
            tmp / "rv.duckdb",
            "--export",
            tmp / "f.csv",
        ],
        "segment": [
            *("segment", "deeplabv3_resnet50", "--weights", d / c3 / "passwd.jpg"),
            *("--data", d, "--masks", d, "--db", tmp / "s.duckdb"),
        ],
        "saliency": [
            *("saliency", "lite0", "--data", d, "--masks", d, "--db", tmp / "sa.duckdb"),
            *("--workers", "0", "--limit", "2", "--no-progress"),
        ],
        "vlm": ["vlm", "--model", f"vlm:{h['outside']}", "--data", d, "--db", tmp / "v.duckdb"],
        "synth": ["synth", "--checkpoint", h["outside"], "--out", tmp / "syn", "--limit", "1"],
        "mine": [
            *("mine", "--data", gen, "--db", tmp / "mi.duckdb", "--surrogates", "lite0"),
            *("--out", tmp / "hard", "--workers", "0"),
        ],
    }


@pytest.mark.parametrize(
    "name",
    [
        "evaluate",
        "generate",
        "masks",
        "results",
        "summary",
        "report",
        "review-export",
        "segment",
        "saliency",
        "vlm",
        "synth",
        "mine",
    ],
)
def test_every_command_on_the_hostile_tree_fails_cleanly_or_succeeds(
    hostile, db, tmp_path, name, capsys
):
    argv = _commands(hostile, db, tmp_path)[name]
    code, out, err = run_cli(argv, capsys)
    assert code in (0, 2, 3), err
    assert "internal error" not in err and "Traceback" not in err
    assert len(error_lines(err)) <= 1
    assert "root:x:0:0" not in out + err  # /etc/passwd was never read
    # Nothing a command wrote leads out of its output or names an outside file.
    for path in tmp_path.rglob("*"):
        assert not path.is_symlink(), path


# ------------------------------------------------------------------ the rules themselves
def test_check_outputs_relations(hostile, tmp_path):
    """Which overlaps are refused, by real path; each refusal names both flags."""
    from robustlab.errors import InputError
    from robustlab.files.safety import Database, Folder, check_outputs

    data, world = hostile["data"], hostile["world"]
    alias = tmp_path / "alias"
    os.symlink(data, alias)
    refused = [
        ({"--data": data}, {"--out": Folder(alias)}),  # the same folder through a link
        ({"--data": data}, {"--out": Folder(world)}),  # data inside an owned output
        ({"--data": data}, {"--out": Folder(alias / "sub", owned=False)}),  # inside data
        ({"--data": data}, {"--export": tmp_path / ".." / tmp_path.name / "alias" / "x.csv"}),
        (
            {"--labels": data / hostile["photos"][0]},
            {"--db": Database(alias / hostile["photos"][0])},
        ),
        ({}, {"--out": Folder(tmp_path / "o"), "--db": Database(tmp_path / "o" / "r.duckdb")}),
    ]
    for inputs, outputs in refused:
        with pytest.raises(InputError) as info:
            check_outputs(inputs, outputs)
        message = str(info.value)
        assert any(flag in message for flag in inputs) or len(outputs) == 2, message
    allowed = [
        ({"--data": data}, {"--db": Database(data / "r.duckdb")}),  # `--data .` with the default db
        ({"--data": data}, {"--out": Folder(tmp_path / "checkpoints", owned=False)}),
        ({"--data": data / "missing"}, {"--out": Folder(data / "missing" / "x")}),  # no such input
        ({"--data": data}, {"--out": Folder("s3://bucket/data")}),  # URLs are not local paths
    ]
    for inputs, outputs in allowed:
        check_outputs(inputs, outputs)


def test_file_kinds_are_told_by_content_and_name(hostile, tmp_path):
    from robustlab.files.safety import is_kind

    page = tmp_path / "a.html"
    page.write_text("  <!DOCTYPE html><html></html>")
    photo_as_page = tmp_path / "b.html"
    photo_as_page.write_bytes((hostile["data"] / hostile["photos"][0]).read_bytes())
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    makefile = tmp_path / "Makefile"
    makefile.write_text("all:\n")
    assert is_kind(page, "html") and not is_kind(photo_as_page, "html")
    assert is_kind(table, "csv") and not is_kind(table, "html")
    assert not is_kind(makefile, "table") and not is_kind(table, "parquet")
