"""Per-image maps' numbers: the segmentation and saliency tables (writes, resume keys,
reads)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from robustlab.errors import InputError
from robustlab.store.connection import Database, has_table
from robustlab.store.schema import (
    SALIENCY_COLUMNS,
    SEGMENTATION_COLUMNS,
)


class MapTables(Database):
    """Operations on the ``segmentation`` and ``saliency`` tables (part of
    :class:`robustlab.store.Store`)."""

    def write_segmentation(self, run_id: str, rows) -> int:
        """Insert one batch of per-image segmentation counts in a single transaction.

        Args:
            run_id: The (segmentation) run the rows belong to.
            rows: A DataFrame (or column -> sequence mapping) with ``sample_id``,
                ``shift``, ``level``, ``class_name`` and the integer pixel counts ``tp``,
                ``fp``, ``fn``, ``tn``.

        Returns:
            The number of rows in the batch. Keys already stored are left untouched
            (``INSERT OR IGNORE``), so a replayed batch never duplicates rows.

        Raises:
            ValueError: a column is missing or a count is negative.
        """
        import pyarrow as pa

        cols = [c for c in SEGMENTATION_COLUMNS if c != "run_id"]
        missing = [c for c in cols if c not in rows]
        if missing:
            raise InputError(f"segmentation rows lack column(s) {', '.join(missing)}")
        n = len(rows["sample_id"])
        if n == 0:
            return 0
        counts = {c: np.asarray(rows[c], dtype=np.int64) for c in ("tp", "fp", "fn", "tn")}
        if any((v < 0).any() for v in counts.values()):
            raise InputError("segmentation pixel counts must be non-negative")
        table = pa.table(
            {
                "run_id": pa.array([run_id] * n, pa.string()),
                "sample_id": pa.array([str(v) for v in rows["sample_id"]], pa.string()),
                "shift": pa.array([str(v) for v in rows["shift"]], pa.string()),
                "level": pa.array([str(v) for v in rows["level"]], pa.string()),
                "class_name": pa.array(
                    [None if v is None else str(v) for v in rows["class_name"]], pa.string()
                ),
                **{c: pa.array(v, pa.int64()) for c, v in counts.items()},
            }
        )
        self._insert_batch("segmentation", SEGMENTATION_COLUMNS, table)
        return n

    def segmentation_done_keys(self, run_id: str) -> set[tuple[str, str, str]]:
        """The (sample_id, shift, level) keys stored for segmentation run ``run_id`` (resume)."""
        if not self.exists():
            return set()
        with self.connect(read_only=True) as con:
            if not has_table(con, "segmentation"):
                return set()
            rows = con.execute(
                "SELECT sample_id, shift, level FROM segmentation WHERE run_id = ?", [run_id]
            ).fetchall()
        return {tuple(r) for r in rows}

    def segmentation_counts(self, run_ids: Iterable[str] | None = None):
        """The ``segmentation`` rows as a DataFrame (empty, with its columns, if none).

        A database written before segmentation runs existed has no such table; it reads
        as empty rather than failing.
        """
        return self._optional_table("segmentation", SEGMENTATION_COLUMNS, run_ids)

    def write_saliency(self, run_id: str, rows) -> int:
        """Insert one batch of per-image saliency rows in a single transaction.

        Args:
            run_id: The (saliency) run the rows belong to.
            rows: A DataFrame (or column -> sequence mapping) with the
                :data:`~robustlab.store.schema.SALIENCY_COLUMNS` but ``run_id``; NaN
                numbers are stored as NULL, ``map`` holds bytes.

        Returns:
            The number of rows in the batch (stored keys are left untouched, so a resumed
            run never duplicates them).
        """
        import pyarrow as pa

        cols = [c for c in SALIENCY_COLUMNS if c != "run_id"]
        missing = [c for c in cols if c not in rows]
        if missing:
            raise ValueError(f"saliency rows lack column(s) {', '.join(missing)}")
        n = len(rows["sample_id"])
        if n == 0:
            return 0

        def num(name):
            v = np.asarray(rows[name], dtype=np.float64)
            return pa.array(v, pa.float64(), mask=~np.isfinite(v))

        def ints(name):
            return pa.array([None if v is None else int(v) for v in rows[name]], pa.int32())

        table = pa.table(
            {
                "run_id": pa.array([run_id] * n, pa.string()),
                **{
                    k: pa.array([str(v) for v in rows[k]], pa.string())
                    for k in ("sample_id", "shift", "level")
                },
                "class_name": pa.array(
                    [None if v is None else str(v) for v in rows["class_name"]], pa.string()
                ),
                **{k: ints(k) for k in ("label", "target", "pred")},
                "correct": pa.array([bool(v) for v in rows["correct"]], pa.bool_()),
                **{k: num(k) for k in ("fg_share", "fg_share_norm", "pointing", "mask_area")},
                "map": pa.array([bytes(v) for v in rows["map"]], pa.binary()),
            }
        )
        self._insert_batch("saliency", SALIENCY_COLUMNS, table)
        return n

    def saliency_done_keys(self, run_id: str) -> set[tuple[str, str, str]]:
        """The (sample_id, shift, level) keys stored for saliency run ``run_id`` (resume)."""
        if not self.exists():
            return set()
        with self.connect(read_only=True) as con:
            if not has_table(con, "saliency"):
                return set()
            rows = con.execute(
                "SELECT sample_id, shift, level FROM saliency WHERE run_id = ?", [run_id]
            ).fetchall()
        return {(str(a), str(b), str(c)) for a, b, c in rows}

    def saliency(self, run_ids: Iterable[str] | None = None, *, maps: bool = False):
        """The ``saliency`` rows as a DataFrame (empty, with its columns, if none);
        the ``map`` thumbnails only with ``maps``."""
        cols = [c for c in SALIENCY_COLUMNS if maps or c != "map"]
        return self._optional_table("saliency", cols, run_ids)
