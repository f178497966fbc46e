"""One home per file rule: the manifest's name, its lock and the temp-file suffix are each
spelled in one module, and every other module asks that module.

Why: a second spelling is a second rule that drifts. A temp file named by a writer of its
own (``.x.tmp``) is one no cleaner deletes and no reader skips; a manifest opened by its
own path skips the link rule of ``files.safety.named_file``. The check reads the string
constants of every module with ``ast`` (docstrings left out: prose may name the file), so
it imports nothing and costs about a second.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import robustlab

ROOT = Path(robustlab.__file__).parent

# A spelling -> the module (relative to the package) that owns it.
HOMES = {
    "manifest.json": "records/manifest.py",
    ".manifest.lock": "records/manifest.py",
    ".rltmp": "files/atomic.py",
}


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _spellings(root: Path) -> Iterator[tuple[str, str, int]]:
    """(spelling, module path, line) for each string constant that is a spelling of
    :data:`HOMES` (a whole constant, or for a suffix the end of one: ``f".{n}.rltmp"``)."""
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if id(node) in docs:
                continue
            for word in HOMES:
                if node.value == word or (word == ".rltmp" and node.value.endswith(word)):
                    yield word, path.relative_to(root).as_posix(), node.lineno


def test_each_file_name_is_spelled_only_in_its_home():
    found = list(_spellings(ROOT))
    stray = [
        f"{where}:{line} spells {word!r}" for word, where, line in found if HOMES[word] != where
    ]
    assert not stray, "ask the owning module instead:\n" + "\n".join(stray)
    # the homes themselves still hold the names (the check is not vacuous)
    assert {word for word, where, _ in found if HOMES[word] == where} == set(HOMES)


def test_the_check_sees_a_stray_spelling(tmp_path):
    """The checker itself: a temp name and a manifest path spelled outside their homes are
    found, a docstring naming them is not."""
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "atomic.py").write_text('TEMP_SUFFIX = ".rltmp"\n')
    (tmp_path / "writer.py").write_text(
        '"""Writes manifest.json."""\n'
        "def save(path, name):\n"
        '    """A .rltmp file."""\n'
        '    tmp = path / f".{name}.rltmp"\n'
        '    return path / "manifest.json", tmp\n'
    )
    found = sorted(_spellings(tmp_path))
    assert found == [
        (".rltmp", "files/atomic.py", 1),
        (".rltmp", "writer.py", 4),
        ("manifest.json", "writer.py", 5),
    ]
