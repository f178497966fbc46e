"""Metrics: pure functions over the predictions table (accuracy, CE/mCE, bootstrap CIs)."""

from robustlab.metrics.accuracy import accuracy_drop, cell_table, per_class, per_family
from robustlab.metrics.bootstrap import accuracy_ci, bootstrap_ci, cell_intervals, drop_ci
from robustlab.metrics.mce import alexnet_cells, corruption_errors, mce

__all__ = [
    "cell_table",
    "per_class",
    "per_family",
    "accuracy_drop",
    "bootstrap_ci",
    "accuracy_ci",
    "cell_intervals",
    "drop_ci",
    "alexnet_cells",
    "corruption_errors",
    "mce",
]
