"""The prediction writer: predicted rows reach the database on a background thread, in
one transaction every :data:`WRITE_INTERVAL_S` seconds at most, so the model never waits
for the database."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from robustlab.store import Store

# Seconds between two of the prediction writer's transactions, at least (see
# :class:`PredictionWriter`): each costs 35 ms of CPU on an idle core and 40-130 ms of wall
# time beside a forward pass on every core (measured on 2 cores), so under 1 % of a core;
# a crash loses at most this much work, and the progress bars advance in steps of it.
# At 2 s, a 6 s CPU evaluation made 4 transactions, and took 0.5 s longer (median of 6).
WRITE_INTERVAL_S = 5.0


class PredictionWriter:
    """Stores prediction batches on a background thread, so the model never waits for
    the database.

    The queue is bounded (``depth`` batches): when the database falls behind, the main
    loop blocks instead of piling up rows in memory. One transaction stores every batch
    that arrived since the last one, and a transaction starts at most every ``interval``
    seconds: each costs a DuckDB connection (open, insert, commit, checkpoint, close:
    about 35 ms of CPU whether it holds 32 rows or 256, measured on this project's 2-core
    machine), and on a CPU-only machine that CPU is taken from the forward pass running
    beside it (8 batches of lite0 were 8 transactions, 0.28 CPU-s of a 5 s run). The
    connection is not kept open between transactions: other processes may read and write
    the same database meanwhile. The first batch is stored at once; a crash loses at
    most the rows of the last ``interval`` (a rerun predicts them again). :meth:`close`
    writes everything queued at once, also after Ctrl-C or SIGTERM (those rows are already
    predicted; losing them would only cost time on resume), and re-raises a write error
    in the caller's thread.

    Args:
        store: The results database.
        run_id: Run the rows belong to.
        depth: Batches the queue holds before :meth:`put` blocks.
        interval: Seconds between the starts of two transactions, at least.
        on_written: Called in the writer thread with each stored group of rows.
    """

    _STOP = object()

    def __init__(
        self,
        store: Store,
        run_id: str,
        *,
        depth: int = 8,
        interval: float = WRITE_INTERVAL_S,
        on_written: Callable[[dict], Any] | None = None,
    ):
        import queue
        import threading

        self.store = store
        self.run_id = run_id
        self.interval = max(0.0, float(interval))
        self.on_written = on_written
        self.error: BaseException | None = None
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(depth)))
        self._thread = threading.Thread(target=self._loop, name="robustlab-db-writer", daemon=True)
        self._closed = False
        self._thread.start()

    def put(self, rows: dict) -> None:
        """Queue one batch of rows (blocks while the queue is full)."""
        if self.error is not None:
            raise self.error
        self._queue.put(rows)

    def close(self) -> None:
        """Write what is queued, stop the thread, re-raise its error if it had one."""
        if not self._closed:
            self._closed = True
            self._queue.put(self._STOP)
            self._thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _loop(self) -> None:
        import queue

        held: list[dict] = []  # batches received, not yet stored
        last = -math.inf  # when the last transaction started (time.monotonic)
        stop = False
        while not stop:
            wait = None if not held else max(0.0, last + self.interval - time.monotonic())
            try:
                group = [self._queue.get(timeout=wait)]
            except queue.Empty:
                group = []
            while True:  # and whatever else is already waiting
                try:
                    group.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(g is self._STOP for g in group)
            held.extend(g for g in group if g is not self._STOP)
            if self.error is not None:
                held.clear()  # after an error, drain without writing so put() never blocks
                continue
            if not held or (not stop and time.monotonic() < last + self.interval):
                continue
            last = time.monotonic()
            rows = _concat_rows(held)
            held = []
            try:
                self.store.write_predictions(self.run_id, rows)
                if self.on_written is not None:
                    self.on_written(rows)
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self.error = exc


def _concat_rows(batches: list[dict]) -> dict:
    """One rows dict from several (lists joined, arrays stacked)."""
    if len(batches) == 1:
        return batches[0]
    out = {}
    for key, first in batches[0].items():
        if isinstance(first, np.ndarray):
            out[key] = np.concatenate([b[key] for b in batches])
        else:
            out[key] = [v for b in batches for v in b[key]]
    return out
