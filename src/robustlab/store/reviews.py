"""Human review decisions in the results database: an append-only event log.

Why a log and not a table of current decisions: a review is evidence (who said what about
which image, and when), and an undo or a change of mind must not erase what was said
before. Every click is one row of ``review_events``; an undo is a row of its own
(``decision = 'undo'``, ``undoes`` = the withdrawn event's id). The current decision of an
annotator on an image is therefore a query, not a stored value: the latest decision event
for (set, annotator, image) that no undo withdraws (view ``review_current``).

Tables (additive, ``CREATE ... IF NOT EXISTS``; an older results file gains them on the
first review)::

    review_sets(review_set PK, data_root, label_space, predictions, n_images,
                created_at, updated_at)
    review_events(event_id PK, review_set, image_id, annotator, decision, label,
                  target, target_name, undoes, created_at)

``decision`` is one of :data:`DECISIONS` or ``'undo'``; ``label`` is the image's class key
when the decision was made; ``target``/``target_name`` the class chosen by a relabel.

Access goes through :class:`robustlab.store.Store`'s short locked transactions, so a review
server shares the file with ``robustlab evaluate`` / ``results`` / ``report``: DuckDB allows
one writer per file at a time, and the OS file lock plus a per-process thread lock serialise
everyone. A file held by a process that does not use robustlab's lock (the DuckDB CLI, a
notebook) makes every call fail with one :class:`~robustlab.errors.StoreError` line once
``timeout`` seconds have passed.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from robustlab.errors import InputError, StoreError
from robustlab.store.connection import utcnow
from robustlab.store.db import Store
from robustlab.locks import LockTimeout

# What an annotator can say about an image (besides undoing).
DECISIONS = ("accept", "reject", "not_single", "relabel")
UNDO = "undo"

REVIEW_DDL = [
    "CREATE SEQUENCE IF NOT EXISTS review_event_seq START 1",
    """
    CREATE TABLE IF NOT EXISTS review_sets (
        review_set VARCHAR PRIMARY KEY,
        data_root VARCHAR,
        label_space VARCHAR,
        predictions VARCHAR,
        n_images INTEGER,
        created_at TIMESTAMP,
        updated_at TIMESTAMP
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS review_events (
        event_id BIGINT PRIMARY KEY DEFAULT nextval('review_event_seq'),
        review_set VARCHAR NOT NULL,
        image_id VARCHAR NOT NULL,
        annotator VARCHAR NOT NULL,
        decision VARCHAR NOT NULL,
        label VARCHAR,
        target VARCHAR,
        target_name VARCHAR,
        undoes BIGINT,
        created_at TIMESTAMP NOT NULL
    )
    """,
    # The current decision per (set, annotator, image): the latest decision event that no
    # undo withdrew. Exposed as a view so that the DuckDB CLI can answer it too.
    """
    CREATE OR REPLACE VIEW review_current AS
    SELECT review_set, image_id, annotator, decision, label, target, target_name,
           event_id, created_at
    FROM (
        SELECT e.*, row_number() OVER (
            PARTITION BY review_set, annotator, image_id ORDER BY event_id DESC) AS rn
        FROM review_events e
        WHERE decision <> 'undo'
          AND event_id NOT IN (SELECT undoes FROM review_events
                               WHERE decision = 'undo' AND undoes IS NOT NULL)
    )
    WHERE rn = 1
    """,
]

_ANNOTATOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._@-]{0,63}$")


def check_annotator(name: str) -> str:
    """The annotator name, stripped, or an :class:`~robustlab.errors.InputError`.

    Names are shown in the page and stored as given, so they are kept to a short, plain
    alphabet (letters, digits, space, ``._@-``; 1 to 64 characters).
    """
    text = (name or "").strip()
    if not _ANNOTATOR.match(text):
        raise InputError(
            f"annotator name {name!r} is not usable",
            hint="use 1-64 letters, digits, spaces or ._@- (starting with a letter or digit)",
        )
    return text


@dataclass(frozen=True)
class Decision:
    """One annotator's current decision on one image (a row of ``review_current``)."""

    image_id: str
    annotator: str
    decision: str
    label: str | None
    target: str | None
    target_name: str | None
    event_id: int
    created_at: datetime


class ReviewStore:
    """Review events of one database file.

    Args:
        path: The results database (DuckDB); created on the first write.
        timeout: Seconds to wait for another process's transaction before giving up with a
            :class:`~robustlab.errors.StoreError`.
    """

    def __init__(self, path: str | Path, *, timeout: float = 10.0):
        self.store = Store(path, timeout=timeout)
        self.path = self.store.path
        self._lock = threading.Lock()
        self._ready = False

    def __repr__(self) -> str:
        return f"ReviewStore({str(self.path)!r})"

    # ------------------------------------------------------------------ connections
    def _connect(self, *, read_only: bool = False):
        """A locked connection; every failure to get one becomes a one-line StoreError."""
        return _Guarded(self, read_only)

    def open(
        self,
        review_set: str,
        *,
        data_root: str,
        label_space: str,
        predictions: str | None,
        n_images: int,
    ) -> None:
        """Create the review tables if needed and record (or refresh) the review set.

        Called once when a server starts, so that a database nobody can write to is
        reported before a browser is pointed at it.
        """
        now = utcnow()
        with self._connect() as con:
            con.execute(
                "INSERT INTO review_sets VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (review_set) "
                "DO UPDATE SET data_root = excluded.data_root, label_space = "
                "excluded.label_space, predictions = excluded.predictions, n_images = "
                "excluded.n_images, updated_at = excluded.updated_at",
                [review_set, data_root, label_space, predictions, n_images, now, now],
            )

    # ------------------------------------------------------------------ writes
    def record(
        self,
        review_set: str,
        image_id: str,
        annotator: str,
        decision: str,
        *,
        label: str | None,
        target: str | None = None,
        target_name: str | None = None,
    ) -> int:
        """Append one decision event and return its id.

        Raises:
            ValueError: an unknown decision, or a relabel without a target (a bug in the
                caller: the web app validates what the page sends).
        """
        if decision not in DECISIONS:
            raise ValueError(f"unknown review decision {decision!r}")
        if (decision == "relabel") != (target is not None):
            raise ValueError("a relabel needs a target class, and only a relabel has one")
        with self._connect() as con:
            return con.execute(
                "INSERT INTO review_events (review_set, image_id, annotator, decision, label, "
                "target, target_name, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "RETURNING event_id",
                [review_set, image_id, annotator, decision, label, target, target_name, utcnow()],
            ).fetchall()[0][0]

    def undo(self, review_set: str, annotator: str) -> Decision | None:
        """Withdraw the annotator's most recent standing decision in the set.

        Repeated undos walk back through earlier decisions (also on other images); an
        image whose decision is withdrawn shows the one before it, if any. Returns the
        withdrawn decision, or None when there is nothing left to undo.
        """
        with self._connect() as con:
            rows = con.execute(
                f"SELECT {_DECISION_COLUMNS} FROM review_events e WHERE review_set = ? "
                "AND annotator = ? AND decision <> 'undo' AND event_id NOT IN (SELECT undoes "
                "FROM review_events WHERE decision = 'undo' AND undoes IS NOT NULL) "
                "ORDER BY event_id DESC LIMIT 1",
                [review_set, annotator],
            ).fetchall()
            if not rows:
                return None
            withdrawn = Decision(*rows[0])
            con.execute(
                "INSERT INTO review_events (review_set, image_id, annotator, decision, label, "
                "undoes, created_at) VALUES (?, ?, ?, 'undo', ?, ?, ?)",
                [
                    review_set,
                    withdrawn.image_id,
                    annotator,
                    withdrawn.label,
                    withdrawn.event_id,
                    utcnow(),
                ],
            )
        return withdrawn

    # ------------------------------------------------------------------ reads
    def current(self, review_set: str, annotator: str | None = None) -> list[Decision]:
        """Current decisions in the set (of one annotator, or of everyone), oldest first."""
        if not self.path.exists():
            return []
        sql = f"SELECT {_DECISION_COLUMNS} FROM review_current e WHERE review_set = ?"
        params = [review_set]
        if annotator is not None:
            sql += " AND annotator = ?"
            params.append(annotator)
        with self._connect() as con:
            return [
                Decision(*row) for row in con.execute(sql + " ORDER BY event_id", params).fetchall()
            ]

    def events(self, review_set: str | None = None):
        """Every event (decisions and undos) as a DataFrame, in the order they happened."""
        import pandas as pd

        if not self.path.exists():
            return pd.DataFrame()
        where, params = ("WHERE review_set = ?", [review_set]) if review_set else ("", [])
        with self._connect() as con:
            return con.execute(
                f"SELECT * FROM review_events {where} ORDER BY event_id", params
            ).df()

    def review_sets(self) -> list[str]:
        """Names of the review sets recorded in the file."""
        if not self.path.exists():
            return []
        with self._connect() as con:
            return [
                r[0]
                for r in con.execute(
                    "SELECT review_set FROM review_sets ORDER BY created_at"
                ).fetchall()
            ]


_DECISION_COLUMNS = (
    "e.image_id, e.annotator, e.decision, e.label, e.target, e.target_name, "
    "e.event_id, e.created_at"
)


class _Guarded:
    """Context manager: the thread lock, then ``Store.connect``, with errors made one line.

    The thread lock serialises the web server's request threads (one DuckDB writer per
    file, and the file lock is per open file description, not per thread); the file lock
    inside ``Store.connect`` serialises processes.
    """

    def __init__(self, owner: ReviewStore, read_only: bool):
        self.owner = owner
        self.read_only = read_only
        self._cm = None

    def __enter__(self):
        import duckdb

        owner = self.owner
        owner._lock.acquire()
        try:
            self._cm = owner.store.connect(read_only=self.read_only)
            con = self._cm.__enter__()
            if not owner._ready and not self.read_only:
                for stmt in REVIEW_DDL:
                    con.execute(stmt)
                owner._ready = True
            return con
        except BaseException as exc:
            self._cm = None
            owner._lock.release()
            if isinstance(exc, StoreError):  # already one user-facing line
                raise
            if isinstance(exc, (LockTimeout, duckdb.Error)):
                raise _store_error(owner.path, exc) from None
            raise

    def __exit__(self, exc_type, exc, tb):
        try:
            return self._cm.__exit__(exc_type, exc, tb)
        finally:
            self.owner._lock.release()


def _store_error(path: Path, exc: BaseException) -> StoreError:
    """One line for a database that cannot be opened: locked, or not a DuckDB file."""
    text = " ".join(str(exc).split())
    if isinstance(exc, LockTimeout) or "lock" in text.lower():
        pid = re.search(r"PID (\d+)", text)
        who = f"process {pid.group(1)}" if pid else "another process"
        return StoreError(
            f"review database {path} is locked by {who}",
            hint="close the other program using it (a DuckDB shell, a notebook, "
            "another review server) or use another --db",
        )
    return StoreError(
        f"cannot use review database {path}: {text}",
        hint="point --db at a robustlab results database or a new file",
    )


__all__ = ["ReviewStore", "Decision", "DECISIONS", "UNDO", "REVIEW_DDL", "check_annotator"]
