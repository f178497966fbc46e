"""Segmentation models on the background scenarios: predicted foreground vs the object mask.

XIMAGENET-12 evaluates segmentation networks as well as classifiers (REFERENCE.md
section 2): when the background is blurred, recoloured or replaced, does the network still
find the object? Each scenario image goes through the network; every pixel whose arg-max
class is not ``background`` counts as foreground and is compared with the scenario's own
object mask. Per-image counts (tp, fp, fn, tn) are kept, so
:func:`robustlab.metrics.segmentation.summarize` can score any grouping (per scenario,
per class) from accumulated pixels.

The scenario images are made by the same :class:`robustlab.execution.tasks.CellImages` as
classifier runs (same seed rule, same pixels as a generated folder), through the run
scaffolding segment shares with ``saliency`` (:mod:`robustlab.workflows._masked`: request
parts, cell and sample selection, run identity, resume, storing). Which mask is the truth
depends on what a scenario does to the object, a rule kept as data on each shift
(:func:`robustlab.workflows._masked.target_mask`):

- the object stays where it is (blur, colour, brightness, segmented, transparent,
  only_fg, the ImageNet-9 mixes, ai_bg): the sample's prepared mask;
- ``random_bg`` moves the object: its own draw (``Shift.draw``) with the cell's
  generator gives the placement, so the moved mask exactly;
- ``no_fg``, ``only_bg_b``, ``only_bg_t`` remove the object: nothing to segment, so these
  cells are skipped (counted, with the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustlab.cells import as_cells, level_key
from robustlab.errors import InputError, MissingResourceError
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

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TORCHVISION_SEGMENTATION = (
    "lraspp_mobilenet_v3_large",
    "deeplabv3_mobilenet_v3_large",
    "deeplabv3_resnet50",
    "deeplabv3_resnet101",
    "fcn_resnet50",
    "fcn_resnet101",
)


class SegmentationModel:
    """A torchvision-style segmentation network: image in, foreground mask out.

    Args:
        module: ``torch.nn.Module`` returning ``(B, K, H, W)`` logits, or a dict holding
            them under ``"out"`` (torchvision's segmentation models).
        spec: The model spec, as for classifiers (e.g. ``"torchvision:lraspp_mobilenet_v3_large"``).
        mean, std: Input normalisation on the [0, 1] scale (torchvision: ImageNet's).
        background: The class index that means "not an object" (VOC: 0).
        device: ``cpu``/``cuda``/None (cuda when available).
        weights_hash: Recorded with the results.
    """

    def __init__(
        self,
        module,
        *,
        spec: str,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        background: int = 0,
        device=None,
        weights_hash: str | None = None,
    ):
        from robustlab.models.devices import auto_device

        self.device = auto_device(device)
        self.module = module.eval().to(self.device)
        self.spec = spec
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise InputError("mean and std need 3 values each (std > 0)")
        self.background = int(background)
        self.weights_hash = weights_hash

    def logits(self, images: Sequence[np.ndarray]):
        """(B, K, H, W) float32 CPU logits for same-sized HxWx3 uint8 images."""
        import torch

        if not images:
            raise ValueError("no images to segment")
        shapes = {tuple(np.asarray(x).shape) for x in images}
        if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[2] != 3:
            raise ValueError(f"segment needs same-sized HxWx3 images, got shapes {sorted(shapes)}")
        x = torch.from_numpy(np.stack([np.asarray(i, np.uint8) for i in images]))
        x = x.permute(0, 3, 1, 2).float().div_(255.0)
        x = (x - torch.tensor(self.mean).view(1, 3, 1, 1)) / torch.tensor(self.std).view(1, 3, 1, 1)
        with torch.inference_mode():
            out = self.module(x.to(self.device))
            out = out["out"] if isinstance(out, dict) else out
            if out.ndim != 4 or out.shape[0] != x.shape[0]:
                raise ValueError(f"{self.spec} returned {tuple(out.shape)}, expected (B, K, H, W)")
            if out.shape[-2:] != x.shape[-2:]:
                out = torch.nn.functional.interpolate(
                    out, size=x.shape[-2:], mode="bilinear", align_corners=False
                )
            return out.float().cpu()

    def foreground(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """(B, H, W) bool: pixels whose arg-max class is not the background class."""
        out = self.logits(images)
        if not 0 <= self.background < out.shape[1]:
            raise InputError(
                f"background class {self.background} is outside the model's {out.shape[1]} classes"
            )
        return (out.argmax(1) != self.background).numpy()

    def describe(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "mean": list(self.mean),
            "std": list(self.std),
            "background": self.background,
            "device": self.device,
            "weights_hash": self.weights_hash,
        }


def load_segmentation_model(
    spec: str, *, weights=None, num_classes: int = 21, background: int = 0, device=None
) -> SegmentationModel:
    """A torchvision segmentation network from a local weights file (never a download).

    Args:
        spec: ``torchvision:NAME`` or ``NAME``, one of :data:`TORCHVISION_SEGMENTATION`.
        weights: A state-dict file, or ``"random"`` for an untrained network (tests, smoke
            runs: its numbers mean nothing).
        num_classes: Output classes of the checkpoint (VOC: 21).
        background: Index of the background class.
    """
    import torchvision.models.segmentation as tvs

    from robustlab.models.weights import load_state_dict_file, load_strict, weights_hash

    name = spec.split(":", 1)[1] if spec.startswith("torchvision:") else spec
    if name not in TORCHVISION_SEGMENTATION:
        raise InputError(
            f"unknown segmentation model {spec!r}; use one of {', '.join(TORCHVISION_SEGMENTATION)}"
        )
    if weights is None:
        raise InputError(
            f"{name} needs weights: a local state-dict file (e.g. torchvision's "
            f"{name} checkpoint), or weights='random' for an untrained network"
        )
    kwargs = {"weights": None, "weights_backbone": None, "num_classes": int(num_classes)}
    if not name.startswith("lraspp"):
        kwargs["aux_loss"] = False
    module = getattr(tvs, name)(**kwargs)
    whash = "random"
    if weights != "random":
        path = Path(weights).expanduser()
        if not path.is_file():
            raise MissingResourceError(f"weights file {path} does not exist")
        sd = load_state_dict_file(path)
        sd = {k: v for k, v in sd.items() if not k.startswith("aux_classifier.")}
        load_strict(module, sd, f"torchvision:{name} with {num_classes} classes")
        whash = weights_hash(path)
    return SegmentationModel(
        module, spec=f"torchvision:{name}", background=background, device=device, weights_hash=whash
    )


@dataclass
class SegmentationResult:
    """Per-image counts, per-scenario scores and what was skipped (with reasons)."""

    counts: pd.DataFrame
    summary: pd.DataFrame
    skipped: list[tuple[str, str]]
    record: dict


# Images per forward pass when the request names none.
DEFAULT_BATCH_SIZE = 8
COUNT_COLUMNS = ["sample_id", "class_name", "shift", "level", "tp", "fp", "fn", "tn"]
SUMMARY_COLUMNS = ["shift", "level", "n", "pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou"]


@dataclass(frozen=True)
class SegmentRequest:
    """A stored segmentation run: the loaded model, which images (:class:`MaskedData`),
    which cells (:class:`MaskedCells`) and how it runs (:class:`MaskedExecution`).

    The model must come from a weights file: an untrained ``weights="random"`` network has
    no identity to resume under.
    """

    model: SegmentationModel
    data: MaskedData
    cells: MaskedCells = MaskedCells()
    run: MaskedExecution = MaskedExecution()
    tools: ToolSpec = field(default_factory=ToolSpec)  # the optional tools (ai_bg's inpainter)

    def __post_init__(self) -> None:
        if self.model.weights_hash in (None, "random"):
            raise InputError(
                "storing segmentation results needs a model loaded from a weights file "
                "(an untrained random network has no identity to resume under)"
            )

    @classmethod
    def build(cls, model: SegmentationModel, data, **options: Any) -> SegmentRequest:
        """The request of ``segment_to_store(model, data, **options)``: each keyword goes to
        the part with a field of its name (unknown: TypeError with a "did you mean")."""
        parts = build_specs(
            "segment_to_store",
            {"data": data, **options},
            {"data": MaskedData, "cells": MaskedCells, "run": MaskedExecution, "tools": ToolSpec},
        )
        return cls(model, **parts)


def _score(
    model: SegmentationModel,
    sel: Selection,
    seed: int,
    batch_size: int,
    done=None,
    sink: Callable[[pd.DataFrame], Any] | None = None,
) -> tuple[list[dict], list[tuple[str, str]]]:
    """Segment the cells of ``sel`` not in ``done`` and count pixels against each truth.

    Returns:
        ``(rows, skipped)``: one row of :data:`COUNT_COLUMNS` per (image, cell), in batches
        also handed to ``sink`` as they are computed; the skips of this call, with reasons.
    """
    images = cell_images(sel, seed)
    for name in dict.fromkeys(n for n, _ in sel.cells):
        if target_rule(name) is None:
            log.info("%s removes the object: no foreground to segment, its cells are skipped", name)
    done = {(str(a), str(b), str(c)) for a, b, c in done} if done else set()
    rows: list[dict] = []
    skipped: list[tuple[str, str]] = []
    batch: list[tuple[dict, np.ndarray, np.ndarray]] = []

    def flush():
        if not batch:
            return
        fg = model.foreground([img for _, img, _ in batch])
        new = [
            {**row, **dict(zip("tp fp fn tn".split(), _counts(pred, truth)))}
            for (row, _, truth), pred in zip(batch, fg)
        ]
        batch.clear()
        if sink is not None:
            sink(pd.DataFrame(new, columns=COUNT_COLUMNS))
        rows.extend(new)

    for sample in sel.usable:
        todo = [c for c in as_cells(sel.cells) if (sample.id, *c.stored) not in done]
        if not todo:
            continue
        got, errors = masked_cells(images, sample, todo, seed)
        for where, reason in errors:
            skipped.append((sample.id, f"{where}: {reason}" if where else reason))
            log.warning("skipping %s %s: %s", sample.id, where or "", reason)
        for shift, level, img, truth in got:
            key = {"sample_id": sample.id, "class_name": sample.class_name}
            batch.append(({**key, "shift": shift, "level": level_key(level)}, img, truth))
            if len(batch) >= batch_size:
                flush()
    flush()
    return rows, skipped


def _record(model: SegmentationModel, sel: Selection, data: MaskedData, seed: int, skipped):
    """What :class:`SegmentationResult` reports about the run (besides the store's part)."""
    return {
        "model": model.describe(),
        "suite": sel.suite.name,
        "suite_version": sel.suite.version,
        "seed": int(seed),
        "protocol": sel.suite.protocol.describe(),
        "data": str(data.data),
        "masks": str(data.masks),
        "n_samples": len(sel.usable),
        "n_skipped": len(skipped),
    }


def evaluate_segmentation(
    model: SegmentationModel,
    data,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    done=None,
    sink=None,
    **options: Any,
) -> SegmentationResult:
    """Segment the clean images and every cell of a suite; score predicted foreground.

    Args:
        model: A :class:`SegmentationModel`.
        data: Source folder (ImageFolder tree, or flat plus labels CSV).
        batch_size: Images per forward pass.
        done: (sample_id, shift, level) keys to leave out (already stored: resume); a
            sample whose cells are all done is not even decoded.
        sink: Called with each batch's rows (a DataFrame with the ``counts`` columns) as
            soon as they are computed, so a store can persist them batch by batch.
        options: The fields of :class:`MaskedData` (``masks``, ``labels_csv``,
            ``limit``) and of :class:`MaskedCells` (``suite``, ``shifts``, ``levels``,
            ``seed``).

    Returns:
        :class:`SegmentationResult`; ``summary`` has one row per (shift, level), clean first
        (only the cells computed by this call when ``done`` is given).
    """
    from robustlab.metrics.segmentation import summarize

    parts = build_specs(
        "evaluate_segmentation",
        {"data": data, **options},
        {"data": MaskedData, "cells": MaskedCells, "tools": ToolSpec},
    )
    if int(batch_size) < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    sel = select(parts["data"], parts["cells"], parts["tools"])
    seed = parts["cells"].seed
    rows, skipped = _score(model, sel, seed, int(batch_size), done, sink)
    skipped = sel.skipped + skipped
    counts = pd.DataFrame(rows, columns=COUNT_COLUMNS)
    summary = summarize(counts) if len(counts) else pd.DataFrame(columns=SUMMARY_COLUMNS)
    record = _record(model, sel, parts["data"], seed, skipped)
    return SegmentationResult(counts, summary, skipped, record)


def _counts(pred: np.ndarray, truth: np.ndarray) -> tuple[int, int, int, int]:
    from robustlab.metrics.segmentation import binary_counts

    return binary_counts(pred, truth)


def segment_to_store(model: SegmentationModel, data, **options: Any) -> SegmentationResult:
    """:func:`evaluate_segmentation` with its per-image counts stored in the results database.

    The run gets a ``runs`` row like a classifier run (``config["task"] ==
    "segmentation"``) and one ``segmentation`` row per (image, cell). Its id hashes
    what decides the numbers: model name, weights hash, background class, suite and
    version, robustlab version, seed, protocol, and fingerprints of the images and of
    the masks (the masks are the truth). Rerunning the same command resumes: stored
    keys are skipped before any image is decoded, and batches are written as they finish
    (so an interrupted run keeps what it computed).

    Args:
        model: A :class:`SegmentationModel` loaded from a weights file (an untrained
            ``weights="random"`` network has no identity to resume under: ValueError).
        data: Source folder (ImageFolder tree, or flat plus labels CSV).
        options: The fields of the request's parts (:class:`SegmentRequest`): ``masks``,
            ``labels_csv``, ``limit``; ``suite``, ``shifts``, ``levels``, ``seed``;
            ``db``, ``batch_size`` (default 8), ``progress``.

    Returns:
        :class:`SegmentationResult` read back from the database for the requested cells
        (``counts`` of every stored image, not only the ones computed now); ``record``
        adds ``run_id``, ``db``, ``resumed`` and ``n_written``.
    """
    return run_segment(SegmentRequest.build(model, data, **options))


def run_segment(req: SegmentRequest) -> SegmentationResult:
    """Run a :class:`SegmentRequest` (what :func:`segment_to_store` and ``robustlab
    segment`` call)."""
    from robustlab.metrics.segmentation import cell_scores
    from robustlab.store import Store
    from robustlab.store.schema import SEGMENTATION_TASK

    model, seed = req.model, req.cells.seed
    sel = select(req.data, req.cells, req.tools)
    # By content (cached), not by size: a replaced photo or mask is another run.
    record = masked_record(
        SEGMENTATION_TASK,
        sel,
        req.data,
        seed,
        model={
            "model_spec": model.spec,
            "weights_hash": model.weights_hash,
            "background": model.background,
            "mean": list(model.mean),
            "std": list(model.std),
        },
        preprocessing={"mean": list(model.mean), "std": list(model.std)},
        config={"model": model.describe(), "background": model.background},
    )
    store = Store(req.run.db)
    done = store.segmentation_done_keys(record.run_id)
    lines = (len(sel.usable) * len(sel.cells), "segment", "row", len(done))
    run = StoredRun(store, record, store.write_segmentation, lines if req.run.progress else None)
    with run.running():
        batch_size = int(req.run.batch_size or DEFAULT_BATCH_SIZE)
        _, skipped = _score(model, sel, seed, batch_size, done, run.write)
    skipped = sel.skipped + skipped
    run.finish(len(sel.usable), [list(x) for x in skipped])
    counts = store.segmentation_counts([run.run_id])
    wanted = set(sel.keys)
    counts = counts[[(a, b) in wanted for a, b in zip(counts["shift"], counts["level"])]]
    counts = counts.drop(columns=["run_id"]).reset_index(drop=True)
    record_out = {**_record(model, sel, req.data, seed, skipped), **run.summary()}
    return SegmentationResult(counts, cell_scores(counts), skipped, record_out)


__all__ = [
    "segment_to_store",
    "run_segment",
    "SegmentRequest",
    "SegmentationModel",
    "SegmentationResult",
    "load_segmentation_model",
    "evaluate_segmentation",
]
