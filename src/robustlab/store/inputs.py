"""The files and folders the records of a results database say were read.

Why: a stored run's numbers hold only while what it read stays as it was, so every file a
stored run read is an input of any command that writes next to that database (safety rule
1 of docs/DEVELOPING.md): ``results --output labels.csv`` must not replace the labels CSV
a run was scored with, nor ``report --force`` a checkpoint a run loaded. The records name
those files in several places (a run's ``data_root`` and ``config``, a mining's and a
review set's rows); this module is the one reader of all of them, so a command's output
check (``robustlab.commands._outputs``) never has to know the layout of each record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from robustlab.store.connection import table_names

# Keys of a record's ``config`` (at any depth) whose string values, or lists of them, name
# something the run read: its folders (data, generated, masks, a published archive), its
# labels and boxes CSVs, the weights or checkpoint its model loaded, a review's predictions,
# a VLM run's question files. Hashes and names stored under other keys are never paths.
INPUT_KEYS = {
    "archive_root": "archive",
    "bboxes": "boxes CSV",
    "checkpoint": "checkpoint",
    "data": "data folder",
    "data_root": "data folder",
    "generated_root": "generated folder",
    "labels_csv": "labels CSV",
    "masks": "masks folder",
    "predictions": "predictions CSV",
    "questions": "questions",
    "weights": "weights",
}
# Tables with records of what was read, and the columns that hold paths or JSON.
TABLES = {
    "runs": ("run_id", ("data_root",), ("config",)),
    "mining_runs": ("mining_id", ("data_root",), ("config",)),
    "review_sets": ("review_set", ("data_root", "predictions"), ()),
}


def recorded_inputs(store) -> list[tuple[str, str]]:
    """``(what, path)`` of everything the stored records say was read, each path once, in
    table order (runs, minings, review sets). ``what`` names the record and the role, e.g.
    ``run 1a2b3c4d's labels CSV``. A path a record keeps as it was given (``checkpoints/
    x.pth``, a holdout's data folder) is relative to the folder the command ran in: the
    caller compares it from the working directory, where such commands usually run again,
    and at worst refuses an output that merely shares its name."""
    found: dict[str, str] = {}
    if not store.exists():
        return []
    with store.connect(read_only=True) as con:
        present = table_names(con)
        for table, (key, path_columns, json_columns) in TABLES.items():
            if table not in present:
                continue
            columns = ", ".join((key, *path_columns, *json_columns))
            for row in con.execute(f"SELECT {columns} FROM {table}").fetchall():
                name = f"{'run' if table == 'runs' else table.split('_')[0]} {str(row[0])[:8]}"
                values = dict(zip((*path_columns, *json_columns), row[1:]))
                for column in path_columns:
                    _add(found, name, INPUT_KEYS.get(column, column), values[column])
                for column in json_columns:
                    for role, path in _walk(_decoded(values[column])):
                        _add(found, name, role, path)
    return [(what, path) for path, what in found.items()]


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _walk(config: Any) -> Iterator[tuple[str, Any]]:
    """``(role, value)`` for every :data:`INPUT_KEYS` entry of a decoded JSON record."""
    if isinstance(config, dict):
        for k, v in config.items():
            if k in INPUT_KEYS and not isinstance(v, (dict, list)):
                yield INPUT_KEYS[k], v
            elif k in INPUT_KEYS and isinstance(v, list):
                yield from ((INPUT_KEYS[k], x) for x in v if not isinstance(x, (dict, list)))
            else:
                yield from _walk(v)
    elif isinstance(config, list):
        for v in config:
            yield from _walk(v)


def _hash_like(text: str) -> bool:
    """A content hash or fingerprint stored under an input key (``config.inputs.masks``),
    not a path: hex digits only, at least 16 of them."""
    return len(text) >= 16 and all(c in "0123456789abcdef" for c in text)


def _add(found: dict[str, str], name: str, role: str, path: Any) -> None:
    if isinstance(path, str) and path and not _hash_like(path) and path not in found:
        found[path] = f"{name}'s {role}"


__all__ = ["INPUT_KEYS", "recorded_inputs"]
