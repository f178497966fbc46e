"""The DuckDB results database file: short locked transactions and the checks on open.

DuckDB allows a single read-write process per file. To let several ``robustlab evaluate``
processes (and a ``robustlab results`` reader) share one workspace file, every operation
attaches the file under an exclusive OS lock (:mod:`robustlab.locks`), does its work in one
transaction and detaches it again, typically in a few milliseconds (the attaching is
:mod:`robustlab.store.engine`'s). Nothing is created
on disk until the first write, so a run that fails validation leaves no file. The tables'
operations are in :mod:`robustlab.store.runs`, :mod:`robustlab.store.predictions` and
:mod:`robustlab.store.maps`; :class:`robustlab.store.Store` has them all.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path


from robustlab.errors import (
    EnvironmentProblem,
    InputError,
    MissingResourceError,
    StoreError,
    environment_errors,
    environment_problem,
)
from robustlab.locks import backoff_delays, file_lock
from robustlab.store.engine import attach
from robustlab.store.schema import (
    DDL,
    SCHEMA_VERSION,
)

log = logging.getLogger(__name__)

DEFAULT_DB = "robustlab.duckdb"


def utcnow() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _foreign_tables(columns: dict[str, set[str]], ours: bool) -> str:
    """What a DuckDB file that is not a results database holds, for its error line: the
    reason names what is there (another program's ``runs(a)``), not only what is not."""
    if not columns:
        return "it holds no tables"
    if ours:
        return "no runs table"
    shown = [
        f"{t}({', '.join(sorted(c)[:3])}{', ...' if len(c) > 3 else ''})"
        for t, c in sorted(columns.items())[:3]
    ]
    more = f" and {len(columns) - 3} more" if len(columns) > 3 else ""
    return f"no robustlab meta table; its tables are another program's: {', '.join(shown)}{more}"


class Database:
    """A robustlab results database file: where it is, and how a connection to it is
    opened (see :class:`robustlab.store.Store` for the arguments)."""

    def __init__(self, path: str | Path = DEFAULT_DB, *, timeout: float = 600.0, threads: int = 1):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.timeout = float(timeout)
        self.threads = int(threads)
        self._initialised = False

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

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
            con, release = self._open(duckdb, read_only)
            failed = False
            try:
                if read_only:
                    self._check_unless_unchanged(con)
                elif not self._initialised:
                    self._create_schema(con)
                yield con
            except BaseException as exc:
                failed = True
                if isinstance(exc, duckdb.Error):
                    raise self._translate(exc) from exc
                raise
            finally:
                # Detaching checkpoints the write-ahead log into the file, which can fail
                # too (a full disk): that is the error to report, unless one already is.
                try:
                    release()
                except duckdb.Error as exc:
                    if not failed:
                        raise self._translate(exc) from exc
                    log.debug("detaching %s after an error failed too", self.path, exc_info=True)

    def _open(self, duckdb, read_only: bool):
        """A cursor on the file attached to this process's DuckDB instance, and the function
        that ends it (:func:`robustlab.store.engine.attach`)."""
        self._check_header()
        deadline = time.monotonic() + self.timeout
        for delay in backoff_delays(0.01, 1.0):
            try:
                return attach(duckdb, self.path, read_only=read_only, threads=self.threads)
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

    def _check_header(self) -> None:
        """Refuse an existing file that is not a DuckDB database by its first bytes (the
        magic ``DUCK`` at offset 8), before DuckDB sees it: DuckDB 2 opens a ``.csv``,
        ``.parquet`` or ``.json`` file given as a database as an in-memory database with a
        view over it (read-only, that failed as an internal error: "Cannot launch
        in-memory database in read-only mode"). An empty file is a new database."""
        try:
            with open(self.path, "rb") as fh:
                head = fh.read(12)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise environment_problem(exc, f"cannot read {self.path}") from exc
        if head and head[8:12] != b"DUCK":
            raise StoreError(
                f"{self.path} is not a DuckDB database file, so not a robustlab database "
                "(a robustlab results database starts with DuckDB's header)",
                hint="pass the --db file that robustlab evaluate wrote, or a new file name",
            )

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

    def _check_unless_unchanged(self, con) -> None:
        """:meth:`_check_robustlab_db`, skipped when the file (and its write-ahead log) is
        the one that passed it last in this process: same inode, size and modification
        time. The check's catalogue queries cost about 11 ms, more than the read they
        guard, and a report makes hundreds of reads of an unchanged file."""
        key = str(self.path.resolve())
        seen = _file_identity(self.path)
        if seen is not None and _PASSED.get(key) == seen:
            return
        self._check_robustlab_db(con)
        if seen is not None:
            _PASSED[key] = seen

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
                f"({_foreign_tables(columns, ours)})",
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
        row = con.execute(
            "SELECT block_size, used_blocks FROM pragma_database_size() "
            "WHERE database_name = current_database()"
        ).fetchall()
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

    def _optional_table(self, table: str, columns: Sequence[str], run_ids):
        """Rows of a per-sample table that older databases lack (segmentation, attributes)
        for ``run_ids`` (None: all), in cell order; empty, with its columns, when the
        database or the table does not exist."""
        import pandas as pd

        empty = pd.DataFrame(columns=list(columns))
        if not self.exists():
            return empty
        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            if not has_table(con, table):
                return empty
            return con.execute(
                f"SELECT {', '.join(columns)} FROM {table} {where} "
                "ORDER BY run_id, shift, level, sample_id",
                params,
            ).df()


# Databases that passed the read check in this process: real path -> file identity then.
_PASSED: dict[str, tuple] = {}


def _file_identity(path: Path) -> tuple | None:
    """What changes whenever the file or its write-ahead log does (None: cannot tell)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        wal = os.stat(f"{path}.wal")
        log_part: tuple = (wal.st_ino, wal.st_size, wal.st_mtime_ns)
    except FileNotFoundError:
        log_part = ()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, log_part)


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


def table_names(con) -> set[str]:
    """The tables of the database ``con`` has open (not those of another database this
    process has attached at the same moment)."""
    # fetchall: an unfinished result would block con.register() on this connection.
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall()
    return {r[0] for r in rows}


def has_table(con, name: str) -> bool:
    return name in table_names(con)


def in_clause(column: str, values: Iterable[str] | None) -> tuple[str, list]:
    if values is None:
        return "", []
    values = list(values)
    if not values:
        return "WHERE FALSE", []
    return f"WHERE {column} IN ({', '.join('?' for _ in values)})", values
