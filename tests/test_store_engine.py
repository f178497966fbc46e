"""The results database is attached to one DuckDB instance per process for each operation
(robustlab.store.engine): after every operation the file is free for other processes and
fully written, overlapping operations of one process share it, a forked child works, and
each operation sees only its own database."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading

import duckdb
import pytest
from test_store import _run

from robustlab.errors import StoreError
from robustlab.store import Store
from robustlab.store.connection import table_names
from robustlab.store.engine import _attached


def _store_with_a_run(path, run_id="r1") -> Store:
    store = Store(path)
    _run(store, run_id)
    return store


def _other_process(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_after_each_operation_the_file_is_written_whole_and_free_for_another_process(tmp_path):
    db = tmp_path / "r.duckdb"
    store = _store_with_a_run(db)
    store.finish_run("r1", status="finished")
    assert not (tmp_path / "r.duckdb.wal").exists()  # checkpointed, as closing did
    assert not _attached  # nothing stays attached between operations
    # DuckDB lets one process at a time open the file for writing: this one holds nothing
    done = _other_process(f"""
        import duckdb
        con = duckdb.connect({str(db)!r})
        print(con.execute("SELECT status FROM runs").fetchall()[0][0])
        con.execute("UPDATE runs SET status = 'interrupted'")
        con.close()
    """)
    assert done.returncode == 0 and done.stdout.strip() == "finished", done.stderr
    assert store.get_run("r1")["status"] == "interrupted"  # a change by another process is seen


def test_while_an_operation_runs_another_process_cannot_open_the_file(tmp_path):
    db = tmp_path / "r.duckdb"
    store = _store_with_a_run(db)
    with store.connect(read_only=True):
        done = _other_process(f"""
            import duckdb
            duckdb.connect({str(db)!r})
        """)
    assert done.returncode != 0 and "lock" in done.stderr.lower()


def test_each_operation_sees_only_its_own_databases_tables(tmp_path):
    ours = _store_with_a_run(tmp_path / "ours.duckdb")
    with duckdb.connect(str(tmp_path / "other.duckdb")) as con:
        con.execute("CREATE TABLE predictions_elsewhere (x INT)")
    other = Store(tmp_path / "other.duckdb")
    with ours.connect(read_only=True) as con:
        assert "runs" in table_names(con)
        # another database open in this process at the same moment: its error, not our tables
        with pytest.raises(StoreError, match="not a robustlab results database"):
            with other.connect(read_only=True):
                pass
        assert "predictions_elsewhere" not in table_names(con)
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
    assert not _attached


def test_reader_threads_of_a_folder_without_a_lock_file_share_the_file(tmp_path):
    """In a read-only folder no lock file can be made, so readers run at the same time (and
    an operation never nests in another of the same file: the lock file is not reentrant)."""
    store = _store_with_a_run(tmp_path / "r.duckdb")
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def read() -> None:
        try:
            start.wait()
            for _ in range(20):
                con, release = store._open(duckdb, read_only=True)  # what connect does unlocked
                try:
                    assert con.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
                finally:
                    release()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _child_writes(path: str, queue) -> None:
    try:
        store = Store(path)
        store.finish_run("r1", status="interrupted")
        queue.put(store.get_run("r1")["status"])
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(repr(exc))


@pytest.mark.skipif(os.name == "nt", reason="fork")
def test_a_forked_child_opens_the_file_with_an_instance_of_its_own(tmp_path):
    store = _store_with_a_run(tmp_path / "r.duckdb")
    assert store.get_run("r1")["status"] == "running"  # the parent's instance exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_writes, args=(str(store.path), queue))
    child.start()
    got = queue.get(timeout=60)
    child.join(60)
    assert got == "interrupted" and child.exitcode == 0
    assert store.get_run("r1")["status"] == "interrupted"


def test_a_file_replaced_between_reads_is_checked_again(tmp_path):
    db = tmp_path / "r.duckdb"
    store = _store_with_a_run(db)
    assert list(store.runs()["run_id"]) == ["r1"]  # passed the check: remembered
    db.unlink()
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE runs (a INT)")
    with pytest.raises(StoreError, match="not a robustlab results database"):
        store.runs()
