"""Predictions and measured attributes: batch writes, the resume queries, reads and the
Parquet export."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import InputError, environment_errors
from robustlab.store.connection import Database, has_table, in_clause
from robustlab.store.engine import quote
from robustlab.store.schema import (
    ATTRIBUTE_COLUMNS,
    ATTRIBUTE_VALUE_COLUMNS,
    PREDICTION_COLUMNS,
)


class PredictionsTable(Database):
    """Operations on the ``predictions`` and ``attributes`` tables and the export (part
    of :class:`robustlab.store.Store`)."""

    def write_predictions(self, run_id: str, rows: dict[str, Any]) -> int:
        """Insert one batch of predictions in a single transaction.

        Args:
            run_id: The run the rows belong to.
            rows: Column -> sequence: ``sample_id``, ``shift``, ``level`` (str),
                ``label``, ``class_name``, ``top5_ids`` (B x k ints), ``top5_probs``
                (B x k floats), ``correct``, ``correct5``.

        Returns:
            The number of rows in the batch. Keys already stored are left untouched
            (``INSERT OR IGNORE``), so a replayed batch never duplicates rows.
        """
        import pyarrow as pa

        n = len(rows["sample_id"])
        if n == 0:
            return 0
        ids = np.ascontiguousarray(rows["top5_ids"], dtype=np.int32)
        probs = np.ascontiguousarray(rows["top5_probs"], dtype=np.float32)
        k = ids.shape[1]
        offsets = pa.array(np.arange(0, (n + 1) * k, k, dtype=np.int32))
        label = [
            None if v is None or (isinstance(v, float) and np.isnan(v)) else int(v)
            for v in rows["label"]
        ]
        table = pa.table(
            {
                "run_id": pa.array([run_id] * n, pa.string()),
                "sample_id": pa.array(list(rows["sample_id"]), pa.string()),
                "shift": pa.array(list(rows["shift"]), pa.string()),
                "level": pa.array([str(v) for v in rows["level"]], pa.string()),
                "label": pa.array(label, pa.int32()),
                "class_name": pa.array(list(rows["class_name"]), pa.string()),
                "top5_ids": pa.ListArray.from_arrays(offsets, pa.array(ids.ravel())),
                "top5_probs": pa.ListArray.from_arrays(offsets, pa.array(probs.ravel())),
                "correct": pa.array(np.asarray(rows["correct"], bool)),
                "correct5": pa.array(np.asarray(rows["correct5"], bool)),
            }
        )
        self._insert_batch("predictions", PREDICTION_COLUMNS, table)
        return n

    def done_counts(
        self, run_id: str, cells: Iterable[tuple[str, str]] | None = None
    ) -> dict[str, int]:
        """Sample id -> number of cells already stored for ``run_id`` (resume).

        Args:
            cells: Only count these (shift, level) keys, so that a sample's count equals
                the number of requested cells exactly when all of them are stored.
        """
        if not self.exists():
            return {}
        with self.connect(read_only=True) as con:
            join = self._register_cells(con, cells)
            rows = con.execute(
                f"SELECT p.sample_id, count(*) FROM predictions p {join} WHERE p.run_id = ? "
                "GROUP BY p.sample_id",
                [run_id],
            ).fetchall()
        return dict(rows)

    def done_keys(
        self, run_id: str, sample_ids: Iterable[str], cells: Iterable[tuple[str, str]] | None = None
    ) -> set[tuple[str, str, str]]:
        """The (sample_id, shift, level) keys stored for some samples of ``run_id``."""
        ids = list(sample_ids)
        if not ids or not self.exists():
            return set()
        import pyarrow as pa

        with self.connect(read_only=True) as con:
            con.register("wanted", pa.table({"sample_id": pa.array(ids, pa.string())}))
            join = self._register_cells(con, cells)
            rows = con.execute(
                "SELECT p.sample_id, p.shift, p.level FROM predictions p "
                f"JOIN wanted w USING (sample_id) {join} WHERE p.run_id = ?",
                [run_id],
            ).fetchall()
        return {tuple(r) for r in rows}

    @staticmethod
    def _register_cells(con, cells) -> str:
        if cells is None:
            return ""
        import pyarrow as pa

        cells = list(cells)
        con.register(
            "wanted_cells",
            pa.table(
                {
                    "shift": pa.array([c[0] for c in cells], pa.string()),
                    "level": pa.array([str(c[1]) for c in cells], pa.string()),
                }
            ),
        )
        return "JOIN wanted_cells c ON p.shift = c.shift AND p.level = c.level"

    def count(self, run_id: str | None = None) -> int:
        """Number of prediction rows (for one run, or all)."""
        if not self.exists():
            return 0
        with self.connect(read_only=True) as con:
            if run_id is None:
                return con.execute("SELECT count(*) FROM predictions").fetchone()[0]
            return con.execute(
                "SELECT count(*) FROM predictions WHERE run_id = ?", [run_id]
            ).fetchone()[0]

    def predictions(
        self,
        run_ids: Iterable[str] | None = None,
        *,
        columns: Sequence[str] | None = None,
        shifts: Iterable[str] | None = None,
    ):
        """Prediction rows as a DataFrame (optionally only some runs / columns / shifts).

        A whole run is 3.8 M rows on full ImageNet-C: the commands read aggregates
        (:mod:`robustlab.store.aggregates`), or the rows of a few cells (``shifts``).
        """
        cols = list(columns or PREDICTION_COLUMNS)
        bad = [c for c in cols if c not in PREDICTION_COLUMNS]
        if bad:
            raise InputError(
                f"unknown prediction column {bad[0]!r}; columns are {', '.join(PREDICTION_COLUMNS)}"
            )
        where, params = in_clause("run_id", run_ids)
        if shifts is not None:
            names = list(shifts)
            marks = ", ".join("?" for _ in names) or "NULL"
            where = f"{where} AND" if where else "WHERE"
            where, params = f"{where} shift IN ({marks})", [*params, *names]
        with self.connect(read_only=True) as con:
            return con.execute(
                f"SELECT {', '.join(cols)} FROM predictions {where} "
                "ORDER BY run_id, shift, level, sample_id",
                params,
            ).df()

    def shift_outcomes(self, run_id: str, shift: str):
        """One run's ``sample_id``, ``shift``, ``level`` and ``correct`` in the cells of
        ``shift``: the rows and order of :meth:`predictions` (level, then sample id), with
        the three text columns as pandas categoricals.

        For per-image outcomes of whole runs (the card): the rows come unsorted through
        Arrow, the ids dictionary-encoded in C++, and are put in order on integer codes
        (the distinct ids and levels sorted once; numpy's code-point order of str is
        DuckDB's byte order of UTF-8). On a full ImageNet-C run's 250,000-row shift,
        sorting the strings in SQL and a Python string per row in ``.df()`` took 0.6 s.
        """
        import pandas as pd

        sql = "SELECT sample_id, level, correct FROM predictions WHERE run_id = ? AND shift = ?"
        with self.connect(read_only=True) as con:
            table = con.sql(sql, params=[run_id, shift]).to_arrow_table()
        ids = _categorical(table.column("sample_id"))
        levels = _categorical(table.column("level"))
        correct = table.column("correct").to_numpy()
        order = np.lexsort((ids.codes, levels.codes))
        return pd.DataFrame(
            {
                "sample_id": ids.take(order),
                "shift": pd.Categorical.from_codes(np.zeros(len(order), np.int8), [shift]),
                "level": levels.take(order),
                "correct": correct[order],
            }
        )

    def cell_table(self, run_ids: Iterable[str] | None = None):
        """Per-cell counts and accuracies computed in SQL (same columns as
        :func:`robustlab.metrics.accuracy.cell_table`): run_id, shift, level, n,
        n_correct, n_correct5, top1, top5, error, top5_error.
        """
        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            df = con.execute(
                f"""
                SELECT run_id, shift, level, count(*) AS n,
                       sum(correct::INTEGER) AS n_correct, sum(correct5::INTEGER) AS n_correct5
                FROM predictions {where}
                GROUP BY run_id, shift, level
                """,
                params,
            ).df()
        from robustlab.metrics.accuracy import add_rates, sort_cells

        return sort_cells(add_rates(df))

    def write_attributes(self, run_id: str, rows: Sequence[dict[str, Any]]) -> int:
        """Store what attribute edits achieved, one row per (sample, shift, level).

        Args:
            run_id: The run whose cells these are.
            rows: Dicts with ``sample_id``, ``shift``, ``level`` and any measured values;
                the :data:`~robustlab.store.schema.ATTRIBUTE_VALUE_COLUMNS` go to their
                columns (missing ones are NULL), every other key to ``extra`` (JSON).

        Returns:
            The number of rows in the batch (stored keys are left untouched, so a resumed
            run never duplicates them).
        """
        import pyarrow as pa

        rows = list(rows)
        if not rows:
            return 0
        keys = ("sample_id", "shift", "level")
        if any(k not in r for r in rows for k in keys):
            raise ValueError("attribute rows need sample_id, shift and level")
        known = set(keys) | set(ATTRIBUTE_VALUE_COLUMNS)

        def col(name, typ):
            return pa.array([r.get(name) for r in rows], typ)

        table = pa.table(
            {
                "run_id": pa.array([run_id] * len(rows), pa.string()),
                **{k: pa.array([str(r[k]) for r in rows], pa.string()) for k in keys},
                **{c: col(c, pa.float64()) for c in ("object_rate", "rate_before")},
                **{c: col(c, pa.int32()) for c in ("box_x", "box_y", "box_w", "box_h")},
                **{c: col(c, pa.float64()) for c in ("angle", "hf_before", "hf_after")},
                "fill": pa.array(
                    [None if r.get("fill") is None else str(r["fill"]) for r in rows], pa.string()
                ),
                "extra": pa.array(
                    [
                        json.dumps(
                            {k: v for k, v in r.items() if k not in known},
                            sort_keys=True,
                            default=str,
                        )
                        for r in rows
                    ],
                    pa.string(),
                ),
            }
        )
        self._insert_batch("attributes", ATTRIBUTE_COLUMNS, table)
        return len(rows)

    def attributes(self, run_ids: Iterable[str] | None = None):
        """The ``attributes`` rows as a DataFrame (empty, with its columns, if none)."""
        return self._optional_table("attributes", ATTRIBUTE_COLUMNS, run_ids)

    def predictions_with_attributes(self, run_ids: Iterable[str] | None = None):
        """Predictions of attribute-edit cells joined with what each edit achieved.

        One row per stored prediction that has an ``attributes`` row: ``run_id``,
        ``sample_id``, ``shift``, ``level``, ``correct``, ``correct5`` and the measured
        columns, ready for accuracy-vs-attribute curves and regressions.
        """
        import pandas as pd

        cols = [
            "run_id",
            "sample_id",
            "shift",
            "level",
            "correct",
            "correct5",
            *ATTRIBUTE_VALUE_COLUMNS,
        ]
        if not self.exists():
            return pd.DataFrame(columns=cols)
        where, params = in_clause("p.run_id", run_ids)
        with self.connect(read_only=True) as con:
            if not has_table(con, "attributes"):
                return pd.DataFrame(columns=cols)
            select = ", ".join(
                f"p.{c}"
                if c in ("run_id", "sample_id", "shift", "level", "correct", "correct5")
                else f"a.{c}"
                for c in cols
            )
            return con.execute(
                f"SELECT {select} FROM predictions p JOIN attributes a USING "
                f"(run_id, sample_id, shift, level) {where} "
                "ORDER BY p.run_id, p.shift, p.level, p.sample_id",
                params,
            ).df()

    def export_parquet(
        self, out_dir: str | Path, run_ids: Iterable[str] | None = None, *, force: bool = False
    ) -> list[Path]:
        """Write ``runs.parquet`` and ``predictions.parquet`` into ``out_dir``, plus
        ``segmentation.parquet`` / ``attributes.parquet`` when the selected runs have
        segmentation / attribute-edit rows.

        The copy is done by DuckDB itself (streaming), so exporting a large database does
        not load it into Python memory. Each file is copied to a temp name and renamed into
        place; an existing file of that name that is not Parquet (or is this database) is
        never replaced, unless ``force`` (:mod:`robustlab.files.safety`).
        """
        self.require()
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise InputError(
                f"--export {out} is a file; it takes a folder for the .parquet files",
                hint="pass a folder name (created if missing)",
            )
        with environment_errors(f"cannot create the export folder {out}"):
            out.mkdir(parents=True, exist_ok=True)
        where, params = in_clause("run_id", run_ids)
        paths = []
        with self.connect(read_only=True) as con:
            tables = ["runs", "predictions"]
            for extra in ("segmentation", "attributes", "saliency"):
                if (
                    has_table(con, extra)
                    and con.execute(f"SELECT count(*) FROM {extra} {where}", params).fetchone()[0]
                ):
                    tables.append(extra)
            from robustlab.files.atomic import atomic_path
            from robustlab.files.safety import check_outputs, check_replaceable

            for table in tables:
                dest = out / f"{table}.parquet"
                check_outputs({"--db": self.path}, {"--export": dest})
                check_replaceable(dest, kind="parquet", flag="--export", force=force)
                order = (
                    "started_at, run_id" if table == "runs" else "run_id, shift, level, sample_id"
                )
                sql = f"SELECT * FROM {table} {where} ORDER BY {order}"
                # COPY does not take prepared parameters; inline the (quoted) run ids.
                for p in params:
                    sql = sql.replace("?", quote(p), 1)
                with atomic_path(Path(os.path.realpath(dest))) as tmp:
                    con.execute(f"COPY ({sql}) TO {quote(str(tmp))} (FORMAT PARQUET)")
                paths.append(dest)
        return paths


def _categorical(column):
    """An Arrow string column as a pandas Categorical with sorted categories (so codes
    order like the strings)."""
    import pandas as pd

    encoded = column.combine_chunks().dictionary_encode()
    names = np.asarray(encoded.dictionary.to_pylist(), dtype=object)
    rank = np.argsort(names.astype(str), kind="stable")
    where = np.empty(len(rank), np.int64)
    where[rank] = np.arange(len(rank))
    codes = where[encoded.indices.to_numpy(zero_copy_only=False)]
    return pd.Categorical.from_codes(codes, names[rank])
