"""``robustlab mine``: keep the images that several surrogate classifiers all get wrong.

ImageNet-D's hard-image mining (REFERENCE.md section 5): synthesise many candidates, then
keep only the "shared failures" of a set of surrogate models, which the paper found to
transfer to models it never used. Here:

1. every surrogate is evaluated on the folder with :func:`robustlab.evaluate`, so its
   predictions are stored (and resumed) in the results database like any run;
2. a candidate is kept when at least ``k`` of the ``n`` surrogates are wrong under the
   label space's correctness rule (the stored ``correct``: for ImageNet-D, top-1 outside
   the class's ImageNet id set); ``k = n`` (the default) is the paper's "all wrong";
3. the kept images are hard-linked (or copied) into ``out`` under their relative paths, with
   ``labels.csv`` (so the set is itself an input) and ``hard.csv`` (each surrogate's
   top-1 guess), and the mining is recorded in the database (``mining_runs`` and
   ``mined_images``, :mod:`robustlab.store.mining`).

Candidates: the images of a plain folder (its clean cell), or every shifted cell of a
folder written by ``robustlab generate`` (its clean cell is the untouched source).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import logging
import os
import posixpath
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from robustlab.cells import Cell
from robustlab.errors import InputError
from robustlab.files.atomic import atomic_write
from robustlab.files.safety import refuse_write_through
from robustlab.records.manifest import json_bytes, read_record
from robustlab.records.folder_record import identity_hash, refuse_changes
from robustlab.store import CLEAN_SHIFT, Store
from robustlab.workflows.keywords import build_specs
from robustlab.workflows.imagenet_d.mine.request import (
    DEFAULT_SURROGATES,
    MineExecution,
    MineInputs,
    MineRule,
)

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

RECORD = "mining.json"


@dataclass
class MiningResult:
    """What a mining kept.

    Attributes:
        mining_id: Key of the record in the database.
        run_ids: One evaluation run per surrogate, in surrogate order.
        table: One row per candidate: sample_id, shift, level, class_name, label, one
            ``<spec>`` column (top-1 id) and ``<spec>_correct`` per surrogate, n_wrong, kept.
        k, n: The rule (keep when at least k of n surrogates are wrong).
        out: Folder of the hard subset (None when not asked for).
        dropped: Candidates left out because a surrogate has no prediction for them.
    """

    mining_id: str
    run_ids: list[str]
    surrogates: list[str]
    table: pd.DataFrame
    k: int
    n: int
    out: Path | None = None
    dropped: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def kept(self):
        return self.table[self.table["kept"]]


def candidate_table(
    store: Store, run_ids: Sequence[str], names: Sequence[str], *, include_clean: bool
):
    """Per candidate (sample, shift, level): each run's top-1 id and correctness.

    Returns:
        (DataFrame, number of candidates dropped because some run lacks them).
    """

    frames = []
    for rid, name in zip(run_ids, names):
        p = store.predictions(
            [rid],
            columns=["sample_id", "shift", "level", "label", "class_name", "top5_ids", "correct"],
        )
        if not include_clean:
            p = p[p["shift"] != CLEAN_SHIFT]
        p = p.assign(
            **{
                name: [int(t[0]) for t in p["top5_ids"]],
                f"{name}_correct": p["correct"].astype(bool),
            }
        )
        frames.append(
            p.drop(columns=["top5_ids", "correct"]).set_index(["sample_id", "shift", "level"])
        )
    union = set().union(*(set(f.index) for f in frames)) if frames else set()
    table = frames[0]
    for f in frames[1:]:
        table = table.join(f.drop(columns=["label", "class_name"]), how="inner")
    table = table.reset_index()
    dropped = len(union) - len(table)
    table["n_wrong"] = sum((~table[f"{n}_correct"]).astype(int) for n in names) if names else 0
    return table.sort_values(["shift", "level", "sample_id"]).reset_index(drop=True), dropped


def mine(
    data,
    *,
    rule: MineRule | None = None,
    inputs: MineInputs | None = None,
    execution: MineExecution | None = None,
    **options: Any,
) -> MiningResult:
    """Evaluate the surrogates on ``data`` and keep the images at least ``k`` get wrong.

    Args:
        data: A folder ``robustlab evaluate`` reads (plain, labelled, or generated).
        rule: The voters (:class:`MineRule`: ``surrogates``, ``weights``, ``k``,
            ``precision``, ``compile``).
        inputs: The candidates (:class:`MineInputs`: ``label_space``, ``labels_csv``,
            ``include_clean``, ``shifts``, ``levels``).
        execution: Where it runs and writes (:class:`MineExecution`: ``db``, ``out``,
            ``copy``, ``device``, ``batch_size``, ``workers``, ``progress``, ``backend``,
            ``address``).
        options: Any field of the three specs by name (``surrogates=[...], k=2``), for
            the spec not passed.

    Raises:
        TypeError: a keyword no spec has (with the closest names).
        InputError: no surrogate, a bad k, a folder evaluate cannot read.
        InputChangedError: ``out`` holds the hard subset of another mining.
    """
    specs = build_specs(
        "mine",
        options,
        {"rule": MineRule, "inputs": MineInputs, "execution": MineExecution},
        {"rule": rule, "inputs": inputs, "execution": execution},
    )
    rule, inputs, execution = specs["rule"], specs["inputs"], specs["execution"]
    from robustlab.records.manifest import read_generated

    root = Path(data).expanduser()
    generated = root.is_dir() and read_generated(root) is not None
    include_clean = (not generated) if inputs.include_clean is None else bool(inputs.include_clean)
    store = Store(execution.db)
    # A generated folder without --shift/--level: evaluate reads the cells it holds, each
    # shift at its own levels.
    run_ids = _evaluate_surrogates(root, rule, inputs, execution)
    result, runs = _decide(store, root, rule, run_ids, include_clean)
    names = [_column(s) for s in result.surrogates]
    if execution.out is not None:
        result.out = _write_subset(
            Path(execution.out).expanduser(), result, names, runs, execution.copy
        )
    _record(store, root, result, names, runs, include_clean, rule, execution)
    return result


def _evaluate_surrogates(
    root: Path, rule: MineRule, inputs: MineInputs, execution: MineExecution
) -> list[str]:
    """One stored evaluation run per surrogate (resumed when stored), in surrogate order."""
    from robustlab.workflows.evaluate import evaluate

    specs, models, weight_list = rule.specs, rule.models, rule.weight_list
    label_space, labels_csv = inputs.label_space, inputs.labels_csv
    db, device, batch_size = execution.db, execution.device, execution.batch_size
    workers, progress = execution.workers, execution.progress
    backend, address = execution.backend, execution.address
    precision, compile = rule.precision, rule.compile
    run_ids = []
    # On Ray the surrogates' evaluations share one session and its model actors: each
    # would otherwise start a Ray instance (without --address) and a model actor of its own.
    kept: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if backend == "ray":
        from robustlab.execution.ray.actors import keep_model_actors

        kept = keep_model_actors(address, int(workers) if workers else None)
    with kept:
        for spec, model, w in zip(specs, models, weight_list):
            log.info("evaluating surrogate %s on %s", spec, root)
            t = evaluate(
                model,
                root,
                db=db,
                label_space=label_space,
                labels_csv=labels_csv,
                shifts=inputs.shifts,
                levels=inputs.levels,
                weights=w,
                device=device,
                batch_size=batch_size,
                workers=workers,
                progress=progress,
                backend=backend,
                address=address,
                precision=precision,
                compile=compile,
            )
            run_ids.append(t.run_id)
    return run_ids


def _decide(
    store: Store, root: Path, rule: MineRule, run_ids: list[str], include_clean: bool
) -> tuple[MiningResult, Any]:
    """The candidate table with the k-of-n verdict and each candidate's file, as a
    :class:`MiningResult` whose id hashes what decides it; and the surrogates' runs."""
    specs, n, k = rule.specs, len(rule.specs), rule.k_of_n
    names = [_column(s) for s in specs]
    table, dropped = candidate_table(store, run_ids, names, include_clean=include_clean)
    if table.empty:
        raise InputError(f"no candidate images in {root} for all {n} surrogates")
    table["kept"] = table["n_wrong"] >= k
    runs = store.runs(run_ids)
    first = runs.set_index("run_id").loc[run_ids[0]]
    mining_id = identity_hash(
        {"run_ids": run_ids, "k": k, "cells": _cells(table), "include_clean": include_clean}
    )
    locate = _locator(first)
    table["path"] = [
        str(locate(sid, sh, lv))
        for sid, sh, lv in zip(table["sample_id"], table["shift"], table["level"])
    ]
    result = MiningResult(mining_id, run_ids, specs, table, k, n, dropped=dropped)
    if dropped:
        result.notes.append(f"{dropped} candidates left out: not predicted by every surrogate")
    return result, runs


def _cells(table) -> list[str]:
    """The ``shift/level`` cells of the candidates, sorted (part of the mining's id)."""
    return sorted({Cell(s, lv).folder for s, lv in zip(table["shift"], table["level"])})


def _record(
    store: Store,
    root: Path,
    result: MiningResult,
    names: list[str],
    runs,
    include_clean: bool,
    rule: MineRule,
    execution: MineExecution,
) -> None:
    """The mining's row in ``mining_runs`` and its kept images in ``mined_images``."""
    from robustlab.store.mining import write_mining

    kept, table = result.kept, result.table
    first = runs.set_index("run_id").loc[result.run_ids[0]]
    write_mining(
        store,
        {
            "mining_id": result.mining_id,
            "data_root": str(root.resolve()),
            "label_space": first["label_space"],
            "surrogates": result.surrogates,
            "run_ids": result.run_ids,
            "k": result.k,
            "n": result.n,
            "n_candidates": len(table),
            "n_kept": len(kept),
            "out": str(result.out) if result.out else None,
            "config": {
                "include_clean": include_clean,
                "cells": _cells(table),
                "copy": bool(execution.copy),
                "dropped": result.dropped,
                "weights": [str(w) if w else None for w in rule.weight_list],
            },
        },
        kept.assign(top1_ids=[list(r) for r in kept[names].itertuples(index=False)]),
    )


def _column(spec: str) -> str:
    """A CSV-friendly column name for a model spec (``timm:resnet50`` -> ``timm_resnet50``)."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in spec)


def _locator(run):
    """Function (sample_id, shift, level) -> the image file a run's cell was read from."""
    from robustlab.data.sources import discover
    from robustlab.records.manifest import read_generated
    from robustlab.pipeline import cell_path
    from robustlab.suites import Protocol

    config = run["config"] or {}
    data_root = Path(run["data_root"])
    if config.get("source") == "published":
        return _published_locator(data_root, config["published"])
    gen = config.get("generated_root") or ""
    if not gen:
        return lambda sid, shift, level: data_root / sid
    manifest = read_generated(Path(gen)) or {}
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(
        **{k: v for k, v in (manifest.get("protocol") or {}).items() if k in fields}
    )
    samples = {s.id: s for s in discover(data_root, labels_csv=config.get("labels_csv"))}

    def locate(sid, shift, level):
        if shift == CLEAN_SHIFT:
            return samples[sid].path
        return cell_path(gen, samples[sid], shift, level, protocol)

    return locate


def _published_locator(data_root: Path, published: dict):
    """The locator of a run over a published layout (ImageNet-C, ImageNet-9, XIMAGENET-12
    as downloaded): each cell's file in the cell folder the run recorded."""
    from robustlab.data.published import LAYOUTS, read_published

    if published["layout"] == "cifar-10-c":
        raise InputError(
            f"{data_root} holds CIFAR-10-C's arrays, not image files that mine could link",
            hint="mine the folders `robustlab generate cifar-c` writes beside its arrays",
        )
    pub = read_published(data_root, LAYOUTS[published["layout"]])
    folders = {tuple(k.split("/", 1)): f for k, f in published["folders"].items()}

    def locate(sid, shift, level):
        folder = published["clean"] if shift == CLEAN_SHIFT else folders[Cell(shift, level).stored]
        path = pub.file(sid, folder)
        if path is None:
            raise InputError(f"{data_root / folder} no longer holds {sid}")
        return path

    return locate


def _top1_names(run):
    """Readable name per top-1 id of a run: the label space's classes when the model
    predicts them directly or as a subset, else ImageNet-1k's (a mapping head)."""
    from robustlab.data.labels import get_label_space

    head = ((run["config"] or {}).get("model") or {}).get("head")
    if head in ("direct", "subset"):
        return list(get_label_space(run["label_space"]).classes)
    return list(get_label_space("imagenet1k").classes)


def _write_subset(out: Path, result: MiningResult, names: list[str], runs, copy: bool) -> Path:
    """Hard links (or copies) of the kept images under their relative paths, plus the CSVs
    and ``mining.json`` (the folder's record: which mining it holds).

    Hard links, not symbolic ones: the subset is itself an input, and readers follow no
    symbolic link out of a data folder (:mod:`robustlab.files.safety`); a hard link is a regular
    file inside it that costs no space. Across file systems (no hard link possible) the
    image is copied.
    """
    _check_out(out, result.mining_id)
    out.mkdir(parents=True, exist_ok=True)
    kept = result.kept
    rel_paths = _link_kept(out, kept, copy)
    id_names = {
        n: _top1_names(runs.set_index("run_id").loc[r]) for n, r in zip(names, result.run_ids)
    }
    atomic_write(out / "hard.csv", _hard_csv(kept, rel_paths, names, id_names))
    labels = io.StringIO()
    lw = csv.writer(labels, lineterminator="\n")
    lw.writerow(["file", "class"])
    lw.writerows([rel, c] for rel, c in zip(rel_paths, kept["class_name"]))
    atomic_write(out / "labels.csv", labels.getvalue().encode())
    record = {
        "mining_id": result.mining_id,
        "surrogates": result.surrogates,
        "run_ids": result.run_ids,
        "k": result.k,
        "n": result.n,
        "n_candidates": len(result.table),
        "n_kept": len(kept),
        "copy": bool(copy),
        # How the surrogates saw the kept files, so that evaluate reads the subset as they
        # did: its label space, and the suite and protocol whose cells the files are.
        **_seen_as(runs.set_index("run_id").loc[result.run_ids[0]]),
    }
    atomic_write(out / RECORD, json_bytes(record))
    return out


def _seen_as(run) -> dict:
    """``label_space``, ``suite``, ``suite_version`` and ``protocol`` (its fields) of the
    first surrogate's run."""
    import dataclasses as dc

    from robustlab.suites import Protocol

    fields = {f.name for f in dc.fields(Protocol)}
    protocol = (run["config"] or {}).get("protocol") or {}

    def plain(v):  # a column that is empty for this run reads as NaN from the table
        return None if v is None or (isinstance(v, float) and v != v) else v

    return {
        "label_space": plain(run["label_space"]),
        "suite": plain(run["suite"]),
        "suite_version": plain(run["suite_version"]),
        "protocol": {k: v for k, v in protocol.items() if k in fields},
    }


def _check_out(out: Path, mining_id: str) -> None:
    """Refuse a folder that holds another mining's subset, or that is not a mining folder."""
    prev = read_record(out / RECORD)
    if prev is not None:
        if prev.get("mining_id") != mining_id:
            refuse_changes(
                out,
                ["other surrogates, k, cells or data"],
                made=f"holds the hard subset of mining {prev.get('mining_id')}, not {mining_id}",
                hint="use a new --out folder",
            )
    elif out.exists() and any(out.iterdir()):
        raise InputError(
            f"--out {out} exists and is not a mining folder", hint="use a new or empty folder"
        )


def _link_kept(out: Path, kept, copy: bool) -> list[str]:
    """Each kept image linked (or copied) to its relative path; the paths, in order."""
    rel_paths = []
    for sid, shift, level, src in zip(
        kept["sample_id"], kept["shift"], kept["level"], kept["path"]
    ):
        rel = sid if shift == CLEAN_SHIFT else f"{Cell(shift, level).folder}/{sid}"
        dest = out / rel
        refuse_write_through(out, posixpath.dirname(rel), "--out")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        if copy:
            shutil.copy2(src, dest)
        else:
            try:
                os.link(os.path.realpath(src), dest)
            except OSError:  # another file system, or one without hard links
                shutil.copy2(src, dest)
        rel_paths.append(rel)
    return rel_paths


def _hard_csv(kept, rel_paths: list[str], names: list[str], id_names: dict) -> bytes:
    """``hard.csv``: per kept image its file, class, cell, label, n_wrong and each
    surrogate's top-1 id, its name and whether it was right."""
    buf = io.StringIO()
    cols = ["file", "class", "sample_id", "shift", "level", "label", "n_wrong"]
    for n in names:
        cols += [f"{n}_top1", f"{n}_top1_name", f"{n}_correct"]
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for rel, (_, r) in zip(rel_paths, kept.iterrows()):
        row = [
            rel,
            r["class_name"],
            r["sample_id"],
            r["shift"],
            r["level"],
            int(r["label"]),
            int(r["n_wrong"]),
        ]
        for n in names:
            top = int(r[n])
            table = id_names[n]
            row += [top, table[top] if 0 <= top < len(table) else "", bool(r[f"{n}_correct"])]
        w.writerow(row)
    return buf.getvalue().encode()


def kept_fraction(table) -> float:
    """Share of candidates kept."""
    return float(np.mean(table["kept"])) if len(table) else float("nan")


__all__ = [
    "mine",
    "MineRule",
    "MineInputs",
    "MineExecution",
    "MiningResult",
    "candidate_table",
    "DEFAULT_SURROGATES",
    "kept_fraction",
]
