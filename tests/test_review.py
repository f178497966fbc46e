"""robustlab review: agreement maths, the decision log, the set loader, the server's
access rules, and real people's workflows driven through headless Chromium."""

from __future__ import annotations

import csv
import http.client
import os
import re
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from robustlab.cli import main as cli
from robustlab.errors import InputError, MissingResourceError, StoreError
from robustlab.workflows.imagenet_d.review import (
    fleiss_kappa,
    load_review_set,
    rating_table,
    verdict,
)
from robustlab.workflows.imagenet_d.review.items import Guess
from robustlab.workflows.imagenet_d.review.server import ReviewServer
from robustlab.store.reviews import ReviewStore

TENCH, CHIHUAHUA, GOLDFISH = "n01440764", "n02085620", "n01443537"
SECRET = "TOP-SECRET-NOT-IN-THE-SET"


# ---------------------------------------------------------------------------- fixtures
def make_images(root: Path, per_class: dict[str, int]) -> list[str]:
    """Small distinct PNGs in <class>/<file>; returns their ids in sorted (set) order."""
    ids = []
    rng = np.random.default_rng(0)
    for c, n in per_class.items():
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            img = Image.new("RGB", (96, 72), tuple(int(v) for v in rng.integers(40, 200, 3)))
            draw = ImageDraw.Draw(img)
            x, y = (int(v) for v in rng.integers(10, 50, 2))
            fill = tuple(int(v) for v in rng.integers(0, 255, 3))
            draw.ellipse([x, y, x + 30, y + 20], fill=fill)
            img.save(root / c / f"img{i}.png")
            ids.append(f"{c}/img{i}.png")
    return sorted(ids)


@pytest.fixture
def world(tmp_path):
    """Six images of two ImageNet classes, a predictions CSV, and a secret file beside them."""
    data = tmp_path / "hard"
    ids = make_images(data, {TENCH: 3, CHIHUAHUA: 3})
    (tmp_path / "secret.txt").write_text(SECRET)
    (data / TENCH / "notes.txt").write_text(SECRET)  # a non-image inside the folder
    preds = tmp_path / "mined.csv"
    with open(preds, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "class", "lite0", "lite1"])
        for i in ids:
            w.writerow([f"/somewhere/hard/{i}", i.split("/")[0], GOLDFISH, "n04037443"])
    return {
        "data": data,
        "ids": ids,
        "preds": preds,
        "db": tmp_path / "review.duckdb",
        "tmp": tmp_path,
    }


@pytest.fixture
def server(world):
    rs = load_review_set(world["data"], predictions=world["preds"])
    srv = ReviewServer(rs, ReviewStore(world["db"]), annotator="alice").start()
    yield srv
    srv.shutdown()


# ---------------------------------------------------------------------------- agreement
# Fleiss (1971) as tabulated in Wikipedia's "Fleiss' kappa": 10 subjects, 14 raters each,
# 5 categories; published kappa 0.210.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_matches_the_textbook_example_computed_by_hand():
    # By hand: column totals 20, 28, 39, 21, 32 of 140 ratings, so
    # P_e = (20^2 + 28^2 + 39^2 + 21^2 + 32^2) / 140^2 = 4170 / 19600.
    # Row agreement numerators sum_j n_ij^2 - 14: 182, 46, 56, 80, 60, 84, 44, 32, 52, 52
    # (sum 688) over 14 * 13 = 182 each, so P_bar = 688 / 1820.
    p_bar, p_e = Fraction(688, 1820), Fraction(4170, 19600)
    by_hand = (p_bar - p_e) / (1 - p_e)
    kappa = fleiss_kappa(FLEISS_TABLE)
    assert kappa == pytest.approx(float(by_hand), abs=1e-12)
    assert round(kappa, 3) == 0.210


def test_fleiss_kappa_edges():
    # perfect agreement split over two categories: 1; systematic disagreement: below 0
    assert fleiss_kappa([[3, 0], [0, 3], [3, 0]]) == pytest.approx(1.0)
    assert fleiss_kappa([[1, 1], [1, 1]]) == pytest.approx(-1.0)
    # every rating in one category: undefined, not a division by zero
    assert fleiss_kappa([[3, 0], [3, 0]]) is None
    assert fleiss_kappa(np.zeros((0, 4))) is None
    with pytest.raises(ValueError, match="same number of raters"):
        fleiss_kappa([[2, 0], [1, 2]])
    with pytest.raises(ValueError, match="at least 2 raters"):
        fleiss_kappa([[1, 0], [0, 1]])


def test_rating_table_keeps_only_images_every_annotator_reviewed():
    table = rating_table(
        [
            ["accept", "accept", "reject"],
            ["accept", "relabel"],
            ["not_single", "relabel", "relabel"],
        ],
        3,
    )
    assert table.tolist() == [[2, 1, 0, 0], [0, 0, 1, 2]]


def test_agreement_rule():
    v = verdict("a", [("accept", None), ("accept", None), ("reject", None)], 2)
    assert (v.kept, v.label, v.relabelled, v.support) == (True, "a", False, 2)
    assert v.votes == {"accept": 2, "reject": 1, "not_single": 0, "relabel": 0}
    v = verdict("a", [("accept", None), ("reject", None), ("not_single", None)], 2)
    assert (v.kept, v.reason) == (False, "too few votes")
    # two relabels to the same class keep the image under that class
    v = verdict("a", [("relabel", "b"), ("relabel", "b"), ("accept", None)], 2)
    assert (v.kept, v.label, v.relabelled, v.support) == (True, "b", True, 2)
    # relabels to different classes do not add up
    v = verdict("a", [("relabel", "b"), ("relabel", "c"), ("accept", None)], 2)
    assert not v.kept
    # a relabel to the image's own class is an accept
    v = verdict("a", [("relabel", "a"), ("accept", None)], 2)
    assert (v.kept, v.label, v.votes["accept"]) == (True, "a", 2)
    # k = 1: most votes wins, a tie keeps nothing
    assert verdict("a", [("accept", None), ("relabel", "b"), ("relabel", "b")], 1).label == "b"
    assert verdict("a", [("accept", None), ("relabel", "b")], 1).reason == "tie"
    assert verdict("a", [], 2).reason == "unreviewed"
    with pytest.raises(ValueError):
        verdict("a", [], 0)


# ---------------------------------------------------------------------------- decision log
def test_decisions_are_an_append_only_log_with_undo(tmp_path):
    st = ReviewStore(tmp_path / "r.duckdb")
    st.open("s", data_root="/d", label_space="imagenet1k", predictions=None, n_images=3)
    e1 = st.record("s", "x/1.png", "alice", "accept", label="x")
    st.record("s", "x/2.png", "alice", "relabel", label="x", target="y", target_name="Y")
    st.record("s", "x/1.png", "alice", "reject", label="x")  # change of mind
    st.record("s", "x/1.png", "bob", "not_single", label="x")
    cur = {(d.annotator, d.image_id): (d.decision, d.target) for d in st.current("s")}
    assert cur == {
        ("alice", "x/1.png"): ("reject", None),
        ("alice", "x/2.png"): ("relabel", "y"),
        ("bob", "x/1.png"): ("not_single", None),
    }
    # undo withdraws alice's latest decision: x/1.png goes back to her earlier accept
    undone = st.undo("s", "alice")
    assert (undone.image_id, undone.decision) == ("x/1.png", "reject")
    assert {d.image_id: d.decision for d in st.current("s", "alice")} == {
        "x/1.png": "accept",
        "x/2.png": "relabel",
    }
    # further undos walk back, then there is nothing left; bob is untouched
    assert st.undo("s", "alice").image_id == "x/2.png"
    assert st.undo("s", "alice").event_id == e1
    assert st.undo("s", "alice") is None
    assert st.current("s", "alice") == []
    assert [d.decision for d in st.current("s", "bob")] == ["not_single"]
    # nothing was deleted: 4 decisions + 3 undo events, each undo naming what it withdrew
    ev = st.events("s")
    assert ev["decision"].tolist() == [
        "accept",
        "relabel",
        "reject",
        "not_single",
        "undo",
        "undo",
        "undo",
    ]
    assert ev["undoes"].tolist()[4:] == [3, 2, 1]
    assert ev["created_at"].notna().all()
    # a decision after undoing counts again; other sets are separate
    st.record("s", "x/1.png", "alice", "accept", label="x")
    assert [d.decision for d in st.current("s", "alice")] == ["accept"]
    assert st.current("other") == []
    with pytest.raises(ValueError):
        st.record("s", "x/1.png", "alice", "relabel", label="x")  # no target


HOLD_DB = textwrap.dedent("""
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    con.execute("CREATE TABLE IF NOT EXISTS t (x INT)")
    print("ready", flush=True)
    sys.stdin.read()
""")


@pytest.fixture
def locked_db(tmp_path):
    """A DuckDB file held open by another process (as a DuckDB shell or notebook would)."""
    path = tmp_path / "held.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_DB, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    yield path, proc.pid
    proc.stdin.close()
    proc.wait(timeout=30)


def test_a_database_locked_by_another_process_is_one_line(world, locked_db, capsys):
    path, pid = locked_db
    with pytest.raises(StoreError, match=f"locked by process {pid}"):
        ReviewStore(path, timeout=0.3).open(
            "s", data_root="/d", label_space="x", predictions=None, n_images=1
        )
    rc = cli(["review", "--data", str(world["data"]), "--db", str(path), "--wait", "0.3"])
    err = capsys.readouterr().err
    assert rc == 3
    line = [ln for ln in err.splitlines() if not ln.startswith("note:")]
    assert len(line) == 1 and "locked by process" in line[0] and "Traceback" not in err
    rc = cli(
        [
            "review",
            "--data",
            str(world["data"]),
            "--db",
            str(path),
            "--wait",
            "0.3",
            "--export",
            str(world["tmp"] / "out.csv"),
        ]
    )
    assert rc == 3 and "locked by process" in capsys.readouterr().err


def test_a_database_locked_while_serving_answers_503_and_recovers(world):
    rs = load_review_set(world["data"])
    with ReviewServer(rs, ReviewStore(world["db"], timeout=0.3)) as srv:
        srv.start()
        tok = {"X-Review-Token": srv.token}
        body = '{"annotator": "alice", "index": 0, "decision": "accept"}'
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_DB, str(world["db"])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "ready"
            status, resp, _ = raw_request(srv.port, "POST", "/api/decide", tok, body)
            assert status == 503 and b"locked by process" in resp and b"not saved" in resp
        finally:
            holder.stdin.close()
            holder.wait(timeout=30)
        status, resp, _ = raw_request(srv.port, "POST", "/api/decide", tok, body)
        assert status == 200 and b'"reviewed":1' in resp.replace(b" ", b"")


def test_not_a_database_is_one_line(world, capsys):
    bad = world["tmp"] / "bad.duckdb"
    bad.write_bytes(b"this is not a duckdb file at all" * 200)
    rc = cli(
        [
            "review",
            "--data",
            str(world["data"]),
            "--db",
            str(bad),
            "--export",
            str(world["tmp"] / "o.csv"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 3 and str(bad) in err and "not a robustlab database" in err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------- the set
def test_review_set_from_an_imagenet_tree_with_predictions(world):
    rs = load_review_set(world["data"], predictions=world["preds"])
    assert rs.label_space == "imagenet1k" and len(rs.classes) == 1000
    assert [it.id for it in rs.items] == world["ids"]
    first = rs.items[0]
    assert first.label == TENCH and rs.class_info(TENCH).name == "tench"
    assert rs.class_info(TENCH).wnids == (TENCH,)
    # paths in the CSV end in the image id; guesses resolve to readable ImageNet names
    assert first.guesses == (
        Guess("lite0", GOLDFISH, "goldfish"),
        Guess("lite1", "n04037443", "racer"),
    )
    assert first.details == ()
    assert any("not reviewable" in n for n in rs.notes)  # notes.txt


def test_review_set_label_spaces_and_bad_input(tmp_path):
    # ImageNet-D folder names: the imagenet-d space, wnids of its mapped ImageNet classes
    make_images(tmp_path / "d" / "background", {"alarm_clock": 1, "banana": 1})
    rs = load_review_set(tmp_path / "d")
    assert rs.label_space == "imagenet-d" and len(rs.classes) == 113
    assert [it.label for it in rs.items] == ["alarm_clock", "banana"]
    assert rs.class_info("alarm_clock").name == "alarm clock"
    assert len(rs.class_info("alarm_clock").wnids) == 2
    # any other folder names are their own label space
    make_images(tmp_path / "f", {"red_thing": 1, "blue_thing": 2})
    rs = load_review_set(tmp_path / "f", name="mine")
    assert rs.label_space == "folders" and rs.name == "mine"
    assert [c.key for c in rs.classes] == ["blue_thing", "red_thing"]
    with pytest.raises(InputError, match="class folder 'blue_thing'.*imagenet1k"):
        load_review_set(tmp_path / "f", label_space="imagenet1k")
    # a predictions CSV with rows for other images, and one without a file column
    preds = tmp_path / "p.csv"
    preds.write_text("file,guess\nred_thing/img0.png,x\nnope/zzz.png,y\n")
    rs = load_review_set(tmp_path / "f", predictions=preds)
    assert rs.item_by_id("red_thing/img0.png").guesses == (Guess("guess", "x", None),)
    assert any("1 row(s) of p.csv match no image" in n for n in rs.notes)
    preds.write_text("image,guess\na,b\n")
    with pytest.raises(InputError, match="'file' column"):
        load_review_set(tmp_path / "f", predictions=preds)
    # images without a class
    make_images(tmp_path / "flat_parent", {"x": 1})
    flat = tmp_path / "flat_parent" / "x"
    with pytest.raises(InputError, match="has no label"):
        load_review_set(flat)
    with pytest.raises(MissingResourceError, match="does not exist"):
        load_review_set(tmp_path / "missing")


# ---------------------------------------------------------------------------- access rules
def raw_request(port, method, target, headers=None, body=None):
    """An HTTP request sent exactly as written (no client-side path normalisation)."""
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        con.putrequest(method, target, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            con.putheader(k, v)
        if body is not None:
            con.putheader("Content-Type", "application/json")
            con.putheader("Content-Length", str(len(body)))
        con.endheaders(body.encode() if body is not None else None)
        resp = con.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        con.close()


def test_every_request_without_the_right_token_is_refused(server):
    assert server.host == "127.0.0.1"
    port, token = server.port, server.token
    targets = [
        "/",
        "/api/set",
        "/api/state?annotator=alice",
        "/image/0",
        "/assets/review.js",
        "/assets/review.css",
        "/nope",
        "/image/../../secret.txt",
    ]
    wrong = [
        {},
        {"X-Review-Token": ""},
        {"X-Review-Token": token[:-1] + ("y" if token.endswith("x") else "x")},  # last char off
        {"X-Review-Token": token + "x"},
        {"X-Review-Token": token.upper()},
    ]
    for target in targets:
        for headers in wrong:
            status, body, _ = raw_request(port, "GET", target, headers)
            assert status == 403, (target, headers, status)
            assert SECRET.encode() not in body
        joiner = "&" if "?" in target else "?"
        assert raw_request(port, "GET", f"{target}{joiner}token=bad")[0] == 403
    status, _, _ = raw_request(
        port,
        "POST",
        "/api/decide",
        {},
        '{"annotator": "mallory", "index": 0, "decision": "accept"}',
    )
    assert status == 403
    assert server.store.current(server.review_set.name) == []
    # with it: the page (token in the query, as printed), an image, the script
    status, body, headers = raw_request(port, "GET", f"/?token={token}&annotator=alice")
    assert status == 200 and b"robustlab" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert headers["Referrer-Policy"] == "no-referrer"
    status, body, headers = raw_request(port, "GET", f"/image/0?token={token}")
    assert status == 200 and headers["Content-Type"] == "image/png"
    assert body == server.review_set.items[0].path.read_bytes()


def test_no_file_outside_the_set_is_ever_served(server):
    port, tok = server.port, {"X-Review-Token": server.token}
    n = len(server.review_set)
    attempts = [
        "/image/../../secret.txt",
        "/image/..%2f..%2fsecret.txt",
        "/image/%2e%2e/%2e%2e/secret.txt",
        "/image/0/../../../secret.txt",
        f"/image/{n}",
        "/image/-1",
        "/image/1e0",
        "/image/0x1",
        "/image/%30",
        "/image/" + "9" * 40,
        "/assets/../../secret.txt",
        "/assets/..%2f..%2f..%2fsecret.txt",
        "/assets/review.js/../../../secret.txt",
        "/assets/%2e%2e%2fapp.py",
        "/assets/app.py",
        "/static/review.js",
        "/templates/review.html",
        "//etc/passwd",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/image/0?path=../../secret.txt",
        "/hard/n01440764/notes.txt",
        "/n01440764/img0.png",
        "/" + str(server.review_set.items[0].path),
    ]
    images = {it.path.read_bytes() for it in server.review_set.items}
    served = []
    for target in attempts:
        status, body, _ = raw_request(port, "GET", target, tok)
        assert SECRET.encode() not in body, target
        assert b"import " not in body and b"{%" not in body, target  # no source, no template
        if status == 200:
            assert body in images, target  # whatever is served is an image of the set
            served.append(target)
        else:
            assert status in (400, 403, 404), (target, status)
    # image 0 by index ("%30" is "0"; a query string is not a path), nothing else
    assert served == ["/image/%30", "/image/0?path=../../secret.txt"]


def test_images_browsers_cannot_show_are_served_as_png(world):
    Image.new("RGB", (30, 20), (200, 10, 10)).save(world["data"] / TENCH / "scan.tif")
    rs = load_review_set(world["data"])
    with ReviewServer(rs, ReviewStore(world["db"])) as srv:
        srv.start()
        index = rs.item_by_id(f"{TENCH}/scan.tif").index
        status, body, headers = raw_request(srv.port, "GET", f"/image/{index}?token={srv.token}")
    assert status == 200 and headers["Content-Type"] == "image/png"
    import io

    png = np.asarray(Image.open(io.BytesIO(body)))
    assert png.shape == (20, 30, 3) and (png == [200, 10, 10]).all()


def test_export_without_decisions_says_where_they_are(world, capsys):
    st = ReviewStore(world["db"])
    st.open("old-place", data_root="/old", label_space="imagenet1k", predictions=None, n_images=6)
    st.record("old-place", world["ids"][0], "alice", "accept", label=TENCH)
    out = world["tmp"] / "o.csv"
    assert (
        cli(
            ["review", "--data", str(world["data"]), "--db", str(world["db"]), "--export", str(out)]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "no decisions are stored for set" in err and "'old-place'" in err
    assert "0 of 6 images kept" in err
    assert (
        cli(
            [
                "review",
                "--data",
                str(world["data"]),
                "--db",
                str(world["db"]),
                "--export",
                str(out),
                "--set",
                "old-place",
                "-k",
                "1",
            ]
        )
        == 0
    )
    assert "1 of 6 images kept" in capsys.readouterr().err


def test_bad_api_requests_are_refused(server):
    port, tok = server.port, {"X-Review-Token": server.token}
    for body in [
        '{"annotator": "alice", "index": 99, "decision": "accept"}',
        '{"annotator": "alice", "index": "0", "decision": "accept"}',
        '{"annotator": "alice", "index": true, "decision": "accept"}',
        '{"annotator": "alice", "index": 0, "decision": "delete"}',
        '{"annotator": "alice", "index": 0, "decision": "relabel", "target": "nXXX"}',
        '{"annotator": "<script>", "index": 0, "decision": "accept"}',
        '{"annotator": "", "index": 0, "decision": "accept"}',
        "not json",
    ]:
        status, resp, _ = raw_request(port, "POST", "/api/decide", tok, body)
        assert status == 400, body
        assert b"error" in resp
    assert server.store.current(server.review_set.name) == []


# ---------------------------------------------------------------------------- browser


def open_page(browser, url, problems):
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(m.text))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("response", lambda r: r.status >= 400 and problems.append(f"{r.status} {r.url}"))
    page.goto(url, wait_until="load")
    settle(page)
    return page


def settle(page):
    """Wait until the page has loaded its data and every queued action has answered."""
    page.wait_for_function(
        "() => document.body.dataset.ready === '1' && document.body.dataset.pending === '0'"
    )


def shown(page):
    return page.evaluate("document.body.dataset.imageId")


def press(page, *keys):
    for k in keys:
        page.keyboard.press(k)
    settle(page)


def decisions(store, review_set, annotator):
    return {d.image_id: (d.decision, d.target) for d in store.current(review_set.name, annotator)}


def test_keyboard_review_with_reload_undo_and_relabel(server, browser, world):
    ids, store, rs = world["ids"], server.store, server.review_set
    problems = []
    page = open_page(browser, server.url(), problems)
    assert shown(page) == ids[0]
    assert page.locator("#label-name").inner_text() == "tench"
    assert TENCH in page.locator("#label-keys").inner_text()
    assert "goldfish" in page.locator("#guesses").inner_text()
    assert page.locator("#progress").inner_text() == f"0 of {len(ids)} reviewed by alice"
    # image is really displayed
    page.wait_for_function(
        "() => document.getElementById('image').complete && "
        "document.getElementById('image').naturalWidth === 96"
    )

    press(page, "a", "r")
    assert shown(page) == ids[2]
    assert decisions(store, rs, "alice") == {ids[0]: ("accept", None), ids[1]: ("reject", None)}

    # reload mid-way: the page resumes at the first image alice has not reviewed
    page.reload(wait_until="load")
    settle(page)
    assert shown(page) == ids[2]
    assert page.locator("#progress").inner_text() == f"2 of {len(ids)} reviewed by alice"

    # n, then relabel with the search box (type, arrow, Enter) - keyboard only
    press(page, "n")
    assert shown(page) == ids[3]
    page.keyboard.press("l")
    assert page.locator("#relabel").is_visible()
    page.keyboard.type("goldf")
    assert page.locator("#relabel-list li").first.inner_text().startswith("goldfish")
    press(page, "Enter")
    assert not page.locator("#relabel").is_visible()
    assert decisions(store, rs, "alice")[ids[3]] == ("relabel", GOLDFISH)
    assert shown(page) == ids[4]

    # Escape leaves the dialog without deciding; u undoes the relabel and shows that image
    page.keyboard.press("l")
    page.keyboard.type("chihua")
    press(page, "Escape")
    assert shown(page) == ids[4] and ids[4] not in decisions(store, rs, "alice")
    press(page, "u")
    assert shown(page) == ids[3]
    assert page.locator("#status").inner_text() == "not reviewed yet"
    assert ids[3] not in decisions(store, rs, "alice")
    assert page.locator("#progress").inner_text() == f"3 of {len(ids)} reviewed by alice"

    # arrows browse; deciding on a reviewed image changes the decision
    press(page, "ArrowLeft", "ArrowLeft", "ArrowLeft")
    assert shown(page) == ids[0]
    assert page.locator("#status").inner_text() == "Accepted"
    press(page, "r")
    assert decisions(store, rs, "alice")[ids[0]] == ("reject", None)
    assert shown(page) == ids[3]  # the next image alice has not reviewed
    press(page, "a", "a", "a")
    assert page.locator("#progress").inner_text() == f"All {len(ids)} reviewed by alice"
    assert decisions(store, rs, "alice") == {
        ids[0]: ("reject", None),
        ids[1]: ("reject", None),
        ids[2]: ("not_single", None),
        ids[3]: ("accept", None),
        ids[4]: ("accept", None),
        ids[5]: ("accept", None),
    }
    # the log kept everything, the undo included
    ev = store.events(rs.name)
    assert ev["decision"].tolist().count("undo") == 1
    assert len(ev) == 9
    assert problems == []


@pytest.mark.long
def test_two_annotators_at_once_and_the_exported_set(server, browser, world, capsys):
    ids, store, rs = world["ids"], server.store, server.review_set
    problems = []
    alice = open_page(browser, server.url("alice"), problems)
    bob = open_page(browser, server.url("bob"), problems)
    # interleaved key presses in two browser contexts, without waiting in between
    plan = {"alice": ["a", "a", "r", "n", "a", "r"], "bob": ["a", "r", "r", "a", "a", "a"]}
    for ka, kb in zip(plan["alice"], plan["bob"]):
        alice.keyboard.press(ka)
        bob.keyboard.press(kb)
    settle(alice)
    settle(bob)
    names = {"a": "accept", "r": "reject", "n": "not_single"}
    for who, page in (("alice", alice), ("bob", bob)):
        assert decisions(store, rs, who) == {i: (names[k], None) for i, k in zip(ids, plan[who])}
        assert page.locator("#progress").inner_text() == f"All {len(ids)} reviewed by {who}"
    # bob relabels image 5 to goldfish; a third annotator, carol, joins through the name box
    assert shown(bob) == ids[5]
    bob.keyboard.press("l")
    bob.keyboard.type("goldfish")
    press(bob, "Enter")
    url = server.url("")
    carol_page = browser.new_context().new_page()
    carol_page.goto(url)
    carol_page.locator("#name-input").fill("carol")
    carol_page.keyboard.press("Enter")
    settle(carol_page)
    assert carol_page.locator("#progress").inner_text() == f"0 of {len(ids)} reviewed by carol"
    assert "annotator=carol" in carol_page.url
    press(carol_page, "r", "a", "a", "a", "r")
    carol_page.keyboard.press("l")
    carol_page.keyboard.type(GOLDFISH)
    press(carol_page, "Enter")
    assert decisions(store, rs, "carol")[ids[5]] == ("relabel", GOLDFISH)
    assert problems == []

    # votes per image (alice, bob, carol) and what k = 2 makes of them:
    # 0: a a r -> kept   1: a r a -> kept    2: r r a -> dropped
    # 3: n a a -> kept   4: a a r -> kept    5: r relabel relabel -> kept as goldfish
    out = world["tmp"] / "final.csv"
    assert (
        cli(
            ["review", "--data", str(world["data"]), "--db", str(world["db"]), "--export", str(out)]
        )
        == 0
    )
    err = capsys.readouterr().err
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["file"], r["class"], r["relabelled"]) for r in rows] == [
        (ids[0], TENCH, "False"),
        (ids[1], TENCH, "False"),
        (ids[3], CHIHUAHUA, "False"),
        (ids[4], CHIHUAHUA, "False"),
        (ids[5], GOLDFISH, "True"),
    ]
    assert rows[-1]["class_name"] == "goldfish" and rows[-1]["original_class"] == CHIHUAHUA
    assert [r["support"] for r in rows] == ["2", "2", "2", "2", "2"]
    assert "5 of 6 images kept (1 relabelled" in err and "3 annotator(s)" in err
    # kappa over the 6 images x 3 annotators, computed from the table of categories
    table = [[2, 1, 0, 0], [2, 1, 0, 0], [1, 2, 0, 0], [2, 0, 1, 0], [2, 1, 0, 0], [0, 1, 0, 2]]
    assert f"Fleiss' kappa {fleiss_kappa(table):.3f} over 6 image(s)" in err
    # k = 3: only unanimous images (none here)
    assert (
        cli(
            [
                "review",
                "--data",
                str(world["data"]),
                "--db",
                str(world["db"]),
                "--export",
                str(world["tmp"] / "unanimous.csv"),
                "-k",
                "3",
            ]
        )
        == 0
    )
    assert "0 of 6 images kept" in capsys.readouterr().err
    # the export is a labels CSV robustlab reads: the kept files under their final classes
    from robustlab.data.sources import discover

    kept = discover(world["data"], labels_csv=world["tmp"] / "final.csv")
    assert [(s.id, s.class_name) for s in kept] == [(r["file"], r["class"]) for r in rows]


# ---------------------------------------------------------------------------- the command
def test_the_command_serves_a_token_url_and_stops_cleanly(world):
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "robustlab.cli",
            "review",
            "--data",
            str(world["data"]),
            "--db",
            str(world["db"]),
            "--annotator",
            "alice",
            "--predictions",
            str(world["preds"]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(
            r"open http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)&annotator=alice$", line.strip()
        )
        assert m, line
        port, token = int(m.group(1)), m.group(2)
        assert len(token) >= 32
        assert raw_request(port, "GET", "/api/set")[0] == 403
        status, body, _ = raw_request(port, "GET", f"/api/set?token={token}")
        assert status == 200 and b'"label_space":"imagenet1k"' in body.replace(b" ", b"")
        body = '{"annotator": "alice", "index": 2, "decision": "not_single"}'
        assert raw_request(port, "POST", "/api/decide", {"X-Review-Token": token}, body)[0] == 200
    finally:
        proc.send_signal(2)  # Ctrl-C
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "every decision is saved" in err and "Traceback" not in err
    assert token not in err  # no request log lines with the token
    rs = load_review_set(world["data"])
    stored = decisions(ReviewStore(world["db"]), rs, "alice")
    assert stored == {world["ids"][2]: ("not_single", None)}


def test_command_bad_input_is_one_line(world, capsys):
    for argv, text in [
        (["--data", str(world["tmp"] / "nope")], "does not exist"),
        (["--data", str(world["data"]), "--annotator", "a/b"], "annotator name"),
        (["--data", str(world["data"]), "-k", "0", "--export", "x.csv"], "at least 1"),
        (["--data", str(world["data"]), "--label-space", "demo"], "class folder"),
        (
            ["--data", str(world["data"]), "--predictions", str(world["tmp"] / "none.csv")],
            "cannot read predictions",
        ),
    ]:
        rc = cli(["review", "--db", str(world["db"]), *argv])
        err = capsys.readouterr().err
        assert rc == 2, argv
        lines = [ln for ln in err.splitlines() if not ln.startswith("note:")]
        assert len(lines) == 1 and text in lines[0], err


@pytest.mark.long
def test_a_mined_set_reads_as_words_fits_1280_and_small_photos_fill_the_pane(tmp_path, browser):
    """hard.csv as ``robustlab mine`` writes it: each surrogate's guess is a class name
    marked right or wrong (no ``lite0_top1 = 239``), the cell is a fact in words; a long
    image id wraps instead of scrolling the page sideways at 1280; a 96 px photo is scaled
    up to fill the pane, with square pixels."""
    data = tmp_path / "hard"
    long_name = "gaussian_noise/5/" + "a_very_long_sample_identifier_" * 4 + "0.png"
    make_images(data, {TENCH: 1})
    (data / TENCH / long_name).parent.mkdir(parents=True)
    (data / TENCH / "img0.png").rename(data / TENCH / long_name)
    sid = f"{TENCH}/{long_name}"
    cols = ["file", "class", "sample_id", "shift", "level", "label", "n_wrong"]
    cols += [f"{m}{end}" for m in ("lite0", "lite1") for end in ("_top1", "_top1_name", "_correct")]
    hard = data / "hard.csv"
    with open(hard, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerow(
            [sid, TENCH, f"{TENCH}/x.png", "gaussian_noise", "5", 0, 1]
            + [1, "goldfish", False, 0, "tench", True]
        )
    (data / "mining.json").write_text("{}")
    rs = load_review_set(data, predictions=hard)
    assert rs.notes == []  # robustlab's own hard.csv / mining.json are no bad images
    srv = ReviewServer(rs, ReviewStore(tmp_path / "r.duckdb"), annotator="alice").start()
    try:
        problems = []
        page = open_page(browser, srv.url(), problems)
        guesses = page.locator("#guesses").inner_text()
        assert "lite0" in guesses and "goldfish" in guesses and "\u2717 wrong" in guesses
        assert "tench" in guesses and "\u2713 right" in guesses
        assert "_top1" not in guesses and "_correct" not in guesses and "239" not in guesses
        facts = page.locator("#details").inner_text()
        assert "gaussian_noise, level 5" in facts and "1 of 2" in facts
        assert page.locator("#image-id").inner_text() == sid
        assert page.evaluate(
            "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        page.wait_for_function(
            "() => document.getElementById('image').classList.contains('upscaled')"
        )
        size = page.evaluate(
            "(() => { const i = document.getElementById('image');"
            " return [i.clientWidth, i.clientHeight, i.naturalWidth,"
            " getComputedStyle(i).imageRendering]; })()"
        )
        assert size[2] == 96 and min(size[0], size[1]) > 3 * 96 and size[3] == "pixelated"
        assert problems == []
    finally:
        srv.shutdown()
