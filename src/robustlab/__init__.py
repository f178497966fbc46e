"""robustlab: robustness test sets for image classifiers, and the numbers to report.

The command line's verbs, as Python functions (each the function the command itself calls;
imported on first use)::

    import robustlab
    robustlab.corrupt(image, "fog", 3, seed=0)                     # one image, one corruption
    robustlab.generate("imagenet-c", "val/", "imagenet-c/")         # robustlab generate
    run = robustlab.evaluate("lite0", "val/", suite="imagenet-c")   # robustlab evaluate
    robustlab.results("robustlab.duckdb").table                     # robustlab results
    robustlab.report("robustlab.duckdb", "report.html")             # robustlab report
    robustlab.holdout("icons/", holdout="style=openmoji")           # robustlab holdout
    robustlab.vlm("vlm:llava/", data="ImageNet-D/")                  # robustlab vlm
    robustlab.card("lite0", "val/", "card/", masks="masks/")        # robustlab card
    robustlab.list_shifts(), robustlab.list_suites(), robustlab.list_models()
    model = robustlab.load_model("lite0")
"""

from robustlab.version import __version__

__all__ = [
    "__version__",
    "card",
    "corrupt",
    "evaluate",
    "generate",
    "holdout",
    "list_corruptions",
    "list_models",
    "list_shifts",
    "list_suites",
    "load_model",
    "report",
    "results",
    "vlm",
]

# Imported on first use, so that ``import robustlab`` (and ``robustlab --help``) imports no
# numba, cv2, torch, pandas or duckdb: name -> (module that defines it, its name there).
_LAZY = {
    "corrupt": ("robustlab.shifts.corruptions", "corrupt"),
    "list_corruptions": ("robustlab.shifts.corruptions", "list_corruptions"),
    "list_shifts": ("robustlab.shifts.registry", "list_shifts"),
    "list_suites": ("robustlab.suites", "list_suites"),
    "list_models": ("robustlab.models", "list_models"),
    "load_model": ("robustlab.models", "load_model"),
    "evaluate": ("robustlab.workflows.evaluate", "evaluate"),
    "generate": ("robustlab.workflows.generate", "generate"),
    "report": ("robustlab.workflows.report", "build_report"),
    "results": ("robustlab.workflows.results", "results"),
    "holdout": ("robustlab.workflows.train.holdout.workflow", "holdout"),
    "vlm": ("robustlab.workflows.imagenet_d.vlm.workflow", "vlm"),
    "card": ("robustlab.workflows.card", "card"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'robustlab' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
