"""The CLI's output check: what each command writes and reads, checked before it works.

The table names CLI flags, so it lives with the commands; the rule it applies (an output
never clobbers or mixes with an input, by real path) is :func:`robustlab.paths.check_outputs`.
``stored_inputs`` reads a database, which the path rules below the store must not do.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from robustlab.paths import Database, Folder, check_outputs, check_replaceable

log = logging.getLogger(__name__)


# What each command writes: attribute of its parsed arguments -> (flag, role). Roles:
# "owned" (a folder the command fills), "shared" (a folder it adds named files to),
# "db" (the results database it writes), or a file kind for write_output ("html", "csv",
# "table" for results --output, whose kind follows --format).
COMMAND_OUTPUTS: dict[str, dict[str, tuple[str, str]]] = {
    "data": {"out": ("--out", "owned")},
    "demo": {"out": ("--out", "owned")},
    "generate": {"out": ("--out", "owned")},
    "masks": {"out": ("--out", "owned")},
    "evaluate": {"db": ("--db", "db")},
    "results": {"output": ("--output", "table"), "export": ("--export", "shared")},
    "report": {"out": ("--out", "html")},
    "train": {"out": ("--out", "shared"), "db": ("--db", "db")},
    "holdout": {"out": ("--out", "shared"), "db": ("--db", "db")},
    "segment": {"db": ("--db", "db")},
    "saliency": {"db": ("--db", "db")},
    "synth": {"out": ("--out", "owned")},
    "mine": {"out": ("--out", "owned"), "db": ("--db", "db")},
    "review": {"export": ("--export", "csv"), "db": ("--db", "db")},
    "vlm": {"db": ("--db", "db")},
}
# Attributes that name something a command reads, in any command that has them.
INPUT_ARGS = {
    "data": "--data",
    "labels": "--labels",
    "labels_csv": "--labels",
    "masks": "--masks",
    "bboxes": "--bboxes",
    "weights": "--weights",
    "seg_weights": "--seg-weights",
    "checkpoint": "--checkpoint",
    "predictions": "--predictions",
    "metadata": "--metadata",
    "questions": "--questions",
    "suite": "--suite",
    "label_space": "--label-space",
    "emoji_test": "--emoji-test",
    "templates": "--templates",
    "model": "--model",
    "db": "--db",
}
# Inputs that are either a built-in name or a file, told apart by the file's suffix.
NAMED = {
    "suite": (".yaml", ".yml"),
    "label_space": (".csv",),
}
# Kind of the file ``results --output`` writes, by --format.
TABLE_KINDS = {"table": "table", "csv": "csv", "json": "json", "markdown": "markdown"}


def check_args(command: str, args: Any) -> None:
    """The output check of :func:`check_outputs` for one parsed CLI command, before it
    does any work: its outputs (:data:`COMMAND_OUTPUTS`) against every input it was given
    (:data:`INPUT_ARGS`) and each other; then each file output must be replaceable
    (:func:`check_replaceable`, ``--force`` where the command has it)."""
    roles = COMMAND_OUTPUTS.get(command, {})
    inputs: dict[str, Any] = {}
    for attr, flag in INPUT_ARGS.items():
        value = getattr(args, attr, None)
        if attr in roles or not isinstance(value, (str, os.PathLike)):
            continue
        text = os.fspath(value)
        if attr == "model":  # a spec; only vlm:PATH names a folder
            if not text.startswith("vlm:"):
                continue
            text = text[4:]
        # Names of built-in suites, label spaces and templates are not paths, even when a
        # folder of that name happens to lie in the working directory.
        if attr in NAMED and Path(text).suffix.lower() not in NAMED[attr]:
            continue
        inputs[flag] = text
    outputs: dict[str, Any] = {}
    files = []
    for attr, (flag, role) in roles.items():
        value = getattr(args, attr, None)
        if not isinstance(value, (str, os.PathLike)):
            continue
        if role in ("owned", "shared"):
            outputs[flag] = Folder(value, owned=role == "owned")
        elif role == "db":
            outputs[flag] = Database(value)
        else:
            kind = (
                TABLE_KINDS.get(getattr(args, "format", ""), "table") if role == "table" else role
            )
            outputs[flag] = value
            files.append((flag, value, kind))
    if "db" not in roles and outputs and isinstance(getattr(args, "db", None), str):
        inputs.update(stored_inputs(args.db))
    check_outputs(inputs, outputs)
    for flag, value, kind in files:
        check_replaceable(value, kind=kind, flag=flag, force=bool(getattr(args, "force", False)))


def stored_inputs(db: Any) -> dict[str, str]:
    """The folders the runs in a database were read from (data, generated, masks), as
    inputs of a command that reads the database (``report``, ``results``): their outputs
    must not land in a run's data either. Empty when the database cannot be read (the
    command itself then says why, in one line)."""
    from robustlab.errors import RobustlabError

    if not os.path.isfile(os.path.expanduser(os.fspath(db))):
        return {}
    try:
        from robustlab.store import Store

        runs = Store(db).runs()
    except (RobustlabError, OSError, ImportError):
        return {}
    except Exception as exc:  # noqa: BLE001 - duckdb's own errors: not a database
        log.debug("cannot list the runs of %s: %s", db, exc)
        return {}
    found: dict[str, str] = {}
    for _, run in runs.iterrows():
        config = run.get("config") if isinstance(run.get("config"), dict) else {}
        for what, path in (
            ("data folder", run.get("data_root")),
            ("generated folder", config.get("generated_root")),
            ("masks folder", config.get("masks")),
        ):
            if isinstance(path, str) and path and path not in found.values():
                found[f"(run {str(run.get('run_id'))[:8]}'s {what})"] = path
    return found


__all__ = ["COMMAND_OUTPUTS", "TABLE_KINDS", "check_args", "stored_inputs"]
