"""``robustlab saliency``: where a model looks, on the clean images and the scenario cells.

XIMAGENET-12 (its Figure 4) shows saliency maps of ResNet-50 and VGG-16 and concludes that
models with more robust backbones look at the object, not at the background. This runs a
saliency method (:mod:`robustlab.saliency.attribution`) on each clean image and each
scenario cell of a mask suite (the same pixels ``evaluate`` and ``generate`` make, through
:class:`robustlab.execution.tasks.CellImages`), compares the map with the cell's object mask
(:mod:`robustlab.saliency.metrics`) and stores one row per image and cell in the results
database, with the model's prediction, so the same rows give the accuracies of the
robustness score and the BG-gap (:mod:`robustlab.saliency.analysis`).

The mask of a cell is the object where the scenario left it (``random_bg`` moves it: its
placement is replayed; ``no_fg`` and the ``only_bg`` cells remove it, so they are skipped
and counted), the rule :func:`robustlab.workflows._masked.target_mask` that segmentation
scoring uses too: the two workflows share their run scaffolding (request parts, cell and
sample selection, run identity, resume, storing) in :mod:`robustlab.workflows._masked`. The mask goes through the model's own resize and crop, so map and
mask meet on the model's input pixels.

Work is batched (a forward and a backward pass per batch of cells), images are decoded and
shifted by ``workers`` processes ahead of the model, batches are written as they finish,
and a rerun of the same command resumes: stored (sample, shift, level) keys are skipped
before any image is decoded.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from robustlab.cells import Cell
from robustlab.errors import InputError
from robustlab.saliency.maps import input_mask
from robustlab.saliency.methods import DEFAULT_METHOD, METHODS, TARGETS
from robustlab.store.schema import SALIENCY_TASK
from robustlab.workflows.keywords import build_specs
from robustlab.workflows.tools import ToolSpec
from robustlab.workflows._masked import (
    MaskedCells,
    MaskedData,
    MaskedExecution,
    Selection,
    StoredRun,
    cell_images,
    masked_cells,
    masked_record,
    select,
    target_rule,
)

if TYPE_CHECKING:
    from robustlab.execution.tasks import TaskDataset
    from robustlab.models.base import Model

log = logging.getLogger(__name__)


class SaliencyDataset:
    """Map-style dataset for :func:`robustlab.execution.executors.iterate_local`: item ``i`` is
    ``(i, uint8 K x 3 x H x W model inputs, K x H x W masks, [(shift, level)], errors)``
    for the cells of sample ``i`` still to do. Unreadable images and skipped cells come
    back as reasons (:func:`robustlab.workflows._masked.masked_cells`)."""

    def __init__(self, samples, todo, images, preprocessing, seed: int):
        self.samples, self.todo, self.images = samples, todo, images
        self.preprocessing, self.seed = preprocessing, int(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        import torch

        got, errors = masked_cells(self.images, self.samples[i], self.todo[i], self.seed)
        if not got:
            return i, None, None, [], errors
        prep = self.preprocessing
        inputs = torch.stack([prep.to_uint8(img) for _, _, img, _ in got])
        masks = torch.stack([torch.from_numpy(input_mask(t, prep)) for _, _, _, t in got])
        return i, inputs, masks, [Cell(sh, lv).stored for sh, lv, _, _ in got], errors


@dataclass
class SaliencyResult:
    """Per-image rows (read back from the database), per-cell summary, skipped, record."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    skipped: list[tuple[str, str]]
    record: dict


@dataclass(frozen=True)
class SaliencyModel:
    """Which model and what to explain.

    Args:
        model: A model spec (``lite0``, ``timm:resnet50``, ``torchvision:vgg16``...) or a
            loaded torch :class:`robustlab.models.base.Model`.
        method: A key of :data:`robustlab.saliency.methods.METHODS`.
        target_layer: Module name for CAM methods (default: found, and recorded).
        target: ``"predicted"`` (explain the model's top-1 class) or ``"label"``.
        label_space, weights, device: As for ``robustlab evaluate`` (for a spec).
    """

    model: str | Model
    method: str = DEFAULT_METHOD
    target_layer: str | None = None
    target: str = "predicted"
    label_space: str | None = None
    weights: str | Path | None = None
    device: str | None = None

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise InputError(f"target must be one of {', '.join(TARGETS)}, not {self.target!r}")
        if self.method not in METHODS:
            raise InputError(
                f"unknown saliency method {self.method!r}", hint=f"use one of: {', '.join(METHODS)}"
            )
        if not METHODS[self.method][2] and self.target_layer is not None:
            raise InputError(f"{self.method} works on the input pixels; it takes no --target-layer")

    def load(self):
        """The torch model (loaded from the spec unless it is one already)."""
        from robustlab.models import load_model

        model = self.model
        if isinstance(model, str):
            model = load_model(
                model, weights=self.weights, device=self.device, label_space=self.label_space
            )
        if getattr(model, "module", None) is None:
            raise InputError(
                f"{model.spec} is not a torch model ({model.adapter} adapter): saliency "
                "needs gradients through the network",
                hint="use the torch spec of the model (lite0, timm:NAME, torchvision:NAME)",
            )
        return model

    def attributor(self, model):
        """The :class:`robustlab.saliency.attribution.Attributor` of the method (a CAM
        method's layer found in the network unless named)."""
        from robustlab.saliency.attribution import Attributor, find_target_layer

        layer = None
        if METHODS[self.method][2]:
            layer = find_target_layer(model.module, model.preprocessing.hw, self.target_layer)
        return Attributor(model.module, self.method, layer)


@dataclass(frozen=True)
class SaliencyExecution(MaskedExecution):
    """:class:`MaskedExecution` (``batch_size`` None: the model's), and ``workers``:
    processes that decode and shift ahead of the model (None: one per core the
    model leaves free, :func:`~robustlab.execution.lifeline.default_workers`; 0: in this process)."""

    workers: int | None = None


@dataclass(frozen=True)
class SaliencyRequest:
    """A stored saliency run: :class:`SaliencyModel`, which images (:class:`MaskedData`),
    which cells (:class:`MaskedCells`) and how it runs (:class:`SaliencyExecution`)."""

    model: SaliencyModel
    data: MaskedData
    cells: MaskedCells = MaskedCells()
    run: SaliencyExecution = SaliencyExecution()
    tools: ToolSpec = field(default_factory=ToolSpec)  # the optional tools (ai_bg's inpainter)

    @classmethod
    def build(cls, model, data, **options: Any) -> SaliencyRequest:
        """The request of ``saliency(model, data, **options)``: each keyword goes to the
        part with a field of its name (unknown: TypeError with a "did you mean")."""
        parts = build_specs(
            "saliency",
            {"model": model, "data": data, **options},
            {
                "model": SaliencyModel,
                "data": MaskedData,
                "cells": MaskedCells,
                "run": SaliencyExecution,
                "tools": ToolSpec,
            },
        )
        return cls(**parts)


def _batch_rows(model, attributor, target: str, pending: list) -> pd.DataFrame:
    """The stored rows of one batch of ``(meta, input, mask)``: each cell's ``meta`` beside
    what :func:`robustlab.saliency.explain.explain_batch` computes for it."""
    import torch

    from robustlab.saliency.explain import explain_batch

    x = torch.stack([p[1] for p in pending])
    m = torch.stack([p[2] for p in pending]).numpy()
    got = explain_batch(model, attributor, target, x, m, [p[0]["label"] for p in pending])
    return pd.DataFrame([{**meta, **row} for (meta, _, _), row in zip(pending, got)])


def _explain(dataset, labels, explain, run: StoredRun, batch_size: int, workers: int):
    """Feed the dataset's cells to ``explain`` (a batch of ``(meta, input, mask)`` -> rows)
    ``batch_size`` at a time, each batch stored as it finishes; the skips, with reasons."""
    from robustlab.execution.executors import iterate_local

    skipped: list[tuple[str, str]] = []
    pending: list[tuple[dict, Any, Any]] = []
    # iterate_local takes any map-style dataset (it is typed for the runner's own).
    loader = iterate_local(cast("TaskDataset", dataset), workers=workers)
    for i, inputs, masks, got, errors in loader:
        sample = dataset.samples[i]
        skipped += [(sample.id, f"{w}: {why}" if w else why) for w, why in errors]
        if inputs is None:
            continue
        for k, (sh, lv) in enumerate(got):
            meta = {"sample_id": sample.id, "shift": sh, "level": lv}
            meta.update(class_name=sample.class_name, label=int(labels[i]))
            pending.append((meta, inputs[k], masks[k]))
            if len(pending) >= batch_size:
                run.write(explain(pending))
                pending.clear()
    if pending:
        run.write(explain(pending))
    return skipped


def _record(req: SaliencyRequest, sel: Selection, model, explained: dict, gone: list[str]):
    """The run record: the model's part of the identity (spec, weights, label space,
    preprocessing, method and layer, target) beside the masked run's."""
    identity = {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "label_space": model.label_space.name,
        "preprocessing": model.preprocessing.describe(),
        "saliency": {k: v for k, v in explained.items() if k != "version"},
        "target": req.model.target,
    }
    config = {
        "saliency": explained,
        "target": req.model.target,
        "removed_object": gone,
        "model": {"spec": model.spec, "device": str(model.device)},
    }
    return masked_record(
        SALIENCY_TASK,
        sel,
        req.data,
        req.cells.seed,
        model=identity,
        preprocessing=model.preprocessing.describe(),
        config=config,
        extra_versions={explained["library"]: explained["version"]},
    )


def saliency(model, data, **options: Any) -> SaliencyResult:
    """Saliency maps of ``model`` on the clean images and scenario cells, stored as a run.

    Args:
        model: A model spec (``lite0``, ``timm:resnet50``, ``torchvision:vgg16``...) or a
            loaded torch :class:`robustlab.models.base.Model`.
        data: Source folder (ImageFolder tree, or flat plus labels CSV).
        options: The fields of the request's parts (:class:`SaliencyRequest`):
            ``method``, ``target_layer``, ``target``, ``label_space``, ``weights``,
            ``device`` (:class:`SaliencyModel`); ``masks`` (required), ``labels_csv``,
            ``limit`` (:class:`MaskedData`); ``suite`` (``ximagenet12``, ``imagenet9``),
            ``shifts`` (``["clean"]``: clean only), ``levels``, ``seed``
            (:class:`MaskedCells`); ``db``, ``batch_size``, ``workers``, ``progress``
            (:class:`SaliencyExecution`).

    Returns:
        :class:`SaliencyResult`; ``record`` holds ``run_id``, ``db``, ``resumed``,
        ``n_written``, the method and its layer.
    """
    return run_saliency(SaliencyRequest.build(model, data, **options))


def run_saliency(req: SaliencyRequest) -> SaliencyResult:
    """Run a :class:`SaliencyRequest` (what :func:`saliency` and ``robustlab saliency``
    call): a rerun resumes, stored (sample, shift, level) keys skipped before decoding."""
    from robustlab.execution.lifeline import default_workers
    from robustlab.saliency.analysis import cell_summary
    from robustlab.saliency.attribution import require_library
    from robustlab.store import Store
    from robustlab.workflows.evaluate.labels import labels_for

    require_library(req.model.method)
    sel = select(req.data, req.cells, req.tools)
    gone = sorted({sh for sh, _ in sel.keys if target_rule(sh) is None})
    store = Store(req.run.db)
    store.check()  # a damaged database fails now, not after the model has loaded
    model = req.model.load()
    labels = labels_for(sel.usable, model.label_space)
    attributor = req.model.attributor(model)
    explained = attributor.describe()
    record = _record(req, sel, model, explained, gone)
    done = store.saliency_done_keys(record.run_id)
    todo = [
        [(sh, lv) for sh, lv in sel.keys if (x.id, sh, lv) not in done and sh not in gone]
        for x in sel.usable
    ]
    keep = [i for i, t in enumerate(todo) if t]
    dataset = SaliencyDataset(
        [sel.usable[i] for i in keep],
        [todo[i] for i in keep],
        cell_images(sel, req.cells.seed),
        model.preprocessing,
        req.cells.seed,
    )
    lines = (sum(len(todo[i]) for i in keep), f"saliency {model.spec}", "cell", 0)
    run = StoredRun(store, record, store.write_saliency, lines if req.run.progress else None)
    workers = (
        default_workers(model.input_device()) if req.run.workers is None else int(req.run.workers)
    )
    try:
        with run.running():
            skipped = _explain(
                dataset,
                [labels[i] for i in keep],
                lambda pending: _batch_rows(model, attributor, req.model.target, pending),
                run,
                int(req.run.batch_size or model.batch_size),
                workers,
            )
    finally:
        attributor.close()
    skipped = sel.skipped + skipped
    run.finish(len(sel.usable), skipped)
    rows = store.saliency([run.run_id])
    summary = cell_summary(rows, np.random.default_rng(int(req.cells.seed)))
    out = {**run.summary(), "n_samples": len(sel.usable)}
    out.update(saliency=explained, removed_object=gone)
    return SaliencyResult(rows, summary, skipped, out)


def stored_comparison(db) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """Every saliency run stored in ``db`` side by side: the per-model table
    (:func:`robustlab.saliency.analysis.model_table`) and the correlations across models;
    None while the database holds fewer than two saliency runs."""
    from robustlab.saliency.analysis import correlations, model_table
    from robustlab.store import Store

    store = Store(db)
    runs = store.runs()
    ids = [r.run_id for r in runs.itertuples() if (r.config or {}).get("task") == SALIENCY_TASK]
    if len(ids) < 2:
        return None
    models = model_table(store.saliency(ids), runs)
    return models, correlations(models)


__all__ = [
    "saliency",
    "run_saliency",
    "stored_comparison",
    "SaliencyRequest",
    "SaliencyModel",
    "SaliencyExecution",
    "SaliencyResult",
]
