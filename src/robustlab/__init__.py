"""robustlab: robustness test sets for image classifiers, and the numbers to report."""

from robustlab.shifts.corruptions import corrupt, list_corruptions

__version__ = "0.1.0"

__all__ = ["corrupt", "list_corruptions", "__version__"]
