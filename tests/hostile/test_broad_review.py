"""The review app's JSON API, served by a real HTTP server, fed malformed bodies.

Why a started server and not only Flask's test client: the body travels through a real
socket and werkzeug's request parsing, as a browser's or a script's would. Every
malformed body is the client's mistake: a 4xx with a JSON error, never a 500, and the
stored decisions stay as they were.
"""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402

TOKEN = "broad-token"
ACCEPT = b'{"annotator": "alice", "index": 0, "decision": "accept"}'

# Bodies that are JSON but not an object, or not JSON at all.
MALFORMED = [
    "[1, 2]",
    "[]",
    "7",
    "-1e309",
    '"accept"',
    "null",
    "true",
    "{not json",
    '"' + "x" * 50_000 + '"',
    "[" * 5000 + "]" * 5000,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from PIL import Image
    from werkzeug.serving import make_server

    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.app import create_app
    from robustlab.store.reviews import ReviewStore

    tmp = tmp_path_factory.mktemp("review")
    data = tmp / "hard"
    for row in h.photo_rows(2):
        (data / row["wnid"]).mkdir(parents=True, exist_ok=True)
        Image.open(h.MINI / row["file"]).save(data / row["wnid"] / "a.png")
    app = create_app(load_review_set(data), ReviewStore(tmp / "r.duckdb"), TOKEN)
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}"
    finally:
        srv.shutdown()
        thread.join()


def _post(base: str, path: str, body: bytes) -> tuple[int, dict]:
    req = urllib.request.Request(
        base + path,
        data=body,
        method="POST",
        headers={"X-Review-Token": TOKEN, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _state(base: str) -> dict:
    req = urllib.request.Request(
        base + "/api/state?annotator=alice", headers={"X-Review-Token": TOKEN}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize("path", ["/api/decide", "/api/undo"])
def test_malformed_json_bodies_are_a_400_and_change_nothing(server, path):
    code, _ = _post(server, "/api/decide", ACCEPT)
    assert code == 200
    before = _state(server)
    for body in MALFORMED:
        code, reply = _post(server, path, body.encode())
        assert code == 400, (path, body[:40], code)
        assert "JSON object" in reply["error"]
    assert _state(server) == before


# Objects with a field of the wrong type or size; undo reads only the annotator.
WRONG_TYPES = [
    ("/api/undo", {"annotator": 7}),
    ("/api/undo", {"annotator": {"a": 1}}),
    ("/api/undo", {"annotator": "x" * 50_000}),
    ("/api/decide", {"annotator": ["alice"], "index": 0, "decision": "accept"}),
    ("/api/decide", {"annotator": "x" * 50_000, "index": 0, "decision": "accept"}),
    ("/api/decide", {"annotator": "alice", "index": "0", "decision": "accept"}),
    ("/api/decide", {"annotator": "alice", "index": 10**30, "decision": "accept"}),
    ("/api/decide", {"annotator": "alice", "index": 0.0, "decision": "accept"}),
    ("/api/decide", {"annotator": "alice", "index": 0, "decision": ["accept"]}),
    ("/api/decide", {"annotator": "alice", "index": 0, "decision": "relabel", "target": {}}),
]


def test_wrong_types_in_a_json_object_are_a_400_and_change_nothing(server):
    before = _state(server)
    for path, fields in WRONG_TYPES:
        code, reply = _post(server, path, json.dumps(fields).encode())
        assert code == 400, (path, str(fields)[:80], code)
        assert reply["error"]
    assert _state(server) == before


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    from robustlab.workflows.imagenet_d.review.app import MAX_BODY_BYTES

    body = json.dumps({"annotator": "alice", "pad": "x" * (2 * MAX_BODY_BYTES)}).encode()
    code, reply = _post(server, "/api/undo", body)
    assert code == 413 and str(MAX_BODY_BYTES) in reply["error"]


def test_every_image_of_a_hostile_folder_is_served_or_refused_never_a_500(tmp_path):
    """Names and files a real folder holds: a newline in the name (its Content-Disposition
    was a 500), a decompression bomb and a header claiming 2^31 x 2^31 (Pillow's bomb
    error is not an OSError: a 500), a 30000x2 strip. Shown, or a 415."""
    import shutil

    from PIL import Image

    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.app import create_app
    from robustlab.store.reviews import ReviewStore

    row = h.photo_rows(1)[0]
    cls = tmp_path / "hard" / row["wnid"]
    cls.mkdir(parents=True)
    shutil.copyfile(h.MINI / row["file"], cls / "new\nline.JPEG")
    big = Image.new("L", (1, 1))
    big.save(cls / "huge_header.png")
    data = bytearray((cls / "huge_header.png").read_bytes())
    data[16:24] = (2**31 - 1).to_bytes(4, "big") * 2  # IHDR width and height
    (cls / "huge_header.png").write_bytes(bytes(data))
    Image.new("RGB", (30_000, 2), "red").save(cls / "strip.png")
    rs = load_review_set(tmp_path / "hard")
    client = create_app(rs, ReviewStore(tmp_path / "r.duckdb"), TOKEN).test_client()
    status = {
        it.id.rsplit("/", 1)[-1]: client.get(f"/image/{it.index}?token={TOKEN}").status_code
        for it in rs.items
    }
    assert status == {"new\nline.JPEG": 200, "huge_header.png": 415, "strip.png": 415}
