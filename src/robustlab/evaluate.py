"""``robustlab.evaluate``: measure a model on clean images and on every cell of a suite.

This is the Python face of ``robustlab evaluate``. Everything a user can get wrong is
checked before the database is touched (unknown model or suite, missing weights, empty
folder, a label outside the label space), so a run that fails to start writes nothing.

Example:
    >>> import robustlab
    >>> df = robustlab.evaluate("lite0", "photos/", suite="imagenet-c",
    ...                         shifts=["gaussian_noise"], levels=[1, 3])  # doctest: +SKIP
    >>> df[["shift", "level", "n", "top1"]]  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import sys
import types
from pathlib import Path
from typing import Any

from robustlab.errors import InputChangedError, InputError, MissingResourceError
from robustlab.store import CLEAN_SHIFT, DEFAULT_DB, RunRecord, Store

log = logging.getLogger(__name__)


def default_workers() -> int:
    """One worker per spare core (at least one): the main process runs the forward pass."""
    return max(1, (os.cpu_count() or 2) - 1)


def _resolve_suite(suite, shifts, levels, available=None):
    from robustlab.shifts.registry import available_shifts, get_shift, needs_resource
    from robustlab.suites import Protocol, get_suite

    if suite is None:
        if shifts:
            raise InputError("--shift needs --suite (which suite's cells to pick from)")
        return None, Protocol(), [(CLEAN_SHIFT, 0)]
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    names = list(shifts) if shifts else list(s.shifts)
    if available is None:  # on the fly: skip shifts whose tool (an inpainter) is not configured
        kept = available_shifts(names, log=log)
    else:  # a generated folder: such shifts count when their files were generated
        kept = [n for n in names
                if not needs_resource(get_shift(n)) or any(sh == n for sh, _ in available)]
        if not kept:
            raise InputError(f"no generated images for {', '.join(names)} in this folder")
    if shifts or levels or kept != list(s.shifts):
        s = s.select(kept, list(levels) if levels else None)
    return s, s.protocol, [(CLEAN_SHIFT, 0), *s.cells()]


def _labels_for(samples, space) -> list[int]:
    """Label index per sample in ``space``; one-line ValueError for the first bad one."""
    n_classes = len(space.classes)
    out = []
    for s in samples:
        # The class name (a wnid, a readable name) is looked up in the label space; a bare
        # CSV index is used only when no class is given, since it may index another space.
        if s.class_name is not None:
            try:
                label = int(space.index_of(s.class_name))
            except (KeyError, ValueError):
                raise InputError(f"{s.id}: class {s.class_name!r} is not in label space "
                                 f"{space.name!r}") from None
        elif s.label is not None:
            label = int(s.label)
            if not 0 <= label < n_classes:
                raise InputError(f"{s.id}: label {label} is outside label space {space.name!r} "
                                 f"(0..{n_classes - 1})")
        else:
            raise InputError(f"{s.id} has no label: use a class-folder tree or a labels CSV")
        out.append(label)
    return out


GENERATE_MANIFEST = "manifest.json"


def read_generated(root: Path) -> dict | None:
    """The manifest of a folder written by ``robustlab generate``, or None for a source folder."""
    import json

    path = root / GENERATE_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if not str(manifest.get("format", "")).startswith("robustlab-generate/"):
        return None
    return manifest


def _generated_plan(root: Path, manifest: dict, suite, seed, labels_csv, masks):
    """Suite, protocol, seed, source folder and CSV/masks of a generated folder, checked
    against what the caller asked for."""
    import dataclasses

    from robustlab.suites import Protocol, get_suite

    m_suite = (manifest.get("suite") or {}).get("name")
    if suite is not None and isinstance(suite, str) and suite != m_suite:
        raise InputChangedError(f"{root} was generated for suite {m_suite!r}, not {suite!r}")
    m_seed = int(manifest.get("seed", 0))
    if seed is not None and int(seed) != m_seed:
        raise InputChangedError(f"{root} was generated with seed {m_seed}, not {seed}")
    fields = {f.name for f in dataclasses.fields(Protocol)}
    protocol = Protocol(**{k: v for k, v in (manifest.get("protocol") or {}).items() if k in fields})
    data = manifest.get("data") or {}
    source = Path(data.get("root") or "")
    if not source.is_dir():
        raise InputError(f"the source images of {root} ({source}) are not there; the clean "
                         "cell is read from them")
    available = {(c["shift"], str(c["level"])) for c in manifest.get("cells", [])}
    return (suite if suite is not None else get_suite(m_suite)), protocol, m_seed, source, \
        labels_csv or data.get("labels_csv"), masks or data.get("masks"), available


def _file_size(path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return -1


def plan_run(model, data, *, suite=None, seed: int | None = None, shifts=None, levels=None,
             labels_csv=None, masks=None, label_space=None, weights=None, device=None,
             batch_size=None):
    """Validate everything and build what a run needs, without touching the database.

    Returns:
        A dict with model, samples, labels, cells, protocol, suite, record, images.
    """
    from robustlab import __version__
    from robustlab.data.labels import get_label_space
    from robustlab.data.sources import discover
    from robustlab.run.identity import as_dict, data_fingerprint, run_id, versions
    from robustlab.run.tasks import CellImages
    from robustlab.shifts.registry import get_shift

    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)
                             or not 0 <= seed < 2**63):
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    root = Path(data).expanduser()
    if not root.is_dir():
        raise MissingResourceError(f"data folder {root} does not exist" if not root.exists()
                         else f"data folder {root} is not a folder")
    manifest = read_generated(root)
    generated_root, source_kind = None, "on-the-fly"
    if manifest is not None:
        suite, gen_protocol, seed, source, labels_csv, masks, available = _generated_plan(
            root, manifest, suite, seed, labels_csv, masks)
        generated_root, source_kind = root.resolve(), "generated"
    seed = 0 if seed is None else int(seed)
    suite_obj, protocol, cells = _resolve_suite(suite, shifts, levels,
                                                available if manifest is not None else None)
    if manifest is not None:
        protocol = gen_protocol
        missing = [f"{s}/{lv}" for s, lv in cells if s != CLEAN_SHIFT and (s, str(lv)) not in available]
        if missing:
            raise InputError(f"{root} has no generated images for {', '.join(missing[:6])}"
                             + (f" and {len(missing) - 6} more" if len(missing) > 6 else ""))
        root = source
    samples = discover(root, labels_csv=labels_csv, masks=masks)
    space_name = label_space or (suite_obj.label_space if suite_obj else "imagenet1k")
    space = get_label_space(space_name) if isinstance(space_name, str) else space_name
    labels = _labels_for(samples, space)

    if isinstance(model, str):
        from robustlab.models import load_model

        model = load_model(model, weights=weights, device=device, label_space=space,
                           batch_size=batch_size)
    preprocessing = {"model": as_dict(model.preprocessing), "protocol": protocol.describe()}
    fingerprint = data_fingerprint(
        (s.id, s.class_name, lab, _file_size(s.path)) for s, lab in zip(samples, labels))
    identity = {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "suite": suite_obj.name if suite_obj else None,
        "suite_version": suite_obj.version if suite_obj else None,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "label_space": space.name,
        "seed": int(seed),
        "preprocessing": preprocessing,
        "source": source_kind,
    }
    record = RunRecord(
        run_id=run_id(identity),
        model_spec=model.spec,
        weights_hash=model.weights_hash,
        suite=identity["suite"],
        suite_version=identity["suite_version"],
        data_root=str(root.resolve()),
        data_fingerprint=fingerprint,
        label_space=space.name,
        preprocessing=preprocessing,
        seed=int(seed),
        versions=versions(),
        config={"source": source_kind, "generated_root": str(generated_root or ""),
                "labels_csv": str(getattr(samples, "labels_csv", None) or labels_csv or "") or None,
                "masks": str(Path(masks).expanduser().resolve()) if masks else None,
                "model": _describe(model),
                "cells": [[s, str(lv)] for s, lv in cells],
                "discover_skipped": [list(x) for x in getattr(samples, "skipped", [])]},
        n_samples=len(samples),
    )
    shift_objs = [get_shift(s) for s, _ in cells if s != CLEAN_SHIFT]
    if any("inpainter" in sh.needs for sh in shift_objs):
        # ai_bg's pixels depend on the checkpoint: on the fly the configured one draws them,
        # from a generated folder the one its manifest names.
        if manifest is not None:
            record.config["inpainter"] = manifest.get("inpainter")
        else:
            from robustlab.shifts.synth.inpaint import describe_inpainter

            record.config["inpainter"] = describe_inpainter()
    needs_donors = any(sh.extra.get("donor_rule") for sh in shift_objs)
    needs_mask = any("mask" in sh.needs for sh in shift_objs)
    images = CellImages(protocol, seed, generated_root=generated_root,
                        donors=samples if needs_donors else None, with_mask=needs_mask)
    return {"model": model, "samples": samples, "labels": labels, "cells": cells,
            "protocol": protocol, "suite": suite_obj, "record": record, "images": images,
            "label_space": space}


def _describe(model) -> dict[str, Any]:
    try:
        return model.describe()
    except Exception:  # a description is nice to have, never a reason to fail
        return {"spec": model.spec}


def evaluate(model, data, *, suite=None, db=DEFAULT_DB, seed: int | None = None, shifts=None,
             levels=None, labels_csv=None, masks=None, label_space=None, weights=None,
             device=None, batch_size: int | None = None, workers: int | None = None,
             prefetch: int = 2, cells_per_task: int = 16, backend: str = "local",
             progress: bool | None = None):
    """Evaluate ``model`` on the clean images in ``data`` and on every cell of ``suite``.

    Shifts are applied on the fly with :mod:`robustlab.pipeline` (nothing is written to
    disk), giving the same pixels, hence the same predictions, as reading back a folder
    made by ``robustlab generate`` with the same seed. Predictions are streamed to the
    DuckDB file ``db``; rerunning the same call resumes where an interrupted one stopped.

    Args:
        model: A model spec (``"lite0"``, ``"timm:resnet50"``, ...) or a loaded Model.
        data: Folder of source images (ImageFolder tree, or flat plus labels CSV), or a
            folder written by ``robustlab generate`` (its ``manifest.json`` names the suite,
            seed, protocol and source folder; shifted cells are read from its files and the
            clean cell from the source).
        suite: Suite name or YAML path; None evaluates the clean images only (for a
            generated folder: the suite it was generated for).
        db: Results database file (created on the first write).
        seed: Global seed of the seed rule (default 0; a generated folder's own seed).
        shifts, levels: Restrict the suite to some shifts / levels.
        labels_csv, masks: Passed to :func:`robustlab.data.sources.discover`.
        label_space: Label space name (default: the suite's, else ``imagenet1k``).
        weights, device, batch_size: Passed to :func:`robustlab.models.load_model`.
        workers: DataLoader worker processes (default: CPU cores - 1, at least 1).
        prefetch, cells_per_task, backend: Execution details (never change results).
        progress: Per-cell progress bars (default: when stderr is a terminal).

    Returns:
        A DataFrame with one row per cell of this run: model, suite, shift, level, n,
        top1, top5, error (``.attrs`` holds ``run_id``, ``skipped`` and ``db``).
    """
    from robustlab.run.runner import RunOptions, Runner

    plan = plan_run(model, data, suite=suite, seed=seed, shifts=shifts, levels=levels,
                    labels_csv=labels_csv, masks=masks, label_space=label_space,
                    weights=weights, device=device, batch_size=batch_size)
    m = plan["model"]
    options = RunOptions(
        batch_size=int(batch_size or getattr(m, "batch_size", None) or 32),
        workers=default_workers() if workers is None else int(workers),
        prefetch=prefetch, cells_per_task=cells_per_task, backend=backend,
        progress=sys.stderr.isatty() if progress is None else bool(progress),
    )
    if options.batch_size < 1:
        raise InputError(f"batch size must be at least 1, got {options.batch_size}")
    store = Store(db)
    _check_same_inpainter(store, plan["record"])
    summary = Runner(m, plan["samples"], plan["labels"], plan["cells"], plan["images"],
                     store, plan["record"], options).run()
    table = run_table(store, summary.run_id, skipped=summary.skipped)
    table.attrs.update({"n_written": summary.n_written, "resumed": summary.resumed})
    return table


def _check_same_inpainter(store: Store, record) -> None:
    """Refuse to resume a run whose ai_bg images came from another inpainting checkpoint.

    The checkpoint is not part of the run id (a run may gain ai_bg cells later), so without
    this check a rerun with a different ``ROBUSTLAB_INPAINTER`` would mix two models'
    images in one run.
    """
    new = (record.config.get("inpainter") or {}).get("fingerprint")
    if not new or not store.exists():
        return
    old_run = store.get_run(record.run_id)
    old = ((old_run or {}).get("config") or {}).get("inpainter") or {}
    if old.get("fingerprint") and old["fingerprint"] != new:
        raise InputChangedError(
            f"run {record.run_id} already holds ai_bg images drawn by the inpainter "
            f"{old.get('path')} (fingerprint {old['fingerprint']}); the configured one is "
            f"{record.config['inpainter'].get('path')} ({new}): use another --db or --seed")


def run_table(store: Store, run_id: str, skipped=None):
    """Per-cell results of one stored run, as ``evaluate`` returns them."""
    run = store.get_run(run_id)
    cells = store.cell_table([run_id])
    cells.insert(1, "model", run["model_spec"])
    cells.insert(2, "suite", run["suite"])
    cells.attrs.update({"run_id": run_id, "db": str(store.path),
                        "skipped": run["skipped"] if skipped is None else skipped})
    return cells


class _CallableModule(types.ModuleType):
    """``robustlab.evaluate`` is both this module and the function: once the submodule is
    imported, Python binds the package attribute ``robustlab.evaluate`` to the module, so
    the module forwards calls to :func:`evaluate` to keep ``robustlab.evaluate(...)`` working.
    """

    def __call__(self, *args, **kwargs):
        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
