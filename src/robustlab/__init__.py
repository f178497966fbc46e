"""robustlab: robustness test sets for image classifiers, and the numbers to report."""

from robustlab.shifts.corruptions import corrupt, list_corruptions

__version__ = "0.1.0"

__all__ = ["corrupt", "list_corruptions", "evaluate", "__version__"]


def __getattr__(name):
    # Lazy, so that ``import robustlab`` does not import torch or duckdb.
    if name == "evaluate":
        from robustlab.evaluation import evaluate

        globals()["evaluate"] = evaluate
        return evaluate
    raise AttributeError(f"module 'robustlab' has no attribute {name!r}")
