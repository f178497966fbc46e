"""The results database: :class:`Store`, one DuckDB file with short locked transactions,
resume queries and Parquet export (see :mod:`robustlab.store.connection`)."""

from __future__ import annotations

from robustlab.store.aggregates import AggregateQueries
from robustlab.store.maps import MapTables
from robustlab.store.predictions import PredictionsTable
from robustlab.store.runs import RunsTable


class Store(RunsTable, PredictionsTable, AggregateQueries, MapTables):
    """A robustlab results database file.

    Args:
        path: The DuckDB file (created on the first write).
        timeout: Seconds to wait for other processes' transactions before giving up.
        threads: DuckDB worker threads per connection; 1 keeps the database out of the
            way of the model's forward pass on small machines.
    """
