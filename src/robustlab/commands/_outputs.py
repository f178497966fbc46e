"""The CLI's output check: what each command writes and reads, checked before it works.

The table names CLI flags, so it lives with the commands; the rule it applies (an output
never clobbers or mixes with an input, by real path) is :func:`robustlab.files.safety.check_outputs`.
``stored_inputs`` reads a database, which the path rules below the store must not do.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from robustlab.records.manifest import MANIFEST, SYNTH_PREFIX, is_generated_folder, record_format
from robustlab.files.safety import (
    Database,
    Folder,
    check_out_folder,
    check_outputs,
    check_replaceable,
)

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
    "export": {"out": ("--out", "owned")},
    "review": {"export": ("--export", "csv"), "db": ("--db", "db")},
    "vlm": {"db": ("--db", "db")},
    "card": {"out": ("--out", "owned"), "db": ("--db", "db")},
}
# Attributes that name something a command reads, in any command that has them.
INPUT_ARGS = {
    "data": "--data",
    "labels": "--labels",
    "labels_csv": "--labels",
    "masks": "--masks",
    "imagenet_d": "--imagenet-d",
    "bboxes": "--bboxes",
    "weights": "--weights",
    "seg_weights": "--seg-weights",
    "checkpoint": "--checkpoint",
    "inpainter": "--inpainter",  # the optional tools' checkpoints (commands/_args.add_tools)
    "bg_diffusion": "--bg-diffusion",
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


def _record_format(name: str, prefix: str):
    """A test that a folder holds the JSON record ``name`` whose ``format`` starts with
    ``prefix`` (generate's and synth's manifest, written before their first file)."""

    def made(folder: Path) -> bool:
        return record_format(folder / name).startswith(prefix)

    return made


def _has_files(*names: str):
    """A test that a folder holds every one of ``names`` (a record written by a version
    of the command from before the owner mark)."""
    return lambda folder: all((folder / n).is_file() for n in names)


# How each command that fills a folder ("owned") recognises one it made: its owner mark
# (robustlab.files.safety.OWNER_MARK) or these records. Any other non-empty folder is refused
# (robustlab.files.safety.check_out_folder) unless the command takes --into-existing and it was
# given; the demo takes no such flag (it writes only into a folder it created).
OWNED_RECORDS: dict[str, Any] = {
    "generate": is_generated_folder,
    "synth": _record_format(MANIFEST, SYNTH_PREFIX),
    "mine": _has_files("mining.json"),
    "export": _record_format("robustlab-export.json", "robustlab-export/"),
    "masks": _has_files("masks_quality.json"),
    "demo": _has_files(".demo-state.json"),
    "data icons": _has_files("metadata.csv", "ATTRIBUTION.md"),
    "data tiny-checkpoints": _has_files("README.md", "text2image/ROBUSTLAB_RANDOM_WEIGHTS.json"),
}
NO_INTO_EXISTING = {"demo", "mine", "card"}  # never into another folder (mine checks its record)

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
    if outputs and isinstance(getattr(args, "db", None), (str, os.PathLike)):
        # Whether the command reads the database or adds to it: what its runs read stays.
        # As long as the command itself would wait for a locked database (review --wait).
        wait = getattr(args, "wait", None)
        inputs.update(stored_inputs(args.db, timeout=wait if isinstance(wait, float) else None))
    check_outputs(inputs, outputs)
    for flag, value, kind in files:
        check_replaceable(value, kind=kind, flag=flag, force=bool(getattr(args, "force", False)))
    for attr, (flag, role) in roles.items():
        value = getattr(args, attr, None)
        if role == "owned" and isinstance(value, (str, os.PathLike)):
            check_owned(command, args, flag, value)


def check_owned(command: str, args: Any, flag: str, folder: Any) -> None:
    """:func:`robustlab.files.safety.check_out_folder` for a folder ``command`` fills: refused
    when it holds files the command did not write, unless ``--into-existing``."""
    name = f"{command} {args.kind}" if command == "data" else command
    check_out_folder(
        folder,
        command=name,
        flag=flag,
        made=OWNED_RECORDS.get(name),
        allow_other=bool(getattr(args, "into_existing", False)),
        allow_flag=None if command in NO_INTO_EXISTING else "--into-existing",
    )


def stored_inputs(db: Any, timeout: float | None = None) -> dict[str, str]:
    """Every file and folder the records in a database say was read (the data, generated
    and masks folders of its runs, their labels CSVs, the weights and checkpoints their
    models loaded, a review's predictions, a VLM run's questions; the labels and masks a
    generated folder was made from), as inputs of any command that reads or adds to the
    database: its outputs must replace none of them, ``--force`` included (safety rule 1).
    Empty when the database cannot be read (the command itself then says why, in one
    line). ``timeout``: how long to wait for a database another process holds (the
    store's default when None)."""
    from robustlab.errors import RobustlabError

    if not os.path.isfile(os.path.expanduser(os.fspath(db))):
        return {}
    try:
        from robustlab.store import Store
        from robustlab.store.inputs import recorded_inputs

        store = Store(db) if timeout is None else Store(db, timeout=timeout)
        recorded = recorded_inputs(store)
    except (RobustlabError, OSError, ImportError):
        return {}
    except Exception as exc:  # noqa: BLE001 - duckdb's own errors: not a database
        log.debug("cannot list the inputs of the runs in %s: %s", db, exc)
        return {}
    found = {f"({what})": path for what, path in recorded}
    for what, path in recorded:
        if what.endswith("'s generated folder"):
            found.update(_generated_inputs(what, path))
    return found


def _generated_inputs(what: str, folder: str) -> dict[str, str]:
    """The labels CSV and masks folder a generated folder's manifest says it was made
    from: a run on that folder read them too (through its cells)."""
    from robustlab.errors import RobustlabError

    try:
        from robustlab.records.manifest import read_generated

        manifest = read_generated(Path(folder)) or {}
    except (RobustlabError, OSError):
        return {}
    data = manifest.get("data") if isinstance(manifest.get("data"), dict) else {}
    return {
        f"({what.removesuffix('folder')}{role})": data[key]
        for key, role in (("labels_csv", "labels CSV"), ("masks", "masks folder"))
        if isinstance(data.get(key), str) and data[key]
    }


__all__ = ["COMMAND_OUTPUTS", "OWNED_RECORDS", "TABLE_KINDS", "check_args", "stored_inputs"]
