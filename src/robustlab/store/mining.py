"""Hard-image mining records in the results database (additive tables).

``mining_runs`` holds one row per mining: which evaluated runs (one per surrogate) were
combined, under which k-of-n rule, on which data, and how many candidates were kept.
``mined_images`` holds the kept images, each with every surrogate's top-1 guess, so a
review step or a report can show why an image is hard without re-reading predictions.
The tables are created on the first mining (CREATE TABLE IF NOT EXISTS): a database from
before them reads as having no minings.
"""

from __future__ import annotations

import json
from typing import Any

from robustlab.store.connection import has_table

MINING_DDL = [
    """
    CREATE TABLE IF NOT EXISTS mining_runs (
        mining_id VARCHAR PRIMARY KEY,
        created_at TIMESTAMP,
        data_root VARCHAR,
        label_space VARCHAR,
        surrogates JSON,
        run_ids JSON,
        k INTEGER,
        n INTEGER,
        n_candidates INTEGER,
        n_kept INTEGER,
        out VARCHAR,
        config JSON
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS mined_images (
        mining_id VARCHAR NOT NULL,
        sample_id VARCHAR NOT NULL,
        shift VARCHAR NOT NULL,
        level VARCHAR NOT NULL,
        class_name VARCHAR,
        label INTEGER,
        n_wrong INTEGER,
        top1_ids INTEGER[],
        path VARCHAR,
        PRIMARY KEY (mining_id, sample_id, shift, level)
    )
    """,
]
MINING_COLUMNS = (
    "mining_id",
    "created_at",
    "data_root",
    "label_space",
    "surrogates",
    "run_ids",
    "k",
    "n",
    "n_candidates",
    "n_kept",
    "out",
    "config",
)
MINED_COLUMNS = (
    "mining_id",
    "sample_id",
    "shift",
    "level",
    "class_name",
    "label",
    "n_wrong",
    "top1_ids",
    "path",
)


def write_mining(store, record: dict[str, Any], kept) -> None:
    """Store one mining and its kept images in one transaction (a rerun replaces them).

    Args:
        store: A :class:`robustlab.store.Store`.
        record: Values for :data:`MINING_COLUMNS` (JSON columns as Python objects).
        kept: DataFrame with the :data:`MINED_COLUMNS` other than ``mining_id``.
    """
    import pyarrow as pa

    from robustlab.store.connection import utcnow

    mid = record["mining_id"]
    row = dict(record, created_at=record.get("created_at") or utcnow())
    values = [
        json.dumps(row[c], sort_keys=True, default=str)
        if c in ("surrogates", "run_ids", "config")
        else row[c]
        for c in MINING_COLUMNS
    ]
    n = len(kept)
    table = pa.table(
        {
            "mining_id": pa.array([mid] * n, pa.string()),
            "sample_id": pa.array([str(v) for v in kept["sample_id"]], pa.string()),
            "shift": pa.array([str(v) for v in kept["shift"]], pa.string()),
            "level": pa.array([str(v) for v in kept["level"]], pa.string()),
            "class_name": pa.array(
                [None if v is None else str(v) for v in kept["class_name"]], pa.string()
            ),
            "label": pa.array([int(v) for v in kept["label"]], pa.int32()),
            "n_wrong": pa.array([int(v) for v in kept["n_wrong"]], pa.int32()),
            "top1_ids": pa.array(
                [[int(x) for x in v] for v in kept["top1_ids"]], pa.list_(pa.int32())
            ),
            "path": pa.array([None if v is None else str(v) for v in kept["path"]], pa.string()),
        }
    )
    with store.connect() as con:
        for stmt in MINING_DDL:
            con.execute(stmt)
        con.register("kept_rows", table)
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute("DELETE FROM mined_images WHERE mining_id = ?", [mid])
            con.execute("DELETE FROM mining_runs WHERE mining_id = ?", [mid])
            con.execute(
                f"INSERT INTO mining_runs ({', '.join(MINING_COLUMNS)}) VALUES "
                f"({', '.join('?' for _ in MINING_COLUMNS)})",
                values,
            )
            con.execute(
                f"INSERT INTO mined_images SELECT {', '.join(MINED_COLUMNS)} FROM kept_rows"
            )
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise


def _has(con, table: str) -> bool:
    return has_table(con, table)


def mining_runs(store):
    """The ``mining_runs`` table (JSON columns decoded), oldest first; empty if none."""
    import pandas as pd

    if not store.exists():
        return pd.DataFrame(columns=list(MINING_COLUMNS))
    with store.connect(read_only=True) as con:
        if not _has(con, "mining_runs"):
            return pd.DataFrame(columns=list(MINING_COLUMNS))
        df = con.execute("SELECT * FROM mining_runs ORDER BY created_at, mining_id").df()
    for c in ("surrogates", "run_ids", "config"):
        df[c] = [json.loads(v) if isinstance(v, str) else v for v in df[c]]
    return df


def mined_images(store, mining_id: str | None = None):
    """Kept images (of one mining, or all), sorted; empty with its columns if none."""
    import pandas as pd

    if not store.exists():
        return pd.DataFrame(columns=list(MINED_COLUMNS))
    with store.connect(read_only=True) as con:
        if not _has(con, "mined_images"):
            return pd.DataFrame(columns=list(MINED_COLUMNS))
        where, params = ("WHERE mining_id = ?", [mining_id]) if mining_id else ("", [])
        return con.execute(
            f"SELECT * FROM mined_images {where} ORDER BY mining_id, shift, level, sample_id",
            params,
        ).df()


__all__ = [
    "write_mining",
    "mining_runs",
    "mined_images",
    "MINING_DDL",
    "MINING_COLUMNS",
    "MINED_COLUMNS",
]
