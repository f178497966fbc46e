"""The review web app (Flask): one page, a small JSON API, images served by index.

Security model, for a server that only ever listens on the reviewer's own machine:

- Every request must carry the access token printed with the URL (``?token=`` or the
  ``X-Review-Token`` header), compared in constant time; anything else is a 403. The token
  keeps other local users and web pages (DNS rebinding, cross-site requests) out.
- Nothing is served by a path the client sends. Images are ``/image/<index>`` looked up in
  the review set; the page's own script and style are a fixed table. Flask's static-file
  route is switched off, so no URL maps onto the file system.
- An image is sent only when it is, at the moment of the request, a regular file whose
  real path lies inside the data folder (:func:`robustlab.files.safety.file_inside`; a link
  swapped in after the set was read leads nowhere) and Pillow decodes it as an image; it is
  sent with the media type of its decoded format, never of its name.
- Responses forbid framing, sniffing and referrers (the token is in the URL), and a content
  security policy allows only this server's own script, style and images.

Decisions are written by the server through :class:`robustlab.store.reviews.ReviewStore`,
one short locked transaction per request.
"""

from __future__ import annotations

import hmac
import json
import logging
from importlib import resources

import PIL.Image
from flask import Flask, abort, jsonify, make_response, render_template, request, send_file

from robustlab.errors import InputError, StoreError
from robustlab.files.safety import file_inside, real
from robustlab.workflows.imagenet_d.review.items import ReviewSet
from robustlab.store.reviews import DECISIONS, ReviewStore, check_annotator

log = logging.getLogger(__name__)

# The only non-image files the server sends: name -> (package file, media type).
ASSETS = {
    "review.js": ("static/review.js", "text/javascript; charset=utf-8"),
    "review.css": ("static/review.css", "text/css; charset=utf-8"),
    "favicon.svg": ("static/favicon.svg", "image/svg+xml"),
}
# Formats every browser shows; others (TIFF, PNM) are converted to PNG when served.
WEB_IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".jpe", ".png", ".gif", ".webp", ".bmp"})
# Decoded formats sent as they are, with their media type.
WEB_FORMATS = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "GIF": "image/gif",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "MPO": "image/jpeg",  # a JPEG with extra frames (many cameras)
}
# The largest request body the API reads (decisions and undos are tiny JSON objects).
MAX_BODY_BYTES = 64 * 1024
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
        "img-src 'self'; connect-src 'self'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}


def create_app(review_set: ReviewSet, store: ReviewStore, token: str) -> Flask:
    """The Flask app reviewing ``review_set`` into ``store``, guarded by ``token``.

    The annotator's name travels in the page URL (``?annotator=``), so each person's
    bookmark opens their own progress; without one the page asks for it. The routes come
    in groups: the guard every request passes (token, headers, error answers), the page
    and its assets, the items (images and the set), and the annotations (state, decide,
    undo).
    """
    app = Flask(
        __name__,
        static_folder=None,
        template_folder=str(resources.files(_PACKAGE) / "templates"),
    )
    # A decision is a few dozen bytes: a huge body is refused (413) before it is read.
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    _guard_routes(app, token)
    _page_routes(app, review_set, token)
    _item_routes(app, review_set)
    _annotation_routes(app, review_set, store)
    return app


_PACKAGE = "robustlab.workflows.imagenet_d.review"


def _guard_routes(app: Flask, token: str) -> None:
    """The token check before every request, the security headers after it, and the
    answers for refused, unknown, oversized and database-down requests."""

    @app.before_request
    def _require_token():
        given = request.args.get("token") or request.headers.get("X-Review-Token") or ""
        if not hmac.compare_digest(given.encode(), token.encode()):
            abort(403)

    @app.after_request
    def _headers(response):
        response.headers.update(SECURITY_HEADERS)
        if response.mimetype == "application/json" or response.mimetype == "text/html":
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(403)
    def _forbidden(_):
        return app.response_class(
            "403 forbidden: this review server needs its access token (open the URL it "
            "printed when it started)\n",
            status=403,
            mimetype="text/plain",
        )

    @app.errorhandler(404)
    def _not_found(_):
        return jsonify(error="not found"), 404

    @app.errorhandler(413)
    def _too_large(_):
        return jsonify(error=f"request body over {MAX_BODY_BYTES} bytes"), 413

    @app.errorhandler(StoreError)
    def _store_down(exc):
        log.warning("review database: %s", exc)
        lost = " - the decision was not saved" if request.method == "POST" else ""
        return jsonify(error=f"{exc}{lost}; try again"), 503


def _page_routes(app: Flask, review_set: ReviewSet, token: str) -> None:
    """The one page and the fixed table of its script, style and icon."""
    assets = {
        name: (resources.files(_PACKAGE).joinpath(path).read_bytes(), mime)
        for name, (path, mime) in ASSETS.items()
    }

    @app.get("/")
    def page():
        annotator = request.args.get("annotator") or ""
        try:
            annotator = check_annotator(annotator) if annotator else ""
        except InputError:
            annotator = ""
        config = {
            "token": token,
            "annotator": annotator,
            "set": review_set.name,
            "n": len(review_set),
            "label_space": review_set.label_space,
        }
        return render_template(
            "review.html",
            config=config,
            title=_title(review_set),
            set_label=review_set.root.name or str(review_set.root),
        )

    @app.get("/assets/<name>")
    def asset(name):
        if name not in assets:
            abort(404)
        body, mime = assets[name]
        return app.response_class(
            body,
            mimetype=mime.split(";")[0],
            headers={"Content-Type": mime, "Cache-Control": "no-cache"},
        )


def _set_json(review_set: ReviewSet) -> dict:
    """The review set as the page reads it: items with their guesses, classes, decisions."""
    return {
        "name": review_set.name,
        "label_space": review_set.label_space,
        "n": len(review_set),
        "items": [
            {
                "index": it.index,
                "id": it.id,
                "label": it.label,
                "guesses": [g._asdict() for g in it.guesses],
                "details": [{"what": k, "value": v} for k, v in it.details],
            }
            for it in review_set.items
        ],
        "classes": [c.as_json() for c in review_set.classes],
        "decisions": list(DECISIONS),
    }


def _item_routes(app: Flask, review_set: ReviewSet) -> None:
    """The set's items: each image by its index, and the set itself as JSON."""
    set_json = _set_json(review_set)

    @app.get("/image/<int:index>")
    def image(index):
        if not 0 <= index < len(review_set):
            abort(404)
        path = file_inside(review_set.root, review_set.items[index].id)
        if path is None:
            abort(404)
        path = real(path)
        mime = _web_mime(path)
        if mime is not None:
            # The file's own name never reaches a header: a name with a newline (legal on
            # POSIX) made werkzeug's Content-Disposition a 500.
            name = f"{index}{path.suffix.lower()}"
            return send_file(
                path, mimetype=mime, conditional=True, max_age=3600, download_name=name
            )
        return _as_png(path)

    @app.get("/api/set")
    def api_set():
        return jsonify(set_json)


def _annotation_routes(app: Flask, review_set: ReviewSet, store: ReviewStore) -> None:
    """An annotator's state, a decision, and the undo of the last one."""

    @app.get("/api/state")
    def api_state():
        return jsonify(_state(review_set, store, _annotator(request.args.get("annotator"))))

    @app.post("/api/decide")
    def api_decide():
        body = _json_object('{"annotator": ..., "index": ..., "decision": ...}')
        annotator = _annotator(body.get("annotator"))
        index = body.get("index")
        if type(index) is not int or not 0 <= index < len(review_set):  # bool is not an index
            return jsonify(error=f"no image {index!r} in this set"), 400
        item = review_set.items[index]
        decision = body.get("decision")
        if decision not in DECISIONS:
            return jsonify(error=f"unknown decision {decision!r}"), 400
        target = target_name = None
        if decision == "relabel":
            info = review_set.class_info(str(body.get("target") or ""))
            if info is None:
                return jsonify(error=f"unknown class {body.get('target')!r}"), 400
            if info.key == item.label:
                decision = "accept"  # relabelling to its own class is agreeing with it
            else:
                target, target_name = info.key, info.name
        store.record(
            review_set.name,
            item.id,
            annotator,
            decision,
            label=item.label,
            target=target,
            target_name=target_name,
        )
        return jsonify(_state(review_set, store, annotator))

    @app.post("/api/undo")
    def api_undo():
        body = _json_object('{"annotator": ...}', empty_ok=True)
        annotator = _annotator(body.get("annotator"))
        withdrawn = store.undo(review_set.name, annotator)
        state = _state(review_set, store, annotator)
        if withdrawn is not None:
            item = review_set.item_by_id(withdrawn.image_id)
            state["undone"] = {
                "index": item.index if item else None,
                "decision": withdrawn.decision,
                "target": withdrawn.target,
            }
        else:
            state["undone"] = None
        return jsonify(state)


def _json_object(shape: str, *, empty_ok: bool = False) -> dict:
    """The request's JSON body as a dict, or a 400 that says the shape expected.

    One gate for every POST: an array, a number, a string or broken JSON is the
    client's mistake (400), never a 500 from ``.get`` on a list. ``empty_ok``: a POST
    with no body at all means ``{}``.
    """
    raw = request.get_data(cache=True)
    if empty_ok and not raw:
        return {}
    try:  # json.loads, not get_json: a deeply nested array raises RecursionError
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    if not isinstance(body, dict):
        abort(make_response(jsonify(error=f"the body must be a JSON object: {shape}"), 400))
    return body


def _annotator(name) -> str:
    """The request's annotator name, checked (a 400 with the reason when it is not one)."""
    if name is not None and not isinstance(name, str):
        abort(make_response(jsonify(error=f"annotator must be a name, got {name!r}"), 400))
    try:
        return check_annotator(name or "")
    except InputError as exc:
        abort(make_response(jsonify(error=exc.message), 400))


def _state(review_set: ReviewSet, store: ReviewStore, annotator: str) -> dict:
    """This annotator's current decisions (by image index) and progress."""
    decisions = {}
    for d in store.current(review_set.name, annotator):
        item = review_set.item_by_id(d.image_id)
        if item is not None:
            decisions[item.index] = {
                "decision": d.decision,
                "target": d.target,
                "target_name": d.target_name,
            }
    return {
        "annotator": annotator,
        "reviewed": len(decisions),
        "n": len(review_set),
        "decisions": decisions,
    }


# What opening a file the app cannot show raises: not an image, damaged, or refused by the
# header limits every reader shares (ImageError is a ValueError; a decompression bomb's
# error is neither an OSError nor a ValueError, and was a 500).
UNSHOWABLE = (OSError, ValueError, SyntaxError, EOFError, PIL.Image.DecompressionBombError)


def _web_mime(path):
    """The media type to send ``path`` under unchanged: a browser format (by its name and
    by what Pillow decodes), else None (converted to PNG, or refused when not an image)."""
    from PIL import Image

    from robustlab.data.images import check_header

    if path.suffix.lower() not in WEB_IMAGE_SUFFIXES:
        return None
    try:
        with Image.open(path) as img:
            check_header(img)
            fmt = img.format
            img.verify()
    except UNSHOWABLE:
        return None  # _as_png tries a full decode and answers 415 when that fails too
    return WEB_FORMATS.get(fmt or "")


def _as_png(path):
    """A PNG of an image browsers cannot show (a 415 when it cannot be decoded at all)."""
    import io

    from PIL import Image

    from robustlab.data.images import check_header

    try:
        with Image.open(path) as img:
            check_header(img)
            img.load()
            buf = io.BytesIO()
            (img if img.mode in ("RGB", "RGBA", "L") else img.convert("RGB")).save(buf, "PNG")
    except UNSHOWABLE as exc:
        log.warning("cannot show %s: %s", path, exc)
        abort(415)
    return send_file(io.BytesIO(buf.getvalue()), mimetype="image/png", max_age=3600)


def _title(review_set: ReviewSet) -> str:
    return f"Review: {review_set.root.name or review_set.root}"


__all__ = ["create_app", "ASSETS", "SECURITY_HEADERS"]
