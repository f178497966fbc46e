"""Results databases that are DuckDB files but not this robustlab's: another program's
tables under robustlab's names, an older or unreadable schema version. Each is one line
and exit 3 in every command that opens it, read or write, and the file is left as it was.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _runs_helpers as h  # noqa: E402


def _foreign(path: Path) -> None:
    """meta and runs by robustlab's names, but another program's columns."""
    import duckdb

    from robustlab.store.schema import SCHEMA_VERSION

    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
        con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        con.execute("CREATE TABLE runs (x INTEGER)")
        con.execute("CREATE TABLE predictions (a INTEGER)")


def _meta_only_other(path: Path) -> None:
    import duckdb

    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE meta (k INTEGER)")
        con.execute("CREATE TABLE runs (run_id VARCHAR)")


def _version(value: str):
    def make(path: Path) -> None:
        """robustlab's own schema, with another ``schema_version``."""
        from robustlab.store.db import Store

        with Store(path).connect() as con:  # a write connection creates the schema
            con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [value])

    return make


CASES = {
    "foreign-columns": (_foreign, "not a robustlab results database"),
    "foreign-meta": (_meta_only_other, "not a robustlab results database"),
    "old-version": (_version("0"), "schema version 0"),
    "garbled-version": (_version("abc"), "schema version abc"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_database_of_another_schema_is_one_line_in_every_command(tmp_path, capsys, case):
    make, expected = CASES[case]
    db = tmp_path / "r.duckdb"
    make(db)
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    data = h.flat_folder(tmp_path / "d", 1)
    for argv in (
        ["results", "--db", db],
        ["results", "--db", db, "--summary"],
        ["report", "--db", db, "--out", tmp_path / "r.html"],
        ["review", "--data", data, "--db", db, "--export", tmp_path / "f.csv"],
        ["evaluate", "lite0", "--data", data, "--labels", data / "labels.csv", "--db", db],
    ):
        code, _, err = h.cli(capsys, *argv)
        assert code == 3, (argv[0], err)
        assert "Traceback" not in err and "internal error" not in err
        lines = [line for line in err.splitlines() if ": error:" in line]
        assert len(lines) == 1 and expected in lines[0], (argv[0], err)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
