"""Running the review app: a threaded local HTTP server with a fresh access token.

Werkzeug's threaded server (the one behind ``flask run``) is enough for a handful of people
on one machine; it binds to 127.0.0.1 unless told otherwise and to a free port when asked
for port 0, and ``ReviewServer.url`` is the address to open, token included.
"""

from __future__ import annotations

import logging
import secrets
import threading
from urllib.parse import quote, urlencode

from werkzeug.serving import make_server

from robustlab.errors import EnvironmentProblem
from robustlab.workflows.imagenet_d.review.app import create_app
from robustlab.workflows.imagenet_d.review.items import ReviewSet
from robustlab.store.reviews import ReviewStore

log = logging.getLogger(__name__)


class ReviewServer:
    """A review app bound to ``host:port``, not yet serving.

    Args:
        review_set: The images.
        store: Where decisions go; opened (tables created, set recorded) here, so a
            database nobody can write to fails before anyone opens the page.
        host: Interface to listen on (default loopback only).
        port: TCP port; 0 picks a free one.
        annotator: Name put in the printed URL (each person can change it in the page).
        token: Access token; default a fresh ``secrets.token_urlsafe(24)``.
        quiet: Keep Werkzeug's per-request log lines (which would print the token of every
            image URL) out of the terminal.
    """

    def __init__(
        self,
        review_set: ReviewSet,
        store: ReviewStore,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        annotator: str | None = None,
        token: str | None = None,
        quiet: bool = True,
    ):
        self.review_set = review_set
        self.store = store
        self.token = token or secrets.token_urlsafe(24)
        self.annotator = annotator
        store.open(
            review_set.name,
            data_root=str(review_set.root),
            label_space=review_set.label_space,
            predictions=str(review_set.predictions) if review_set.predictions else None,
            n_images=len(review_set),
        )
        if quiet:
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
        app = create_app(review_set, store, self.token)
        try:
            self._server = make_server(host, port, app, threaded=True)
        except OSError as exc:
            raise EnvironmentProblem(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint="pick another --port (0 takes a free one)",
            ) from None
        self.host = host
        self.port = self._server.server_port
        self._thread: threading.Thread | None = None

    def url(self, annotator: str | None = None) -> str:
        """The page's address with the token (and an annotator name, when given)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        params = {"token": self.token}
        name = annotator if annotator is not None else self.annotator
        if name:
            params["annotator"] = name
        return f"http://{host}:{self.port}/?{urlencode(params, quote_via=quote)}"

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (or Ctrl-C in the calling thread)."""
        self._server.serve_forever()

    def start(self) -> ReviewServer:
        """Serve from a daemon thread (tests, notebooks) and return self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, daemon=True, name="robustlab-review"
        )
        self._thread.start()
        return self

    def shutdown(self) -> None:
        """Stop serving and release the port."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()


__all__ = ["ReviewServer"]
