"""The DuckDB results database: short locked transactions, resume queries, Parquet export.

DuckDB allows a single read-write process per file. To let several ``robustlab evaluate``
processes (and a ``robustlab results`` reader) share one workspace file, every operation
here opens a connection under an exclusive OS lock (:mod:`robustlab.store.lock`), does
its work in one transaction and closes again, typically in tens of milliseconds. Nothing
is created on disk until the first write, so a run that fails validation leaves no file.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import os
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import (
    EnvironmentProblem,
    InputError,
    MissingResourceError,
    StoreError,
    environment_errors,
)
from robustlab.store.lock import LockTimeout, backoff_delays, file_lock
from robustlab.store.schema import (
    ATTRIBUTE_COLUMNS,
    ATTRIBUTE_VALUE_COLUMNS,
    DDL,
    PREDICTION_COLUMNS,
    RUN_COLUMNS,
    SALIENCY_COLUMNS,
    SCHEMA_VERSION,
    SEGMENTATION_COLUMNS,
    RunRecord,
)

log = logging.getLogger(__name__)

DEFAULT_DB = "robustlab.duckdb"


def utcnow() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Store:
    """A robustlab results database file.

    Args:
        path: The DuckDB file (created on the first write).
        timeout: Seconds to wait for other processes' transactions before giving up.
        threads: DuckDB worker threads per connection; 1 keeps the database out of the
            way of the model's forward pass on small machines.
    """

    def __init__(self, path: str | Path = DEFAULT_DB, *, timeout: float = 600.0, threads: int = 1):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.timeout = float(timeout)
        self.threads = int(threads)
        self._initialised = False

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # ------------------------------------------------------------------ connections
    def exists(self) -> bool:
        return self.path.exists()

    def require(self) -> None:
        """Raise a one-line MissingResourceError when there is no database to read."""
        if not self.path.exists():
            raise MissingResourceError(
                f"no results database at {self.path}",
                hint="run `robustlab evaluate` first, or pass --db FILE",
            )
        if self.path.is_dir():
            raise InputError(
                f"--db {self.path} is a folder, not a results database file",
                hint="pass the .duckdb file itself",
            )

    def check(self) -> None:
        """Fail now, with a one-line error, if an existing file is not a usable database.

        Commands that write results call this before loading a model or training, so a
        damaged ``--db`` is reported in a second, not after the work is done. A file that
        does not exist yet is fine (it is created on the first write).
        """
        if self.path.exists():
            with self.connect(read_only=True):
                pass

    @contextmanager
    def connect(self, *, read_only: bool = False):
        """A DuckDB connection held under the file lock for the ``with`` block.

        Connection errors caused by a process that does not use our lock (say, the duckdb
        CLI holding the file open) are retried with backoff until ``timeout``. A reader
        takes the lock only when it can: a database in a folder it may not write to (a
        shared, read-only results folder) is still readable, with DuckDB's own file lock
        keeping writers out.

        Raises:
            StoreError: the file is not a readable robustlab database (corrupted,
                truncated, another program's file).
            EnvironmentProblem: the disk is full, or the folder is read-only or not ours.
        """
        import duckdb

        if read_only:
            self.require()
        else:
            with environment_errors(f"cannot create the folder of --db {self.path}"):
                self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.is_dir():
                raise InputError(
                    f"--db {self.path} is a folder, not a results database file",
                    hint="pass a file name, e.g. robustlab.duckdb",
                )
        with ExitStack() as stack:
            with environment_errors(
                f"cannot create the lock file {self.lock_path}",
                hint="pass a --db in a folder you can write to",
            ):
                stack.enter_context(file_lock(self.lock_path, self.timeout, required=not read_only))
            con = self._open(duckdb, read_only)
            try:
                if read_only:
                    self._check_robustlab_db(con)
                elif not self._initialised:
                    self._create_schema(con)
                yield con
            except duckdb.Error as exc:
                raise self._translate(exc) from exc
            finally:
                con.close()

    def _open(self, duckdb, read_only: bool):
        deadline = time.monotonic() + self.timeout
        for delay in backoff_delays(0.01, 1.0):
            try:
                return duckdb.connect(
                    str(self.path), read_only=read_only, config={"threads": self.threads}
                )
            except duckdb.Error as exc:
                busy = isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()
                if not busy:
                    raise self._translate(exc) from exc
                if time.monotonic() > deadline:
                    pid = re.search(r"PID (\d+)", str(exc))
                    who = f"process {pid.group(1)}" if pid else "another program"
                    raise StoreError(
                        f"{self.path} is locked by {who} (held open for more "
                        f"than {self.timeout:.0f} s)",
                        hint="close the other program (a duckdb shell?) or pass another --db",
                    ) from exc
                time.sleep(delay)

    def _translate(self, exc: Exception) -> Exception:
        """The user-facing error for a DuckDB failure, or ``exc`` itself when it is a bug
        (a wrong query is robustlab's fault, not the file's)."""
        import duckdb

        text = " ".join(str(exc).split())
        low = text.lower()
        if any(k in low for k in ("no space left", "disk full", "disk quota")):
            return EnvironmentProblem(
                f"no space left on device writing {self.path} ({text})",
                hint="free disk space or pass --db on another disk; "
                "the results stored so far are kept",
            )
        if any(k in low for k in ("read-only file system", "permission denied")):
            return EnvironmentProblem(
                f"cannot write {self.path}: {text}", hint="pass a --db in a folder you can write to"
            )
        damaged = (
            "not a valid duckdb",
            "corrupt",
            "could not read enough bytes",
            "checksum",
            "serialization",
            "unsupported version",
            "version number",
        )
        if type(exc) in (duckdb.IOException, duckdb.SerializationException, duckdb.Error) or any(
            k in low for k in damaged
        ):
            return StoreError(
                f"results database {self.path} cannot be read: {text}",
                hint="the file is damaged, truncated or not a robustlab database; "
                "move it away (or pass another --db) and rerun",
            )
        return exc

    def _check_robustlab_db(self, con, *, empty_ok: bool = False) -> None:
        """Refuse another program's DuckDB file, another schema version's, and a truncated
        one (DuckDB opens a file cut short after its catalogue and fails only on the first
        read of a missing block).

        Checked on every open, read or write, before any query: a file with a ``runs``
        table of other columns, or a ``schema_version`` of another (or no number) failed as
        an internal error on the first SELECT. ``empty_ok`` (the write path, which creates
        the missing tables): a file with no tables at all is a new database, and one with
        only robustlab's ``meta`` is completed.
        """
        columns: dict[str, set[str]] = {}
        for table, column in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main' AND table_catalog = current_database()"
        ).fetchall():
            columns.setdefault(table, set()).add(column)
        if empty_ok and not columns:
            return
        hint = "pass the --db file that robustlab evaluate wrote"
        # A robustlab meta table with no runs yet is a database a write completes (tables
        # are added by CREATE TABLE IF NOT EXISTS); tables without it are another program's.
        ours = {"key", "value"} <= columns.get("meta", set())
        if not ours or ("runs" not in columns and not empty_ok):
            raise StoreError(
                f"{self.path} is a DuckDB file but not a robustlab results database "
                "(no runs table)",
                hint=hint,
            )
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        if rows and str(rows[0][0]).strip() != str(SCHEMA_VERSION):
            raise StoreError(
                f"{self.path} has results schema version {rows[0][0]!s:.40}; this robustlab "
                f"reads and writes version {SCHEMA_VERSION}",
                hint="export it with the robustlab that wrote it, or use a new --db",
            )
        for table, needed in _expected_columns().items():
            missing = sorted(needed - columns.get(table, needed))
            if missing:
                raise StoreError(
                    f"{self.path} is not a robustlab results database: its {table} table "
                    f"lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}",
                    hint=hint,
                )
        if Path(f"{self.path}.wal").exists():
            return  # replaying the write-ahead log adds blocks the file does not hold yet
        # Blocks in use must all be in the file (free ones may lie past its end), so a file
        # shorter than them is certainly cut; a shorter cut fails on its first read instead.
        row = con.execute("SELECT block_size, used_blocks FROM pragma_database_size()").fetchall()
        if row:
            expected = int(row[0][0]) * int(row[0][1])
            size = self.path.stat().st_size
            if size < expected:
                raise StoreError(
                    f"results database {self.path} cannot be read: it is truncated "
                    f"({size} bytes; the blocks in use need {expected})",
                    hint="restore it from a copy, or move it away and rerun",
                )

    def _create_schema(self, con) -> None:
        self._check_robustlab_db(con, empty_ok=True)
        for stmt in DDL:
            con.execute(stmt)
        # fetchall, not fetchone: an unfinished result blocks con.register() on this
        # connection (DuckDB 2), which the batch writers call next.
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        if not rows:  # another version was refused by the check above
            con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        self._initialised = True

    # ------------------------------------------------------------------ runs
    def start_run(self, record: RunRecord) -> bool:
        """Insert the run, or mark an existing run with the same id as running again.

        Returns:
            True when the run id was new, False when this resumes an earlier run (whose
            ``started_at`` is kept).
        """
        from robustlab.manifest import this_process

        record.started_at = record.started_at or utcnow()
        # Who runs it, so that a later run can tell a killed one (kill -9, the OOM killer).
        record.config = {**record.config, "process": this_process()}
        with self.connect() as con:
            _mark_dead_runs(con, record.run_id)
            exists = con.execute(
                "SELECT config FROM runs WHERE run_id = ?", [record.run_id]
            ).fetchone()
            if exists:
                # The notes of earlier sessions stay: their samples are not decoded again.
                old = json.loads(exists[0]) if exists[0] else {}
                config = dict(record.config)
                if old.get("notes"):
                    config["notes"] = old["notes"]
                con.execute(
                    "UPDATE runs SET status = 'running', finished_at = NULL, config = ? WHERE run_id = ?",
                    [json.dumps(config, sort_keys=True, default=str), record.run_id],
                )
                return False
            placeholders = ", ".join("?" for _ in RUN_COLUMNS)
            con.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({placeholders})",
                record.as_row(),
            )
            return True

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        n_samples: int | None = None,
        skipped: Sequence[Any] | None = None,
        notes: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """Record the end state of a run (``finished``, ``interrupted`` or ``failed``).

        ``notes`` (sample id -> why it is degenerate: evaluated, counted, but e.g. a 5x5
        image) join those of the run's earlier sessions in ``config["notes"]``; a resumed
        session does not decode the samples already done, so the record keeps them.

        Returns:
            Every note of the run.
        """
        sets, params = ["status = ?", "finished_at = ?"], [status, utcnow()]
        if n_samples is not None:
            sets.append("n_samples = ?")
            params.append(int(n_samples))
        if skipped is not None:
            # ``skipped`` rows are [sample_id, reason]; a sample can fail in several cells.
            n_skipped = len(
                {str(s[0]) if isinstance(s, (list, tuple)) else str(s) for s in skipped}
            )
            sets += ["n_skipped = ?", "skipped = ?"]
            params += [n_skipped, json.dumps(list(skipped), default=str)]
        with self.connect() as con:
            row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
            config = json.loads(row[0]) if row and row[0] else {}
            merged = {**(config.get("notes") or {}), **(notes or {})}
            if notes:
                config["notes"] = dict(sorted(merged.items()))
                sets.append("config = ?")
                params.append(json.dumps(config, sort_keys=True, default=str))
            con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", [*params, run_id])
        return merged

    def runs(self, run_ids: Iterable[str] | None = None):
        """The ``runs`` table as a DataFrame (JSON columns decoded), oldest first."""
        import pandas as pd

        if not self.exists():
            return pd.DataFrame(columns=list(RUN_COLUMNS))
        where, params = _in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            df = con.execute(f"SELECT * FROM runs {where} ORDER BY started_at, run_id", params).df()
        for c in ("preprocessing", "versions", "config", "skipped"):
            df[c] = [json.loads(v) if isinstance(v, str) else v for v in df[c]]
        return df

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        df = self.runs([run_id])
        return None if df.empty else df.iloc[0].to_dict()

    # ------------------------------------------------------------------ predictions
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
        self, run_ids: Iterable[str] | None = None, *, columns: Sequence[str] | None = None
    ):
        """Prediction rows as a DataFrame (optionally only some runs / columns)."""
        cols = list(columns or PREDICTION_COLUMNS)
        bad = [c for c in cols if c not in PREDICTION_COLUMNS]
        if bad:
            raise InputError(
                f"unknown prediction column {bad[0]!r}; columns are {', '.join(PREDICTION_COLUMNS)}"
            )
        where, params = _in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            return con.execute(
                f"SELECT {', '.join(cols)} FROM predictions {where} "
                "ORDER BY run_id, shift, level, sample_id",
                params,
            ).df()

    def cell_table(self, run_ids: Iterable[str] | None = None):
        """Per-cell counts and accuracies computed in SQL (same columns as
        :func:`robustlab.metrics.accuracy.cell_table`): run_id, shift, level, n,
        n_correct, n_correct5, top1, top5, error, top5_error.
        """
        where, params = _in_clause("run_id", run_ids)
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

    def run_stats(self, run_id: str) -> dict[str, int]:
        """Distinct samples and labels stored for a run's clean cell (baseline checks), or
        over all its cells when it has none (a downloaded ImageNet-C publishes no clean
        images, yet its 50,000 x 1,000 cells are what the AlexNet constants were made on)."""
        with self.connect(read_only=True) as con:
            n, k = con.execute(
                "SELECT count(DISTINCT sample_id), count(DISTINCT label) FROM predictions "
                "WHERE run_id = ? AND (shift = 'clean' OR NOT EXISTS ("
                "SELECT 1 FROM predictions WHERE run_id = ? AND shift = 'clean'))",
                [run_id, run_id],
            ).fetchone()
        return {"n_samples": int(n), "n_classes": int(k)}

    # ------------------------------------------------------------------ segmentation
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

    def _insert_batch(self, target: str, columns, table) -> None:
        """Insert an Arrow batch into ``target`` in one transaction; stored keys are left
        untouched (``INSERT OR IGNORE``), so a replayed batch never duplicates rows."""
        with self.connect() as con:
            con.register("batch_rows", table)
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(
                    f"INSERT OR IGNORE INTO {target} SELECT {', '.join(columns)} FROM batch_rows"
                )
                con.execute("COMMIT")
            except BaseException:
                # A failed COMMIT (disk full) has already ended the transaction: ROLLBACK
                # then fails with "no transaction is active" and would hide the real cause.
                try:
                    con.execute("ROLLBACK")
                except Exception:  # the first error is the one to report
                    log.debug("rollback after a failed insert failed too", exc_info=True)
                raise

    def segmentation_done_keys(self, run_id: str) -> set[tuple[str, str, str]]:
        """The (sample_id, shift, level) keys stored for segmentation run ``run_id`` (resume)."""
        if not self.exists():
            return set()
        with self.connect(read_only=True) as con:
            if not _has_table(con, "segmentation"):
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

    # ------------------------------------------------------------------ saliency
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
            if not _has_table(con, "saliency"):
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

    # ------------------------------------------------------------------ attributes
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

    def _optional_table(self, table: str, columns: Sequence[str], run_ids):
        """Rows of a per-sample table that older databases lack (segmentation, attributes)
        for ``run_ids`` (None: all), in cell order; empty, with its columns, when the
        database or the table does not exist."""
        import pandas as pd

        empty = pd.DataFrame(columns=list(columns))
        if not self.exists():
            return empty
        where, params = _in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            if not _has_table(con, table):
                return empty
            return con.execute(
                f"SELECT {', '.join(columns)} FROM {table} {where} "
                "ORDER BY run_id, shift, level, sample_id",
                params,
            ).df()

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
        where, params = _in_clause("p.run_id", run_ids)
        with self.connect(read_only=True) as con:
            if not _has_table(con, "attributes"):
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

    # ------------------------------------------------------------------ export
    def export_parquet(
        self, out_dir: str | Path, run_ids: Iterable[str] | None = None, *, force: bool = False
    ) -> list[Path]:
        """Write ``runs.parquet`` and ``predictions.parquet`` into ``out_dir``, plus
        ``segmentation.parquet`` / ``attributes.parquet`` when the selected runs have
        segmentation / attribute-edit rows.

        The copy is done by DuckDB itself (streaming), so exporting a large database does
        not load it into Python memory. Each file is copied to a temp name and renamed into
        place; an existing file of that name that is not Parquet (or is this database) is
        never replaced, unless ``force`` (:mod:`robustlab.paths`).
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
        where, params = _in_clause("run_id", run_ids)
        paths = []
        with self.connect(read_only=True) as con:
            tables = ["runs", "predictions"]
            for extra in ("segmentation", "attributes", "saliency"):
                if (
                    _has_table(con, extra)
                    and con.execute(f"SELECT count(*) FROM {extra} {where}", params).fetchone()[0]
                ):
                    tables.append(extra)
            from robustlab.paths import check_outputs, check_replaceable

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
                    sql = sql.replace("?", _quote(p), 1)
                target = Path(os.path.realpath(dest))
                tmp = target.with_name(f".{target.name}.{os.getpid()}.rltmp")
                try:
                    con.execute(f"COPY ({sql}) TO {_quote(str(tmp))} (FORMAT PARQUET)")
                    os.replace(tmp, target)
                finally:
                    tmp.unlink(missing_ok=True)
                paths.append(dest)
        return paths


@functools.cache
def _expected_columns() -> dict[str, frozenset[str]]:
    """Each table of :data:`DDL` and its columns, read from an in-memory database built by
    the same statements (one source of truth for what a robustlab database holds)."""
    import duckdb

    with duckdb.connect(":memory:") as con:
        for stmt in DDL:
            con.execute(stmt)
        rows = con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main'"
        ).fetchall()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return {t: frozenset(c) for t, c in out.items()}


def _has_table(con, name: str) -> bool:
    # fetchall: an unfinished result would block con.register() on this connection.
    return (
        con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
        ).fetchall()[0][0]
        > 0
    )


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _in_clause(column: str, values: Iterable[str] | None) -> tuple[str, list]:
    if values is None:
        return "", []
    values = list(values)
    if not values:
        return "WHERE FALSE", []
    return f"WHERE {column} IN ({', '.join('?' for _ in values)})", values


__all__ = ["Store", "DEFAULT_DB", "LockTimeout", "utcnow"]


def _mark_dead_runs(con, run_id: str) -> None:
    """Runs other than ``run_id`` still ``running`` although the process that started them
    on this host is gone (``kill -9``, power loss, the OOM killer) are marked ``killed``, as
    generate and synth mark theirs: a run never stays ``running`` for ever."""
    from robustlab.manifest import mark_dead_runs

    rows = con.execute(
        "SELECT run_id, config FROM runs WHERE status = 'running' AND run_id <> ?", [run_id]
    ).fetchall()
    for rid, config in rows:
        try:
            process = (json.loads(config) if config else {}).get("process") or {}
        except ValueError:
            continue
        run = {"status": "running", "host": process.get("host"), "pid": process.get("pid")}
        if mark_dead_runs([run])[0]["status"] == "killed":
            con.execute("UPDATE runs SET status = 'killed' WHERE run_id = ?", [rid])
