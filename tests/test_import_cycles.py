"""No import cycles among robustlab's modules, of any length, and every import points down.

A cycle works in Python only as long as one of its imports stays lazy; it hides a missing
module boundary (run naming used to live in ``defences`` and reach ``train.methods``, which
reached ``evaluation``, which reached ``defences``: 10 modules in one knot that no test of
pairs saw). The layers are written in docs/DEVELOPING.md ("Layers"); :data:`LAYERS` is the
same list as data. The check reads every module's imports with ``ast`` (function-level ones
included), so it needs no import of the package and costs milliseconds.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import robustlab

ROOT = Path(robustlab.__file__).parent

# Module prefix -> layer, from the top (5) down (1); the components (2) in ordered
# sub-layers, 2.1 to 2.7. A module's layer is that of its longest matching prefix; an
# import may stay in its layer or sub-layer or go down, never up.
LAYERS: dict[str, float] = {
    # 5 entry points: the CLI and its commands, the package's face
    "robustlab": 5,
    "robustlab.cli": 5,
    "robustlab.commands": 5,
    # 4 workflows: one user-visible job each, built from the layers below
    "robustlab.workflows": 4,
    # 3 execution: plans become work units on local pools or Ray
    "robustlab.execution": 3,
    # 2.7 store: the database, its predictions, aggregates and reviews; the run records built
    # for it (identity: run ids and make_record, which returns a store.RunRecord; folder_record,
    # which names runs by identity.run_id)
    "robustlab.store": 2.7,
    "robustlab.records.identity": 2.7,
    "robustlab.records.folder_record": 2.7,
    # 2.6 numbers: metrics, and the attribution maps with their foreground-reliance numbers
    "robustlab.metrics": 2.6,
    "robustlab.saliency": 2.6,
    # 2.5 datasets: readers of folders and published layouts (they find mask files and
    # name the registry's shifts)
    "robustlab.data.sources": 2.5,
    "robustlab.data.published": 2.5,
    "robustlab.data.release_npy": 2.5,
    "robustlab.data.imagenet_e": 2.5,
    # 2.4 pixels: masks, shifts and their registry, the pipeline that applies them, suites
    "robustlab.masks": 2.4,
    "robustlab.shifts": 2.4,
    "robustlab.pipeline": 2.4,
    "robustlab.suites": 2.4,
    # 2.3 models: adapters, defences, and run naming (a run's label: model + defence)
    "robustlab.models": 2.3,
    "robustlab.defences": 2.3,
    "robustlab.store.naming": 2.3,
    # 2.2 images: decoding, the JPEG round trip, label spaces, the embedded data
    "robustlab.data": 2.2,
    # 2.1 records and files: the files package (outputs, their safety rules, hashes), manifests, the
    # store's schema (column names every layer above uses)
    "robustlab.files": 2.1,  # outputs and their safety, atomic writes, generate's file hashes
    # records: manifest (a folder's name, writer, readers) and content_hash (hashing of input
    # files, used by shifts and runs); identity and folder_record sit at 2.7, above
    "robustlab.records": 2.1,
    "robustlab.store.schema": 2.1,
    # 1 core: needs nothing of robustlab
    "robustlab.errors": 1,
    "robustlab.seeding": 1,
    "robustlab._seed_words": 1,  # the seed rule's PCG64 state, compiled (seeding asks it)
    "robustlab.envcheck": 1,  # the torch/torchvision pairing check, asked by models and cli
    "robustlab.locks": 1,  # the one inter-process file lock (database, manifests)
    "robustlab.processes": 1,  # whether a recorded pid still runs; usable cores
    "robustlab.version": 1,  # __version__, recorded by every layer
    "robustlab.settings": 1,  # the optional tools' settings, their environment defaults read once
    "robustlab.cells": 1,  # the one (shift, level) cell type and the level's text form
}

# Upward imports that are known and not yet removed, each with why it is there. An entry
# that no longer matches an import fails the test, so the list only shrinks.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}

# Cycles that are known and not yet broken (sorted member tuples). Empty: none is allowed.
KNOWN_CYCLES: set[tuple[str, ...]] = set()


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    path: Path
    line: int

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT.parent)}:{self.line}"


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ("robustlab", *path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every robustlab module ``name`` imports anywhere in its file, with the line
    (relative names resolved; ``pkg.name`` resolved to the deepest module that exists).
    A name taken from a parent package (``from robustlab import __version__``) counts as an
    import of that package; only a plain ``import`` of a parent is left out, since that is
    how Python loads the module anyway."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[tuple[str, int], Import] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            # a submodule named in the import is the target; a name that is not one (a
            # function, ``__version__``) is an import of the package itself, parents included
            subs = [f"{base}.{a.name}" for a in node.names]
            targets = subs + ([base] if any(t not in modules for t in subs) else [])
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            implicit = isinstance(node, ast.Import) and name.startswith(target + ".")
            if target.startswith("robustlab") and target != name and not implicit:
                found[target, node.lineno] = Import(name, target, path, node.lineno)
    return list(found.values())


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    return {i.target for i in _imports_of(name, path, modules)}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(m, p, modules) for m, p in modules.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``: its strongly connected components of two or more nodes
    (Tarjan's algorithm, iterative so that a deep chain cannot hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    out.append(sorted(members))
    return out


def layer(module: str) -> float:
    """The layer of ``module``: that of its longest prefix in :data:`LAYERS`."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise KeyError(module)


def test_no_import_cycles():
    cycles = [c for c in strongly_connected(_graph()) if tuple(c) not in KNOWN_CYCLES]
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_every_module_has_a_layer():
    missing = []
    for name in _modules():
        try:
            layer(name)
        except KeyError:
            missing.append(name)
    assert not missing, f"add to LAYERS (and docs/DEVELOPING.md): {missing}"


def test_imports_point_down():
    modules = _modules()
    upward, used = [], set()
    for name, path in sorted(modules.items()):
        for imp in _imports_of(name, path, modules):
            if layer(imp.target) <= layer(name):
                continue
            if (imp.source, imp.target) in KNOWN_UPWARD:
                used.add((imp.source, imp.target))
                continue
            upward.append(
                f"{imp.where()}: {name} (layer {layer(name)}) imports "
                f"{imp.target} (layer {layer(imp.target)})"
            )
    assert not upward, "imports that point up:\n" + "\n".join(upward)
    assert used == set(KNOWN_UPWARD), f"stale KNOWN_UPWARD: {set(KNOWN_UPWARD) - used}"


def test_the_cycle_finder_finds_long_cycles():
    """The checker itself: a cycle of four through a chain, beside an acyclic branch."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"d", "x"}, "d": {"a"}, "x": {"y"}, "y": set()}
    assert strongly_connected(graph) == [["a", "b", "c", "d"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_the_check_sees_function_level_imports():
    """The checker itself: a lazy import inside a function counts, with its line."""
    modules = _modules()
    name = "robustlab.commands.results"
    found = _imports_of(name, modules[name], modules)
    lazy = [i for i in found if i.target == "robustlab.workflows.results"]
    assert lazy and all(i.line > 1 for i in lazy)
    text = modules[name].read_text(encoding="utf-8").splitlines()
    assert "robustlab.workflows.results" in text[
        lazy[0].line - 1
    ] or "workflows.results" in "".join(text[lazy[0].line - 1 : lazy[0].line + 3])


def test_robustlab_evaluate_is_only_the_function():
    """One name, one thing: the function lives in ``robustlab.workflows.evaluate``, and importing
    that module (as robustlab itself does) never turns ``robustlab.evaluate`` into a module."""
    import importlib.util

    import robustlab
    from robustlab.workflows.evaluate import evaluate, run_table  # noqa: F401 - the import is the point

    assert importlib.util.find_spec("robustlab.evaluate") is None
    assert robustlab.evaluate is evaluate and callable(robustlab.evaluate)
