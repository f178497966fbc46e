"""robustlab: robustness test sets for image classifiers, and the numbers to report."""

__version__ = "0.1.0"

__all__ = ["corrupt", "list_corruptions", "evaluate", "__version__"]

# Imported on first use, so that ``import robustlab`` (and ``robustlab --help``) imports no
# numba, cv2, torch, pandas or duckdb: name -> module that defines it.
_LAZY = {
    "corrupt": "robustlab.shifts.corruptions",
    "list_corruptions": "robustlab.shifts.corruptions",
    "evaluate": "robustlab.workflows.evaluate",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'robustlab' has no attribute {name!r}")
