"""``robustlab saliency``: where a model looks, on the clean images and the scenario cells.

XIMAGENET-12 (its Figure 4) shows saliency maps of ResNet-50 and VGG-16 and concludes that
models with more robust backbones look at the object, not at the background. This runs a
saliency method (:mod:`robustlab.saliency.attribution`) on each clean image and each
scenario cell of a mask suite (the same pixels ``evaluate`` and ``generate`` make, through
:class:`robustlab.run.tasks.CellImages`), compares the map with the cell's object mask
(:mod:`robustlab.saliency.metrics`) and stores one row per image and cell in the results
database, with the model's prediction, so the same rows give the accuracies of the
robustness score and the BG-gap (:mod:`robustlab.saliency.analysis`).

The mask of a cell is the object where the scenario left it (``random_bg`` moves it: its
placement is replayed; ``no_fg`` and the ``only_bg`` cells remove it, so they are skipped
and counted), the rule :func:`robustlab.workflows.segment.target_mask` keeps for
segmentation scoring. The mask goes through the model's own resize and crop, so map and
mask meet on the model's input pixels.

Work is batched (a forward and a backward pass per batch of cells), images are decoded and
shifted by ``workers`` processes ahead of the model, batches are written as they finish,
and a rerun of the same command resumes: stored (sample, shift, level) keys are skipped
before any image is decoded.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd

from robustlab.errors import InputError, MissingResourceError
from robustlab.store.schema import CLEAN_SHIFT, SALIENCY_MAP_SIDE, SALIENCY_TASK

if TYPE_CHECKING:
    from robustlab.run.tasks import TaskDataset

log = logging.getLogger(__name__)

TARGETS = ("predicted", "label")


def input_mask(mask: np.ndarray, preprocessing) -> np.ndarray:
    """An HxW bool mask through the model's resize and crop (bilinear, then >= half):
    the mask of the pixels the model sees."""
    prep = dataclasses.replace(preprocessing, interpolation="bilinear")
    m = np.repeat(np.asarray(mask, bool)[..., None].astype(np.uint8) * 255, 3, axis=2)
    return prep.resize_crop(m)[..., 0] >= 128


def thumbnail(saliency_map: np.ndarray, side: int = SALIENCY_MAP_SIDE) -> bytes:
    """The map's positive part at ``side`` x ``side``, uint8 scaled to its maximum."""
    import cv2

    pos = np.clip(np.asarray(saliency_map, np.float32), 0, None)
    small = cv2.resize(pos, (side, side), interpolation=cv2.INTER_AREA)
    peak = float(small.max())
    scaled = small / peak * 255.0 if peak > 0 else small
    return np.round(scaled).astype(np.uint8).tobytes()


def read_thumbnail(data: bytes, side: int = SALIENCY_MAP_SIDE) -> np.ndarray:
    return np.frombuffer(bytes(data), np.uint8).reshape(side, side)


class SaliencyDataset:
    """Map-style dataset for :func:`robustlab.run.executors.iterate_local`: item ``i`` is
    ``(i, uint8 K x 3 x H x W model inputs, K x H x W masks, [(shift, level)], errors)``
    for the cells of sample ``i`` still to do. Unreadable images and failing cells come
    back as reasons, never as exceptions."""

    def __init__(self, samples, todo, images, preprocessing, seed: int):
        self.samples, self.todo, self.images = samples, todo, images
        self.preprocessing, self.seed = preprocessing, int(seed)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        import torch

        from robustlab.data.images import ImageError
        from robustlab.workflows.segment import target_mask

        sample = self.samples[i]
        try:
            base = self.images.base(sample)
            if base.mask is None:
                raise ImageError("no mask for this sample")
        except ImageError as exc:
            return i, None, None, [], [("", exc.reason)]
        except (OSError, ValueError) as exc:
            return i, None, None, [], [("", f"unreadable: {exc}")]
        inputs, masks, cells, errors = [], [], [], []
        for shift, level in self.todo[i]:
            try:
                truth = target_mask(sample, base, shift, level, self.seed)
                if truth is None:
                    continue
                img = self.images.cell(sample, base, shift, level)
            except (ValueError, ImageError, OSError) as exc:
                errors.append((f"{shift}/{level}", getattr(exc, "reason", None) or str(exc)))
                continue
            inputs.append(self.preprocessing.to_uint8(img))
            masks.append(torch.from_numpy(input_mask(truth, self.preprocessing)))
            cells.append((shift, str(level)))
        if not inputs:
            return i, None, None, cells, errors
        return i, torch.stack(inputs), torch.stack(masks), cells, errors


@dataclass
class SaliencyResult:
    """Per-image rows (read back from the database), per-cell summary, skipped, record."""

    rows: pd.DataFrame
    summary: pd.DataFrame
    skipped: list[tuple[str, str]]
    record: dict


def _targets(model, pred_cols, labels, target: str):
    """Output columns of the network to explain, per image."""
    import torch

    if target == "predicted":
        cols = torch.as_tensor(pred_cols).long()
    else:
        if model.head == "mapping":
            raise InputError(
                f"--target label needs one output per class; label space "
                f"{model.label_space.name!r} maps a class to several ImageNet classes",
                hint="use --target predicted",
            )
        cols = torch.as_tensor(labels).long()
    if model._columns is not None:  # subset head: a label-space index -> network column
        cols = model._columns.cpu()[cols]
    return cols


def saliency(
    model,
    data,
    *,
    masks,
    suite="ximagenet12",
    shifts=None,
    levels=None,
    method: str = "gradcam",
    target_layer: str | None = None,
    target: str = "predicted",
    db="robustlab.duckdb",
    seed: int = 0,
    labels_csv=None,
    label_space=None,
    weights=None,
    device=None,
    batch_size: int | None = None,
    workers: int | None = None,
    limit: int | None = None,
    progress: bool = False,
) -> SaliencyResult:
    """Saliency maps of ``model`` on the clean images and scenario cells, stored as a run.

    Args:
        model: A model spec (``lite0``, ``timm:resnet50``, ``torchvision:vgg16``...) or a
            loaded torch :class:`robustlab.models.base.Model`.
        data: Source folder (ImageFolder tree, or flat plus labels CSV).
        masks: Folder of foreground masks parallel to ``data`` (images without one are
            skipped, counted).
        suite, shifts, levels: Which scenario cells (``ximagenet12``, ``imagenet9``); no
            shifts of a suite: all its mask scenarios. ``shifts=["clean"]``: clean only.
        method: A key of :data:`robustlab.saliency.attribution.METHODS`.
        target_layer: Module name for CAM methods (default: found, and recorded).
        target: ``"predicted"`` (explain the model's top-1 class) or ``"label"``.
        db: The results database.
        seed: Global seed of the seed rule (the cells ``evaluate`` sees).
        labels_csv, label_space, weights, device: As for ``robustlab evaluate``.
        batch_size: Cells per forward/backward pass (default: the model's).
        workers: Processes that decode and shift ahead of the model (default: cores - 1;
            0: in this process).
        limit: Only the first ``limit`` samples with masks (sorted by id).
        progress: A line every few seconds on stderr.

    Returns:
        :class:`SaliencyResult`; ``record`` holds ``run_id``, ``db``, ``resumed``,
        ``n_written``, the method and its layer.
    """
    import torch

    from robustlab import __version__
    from robustlab.data.sources import discover
    from robustlab.run.lifeline import default_workers
    from robustlab.workflows.evaluate.labels import labels_for
    from robustlab.models import load_model
    from robustlab.run.executors import iterate_local
    from robustlab.run.identity import make_record, masked_fingerprints
    from robustlab.workflows.segment import target_rule
    from robustlab.run.tasks import CellImages
    from robustlab.saliency.attribution import (
        METHODS,
        Attributor,
        find_target_layer,
        require_library,
    )
    from robustlab.saliency.metrics import foreground_metrics
    from robustlab.shifts.registry import available_shifts, get_shift
    from robustlab.store import Store
    from robustlab.suites import get_suite

    require_library(method)
    if target not in TARGETS:
        raise InputError(f"target must be one of {', '.join(TARGETS)}, not {target!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    if masks is None:
        raise InputError("saliency needs foreground masks; pass --masks DIR")
    root = Path(data).expanduser()
    if not root.is_dir():
        raise MissingResourceError(f"data folder {root} does not exist")
    mask_root = Path(masks).expanduser()
    if not mask_root.is_dir():
        raise MissingResourceError(f"masks folder {mask_root} does not exist")
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    s = get_suite(str(suite)) if isinstance(suite, (str, Path)) else suite
    names = list(shifts) if shifts else list(s.shifts)
    clean_only = names == [CLEAN_SHIFT]
    if not clean_only:
        names = [n for n in names if n != CLEAN_SHIFT]
        unknown = [n for n in names if n not in s.shifts]
        if unknown:
            raise InputError(
                f"{unknown[0]!r} is not a scenario of suite {s.name!r}",
                hint=f"use one of: {', '.join(s.shifts)}",
            )
        s = s.select(available_shifts(names, log=log), list(levels) if levels else None).suite
    cells = [(CLEAN_SHIFT, "0")]
    if not clean_only:
        cells += [(sh, str(lv)) for sh, lv in s.cells()]
    gone = sorted({sh for sh, _ in cells if target_rule(sh) is None})
    Store(db).check()  # a damaged database fails now, not after the model has loaded
    if isinstance(model, str):
        model = load_model(model, weights=weights, device=device, label_space=label_space)
    net = getattr(model, "module", None)
    if net is None:
        raise InputError(
            f"{model.spec} is not a torch model ({model.adapter} adapter): saliency needs "
            "gradients through the network",
            hint="use the torch spec of the model (lite0, timm:NAME, torchvision:NAME)",
        )
    samples = discover(root, labels_csv=labels_csv, masks=mask_root)
    skipped: list[tuple[str, str]] = [tuple(x) for x in getattr(samples, "skipped", [])]
    skipped += [(x.id, "no mask in the masks folder") for x in samples if x.mask_path is None]
    usable = [x for x in samples if x.mask_path is not None]
    if limit is not None:
        usable = usable[: int(limit)]
    if not usable:
        raise InputError(f"no images with masks in {root}", hint="check --masks")
    labels = labels_for(usable, model.label_space)
    layer = None
    if METHODS[method][2]:
        layer = find_target_layer(net, model.preprocessing.hw, target_layer)
    elif target_layer is not None:
        raise InputError(f"{method} works on the input pixels; it takes no --target-layer")
    attributor = Attributor(net, method, layer)
    fingerprint, mask_fingerprint = masked_fingerprints(usable)
    protocol = s.protocol.describe()
    explained = attributor.describe()
    identity = {
        "task": SALIENCY_TASK,
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "label_space": model.label_space.name,
        "preprocessing": model.preprocessing.describe(),
        "saliency": {k: v for k, v in explained.items() if k != "version"},
        "target": target,
        "suite": s.name,
        "suite_version": s.version,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "mask_fingerprint": mask_fingerprint,
        "seed": int(seed),
        "protocol": protocol,
    }
    record = make_record(
        identity,
        data_root=root,
        preprocessing={"model": model.preprocessing.describe(), "protocol": protocol},
        extra_versions={explained["library"]: explained["version"]},
        config={
            "task": SALIENCY_TASK,
            "source": "on-the-fly",
            "masks": str(mask_root.resolve()),
            "mask_fingerprint": mask_fingerprint,
            "labels_csv": str(labels_csv) if labels_csv else None,
            "saliency": explained,
            "target": target,
            "cells": [list(c) for c in cells],
            "removed_object": gone,
            "limit": limit,
            "model": {"spec": model.spec, "device": str(model.device)},
        },
        n_samples=len(usable),
    )
    rid = record.run_id
    store = Store(db)
    done = store.saliency_done_keys(rid)
    todo = [
        [(sh, lv) for sh, lv in cells if (x.id, sh, lv) not in done and sh not in gone]
        for x in usable
    ]
    keep = [i for i, t in enumerate(todo) if t]
    needs_donors = any(get_shift(n).extra.get("donor_rule") for n, _ in cells if n != CLEAN_SHIFT)
    images = CellImages(
        s.protocol, seed, donors=list(samples) if needs_donors else None, with_mask=True
    )
    dataset = SaliencyDataset(
        [usable[i] for i in keep], [todo[i] for i in keep], images, model.preprocessing, seed
    )
    sub_labels = [labels[i] for i in keep]
    bs = int(batch_size or model.batch_size)
    n_workers = default_workers() if workers is None else int(workers)
    resumed = not store.start_run(record)
    written = [0]
    lines = None
    if progress:
        from robustlab.run.progress import LineProgress

        lines = LineProgress(
            sum(len(todo[i]) for i in keep), what=f"saliency {model.spec}", unit="cell"
        )
    pending: list[tuple[dict, Any, Any]] = []

    def flush():
        if not pending:
            return
        x = torch.stack([p[1] for p in pending])
        m = torch.stack([p[2] for p in pending]).numpy()
        lab = [p[0]["label"] for p in pending]
        probs, ids = model.predict_topk(x, k=1)
        top1, _ = model.correct(ids, lab)
        xf = model.preprocessing.normalize(x.to(model.input_device()))
        maps = attributor(xf, _targets(model, ids[:, 0], lab, target))
        nums = foreground_metrics(maps, m)
        rows = []
        for j, (meta, _, _) in enumerate(pending):
            rows.append(
                {
                    **meta,
                    "pred": int(ids[j, 0]),
                    "target": int(_targets(model, ids[j : j + 1, 0], [lab[j]], target)[0]),
                    "correct": bool(top1[j]),
                    **{k: float(v[j]) for k, v in nums.items()},
                    "map": thumbnail(maps[j]),
                }
            )
        pending.clear()
        written[0] += store.write_saliency(rid, pd.DataFrame(rows))
        if lines is not None:
            lines.update(len(rows))

    try:
        # iterate_local takes any map-style dataset (it is typed for the runner's own).
        loader = iterate_local(cast("TaskDataset", dataset), workers=n_workers)
        for i, inputs, mks, got, errors in loader:
            sample = dataset.samples[i]
            for where, reason in errors:
                skipped.append((sample.id, f"{where}: {reason}" if where else reason))
            if inputs is None:
                continue
            for k, (sh, lv) in enumerate(got):
                meta = {
                    "sample_id": sample.id,
                    "shift": sh,
                    "level": lv,
                    "class_name": sample.class_name,
                    "label": int(sub_labels[i]),
                }
                pending.append((meta, inputs[k], mks[k]))
                if len(pending) >= bs:
                    flush()
        flush()
    except KeyboardInterrupt:
        store.finish_run(rid, status="interrupted")
        raise
    except BaseException:
        store.finish_run(rid, status="failed")
        raise
    finally:
        attributor.close()
        if lines is not None:
            lines.close()
    store.finish_run(rid, status="finished", n_samples=len(usable), skipped=skipped)
    from robustlab.saliency.analysis import cell_summary

    rows = store.saliency([rid])
    summary = cell_summary(rows, np.random.default_rng(int(seed)))
    out = {
        "run_id": rid,
        "db": str(store.path),
        "resumed": resumed,
        "n_written": written[0],
        "n_samples": len(usable),
        "saliency": explained,
        "removed_object": gone,
    }
    return SaliencyResult(rows, summary, skipped, out)


__all__ = ["saliency", "SaliencyResult", "input_mask", "thumbnail", "read_thumbnail", "TARGETS"]
