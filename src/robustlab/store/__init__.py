"""Results database (DuckDB): runs, predictions, resume queries and Parquet export."""

from robustlab.store.connection import DEFAULT_DB
from robustlab.store.db import Store
from robustlab.locks import LockTimeout
from robustlab.store.schema import CLEAN_CELL, CLEAN_LEVEL, CLEAN_SHIFT, RunRecord

__all__ = [
    "Store",
    "RunRecord",
    "DEFAULT_DB",
    "LockTimeout",
    "CLEAN_SHIFT",
    "CLEAN_CELL",
    "CLEAN_LEVEL",
]
