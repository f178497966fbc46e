"""No two robustlab modules import each other, not even inside a function.

Mutual imports work in Python only as long as one side stays lazy; they hide a missing
module boundary (the table formatter used to live in the ``results`` command that the
``segment`` command imported, and vice versa). The check reads every module's imports with
``ast`` so it needs no import of the package and costs milliseconds.
"""

from __future__ import annotations

import ast
from pathlib import Path

import robustlab

ROOT = Path(robustlab.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("robustlab", *path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The robustlab modules ``name`` imports anywhere in its file (packages resolved to
    the deepest module that exists)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if (
                target.startswith("robustlab")
                and target != name
                and not name.startswith(target + ".")
            ):
                found.add(target)
    return found


def test_no_two_modules_import_each_other():
    modules = _modules()
    plain = {m for m, p in modules.items() if p.name != "__init__.py"}
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    pairs = sorted(
        f"{a} <-> {b}" for a in plain for b in graph[a] & plain if a < b and a in graph[b]
    )
    assert not pairs, "mutual imports: " + "; ".join(pairs)


def test_the_check_sees_function_level_imports():
    """The checker itself: a lazy import inside a function counts."""
    modules = _modules()
    name = "robustlab.commands.results"
    assert "robustlab.store.queries" in _imports(name, modules[name], modules)


def test_robustlab_evaluate_is_only_the_function():
    """One name, one thing: the function lives in ``robustlab.evaluation``, and importing
    that module (as robustlab itself does) never turns ``robustlab.evaluate`` into a module."""
    import importlib.util

    import robustlab
    from robustlab.evaluation import evaluate, run_table  # noqa: F401 - the import is the point

    assert importlib.util.find_spec("robustlab.evaluate") is None
    assert robustlab.evaluate is evaluate and callable(robustlab.evaluate)
