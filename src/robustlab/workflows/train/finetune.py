"""Fine-tune a classifier on one scenario's training images: linear probe or full.

The XIMAGENET-12 protocols train models on original or scenario images (EX1, EX2). Budgets
here are small and explicit (a number of optimiser steps), so a protocol runs on a CPU and
scales to a GPU unchanged.

- ``linear``: only the classifier layer learns. The frozen backbone's pooled features are
  computed once per training image (a few kilobytes each, never the images), then the
  head trains on them: cheap enough for CPUs. Needs a timm-style network
  (``forward_features``/``forward_head``/``get_classifier``), as ``lite0``-``lite2`` and
  ``timm:`` models are.
- ``full``: every weight learns, images are decoded and shifted on the fly each step.
  Batch-norm statistics stay frozen (their running means are kept): with the small batches
  these budgets allow, re-estimating them would hurt more than help.

Training images are made by the same :class:`robustlab.execution.tasks.CellImages` the
evaluation uses, so "trained on blur_bg" means the very pixels ``robustlab generate``
writes for blur_bg. Batches are drawn by a ``torch.Generator`` seeded from the config, and
dropout runs under a forked, seeded global RNG: the same config gives the same weights on
one machine and leaves the caller's random state alone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.cells import cells_record
from robustlab.errors import InputError

log = logging.getLogger(__name__)

MODES = ("linear", "full")
DEFAULT_LR = {"linear": 1e-3, "full": 1e-4}


@dataclass(frozen=True)
class TrainConfig:
    """How to fine-tune (all of it is recorded with the checkpoint and the runs).

    Attributes:
        mode: ``"linear"`` (classifier layer only) or ``"full"``.
        steps: Optimiser steps (AdamW).
        batch_size: Images per step.
        lr: Learning rate (default 1e-3 linear, 1e-4 full).
        weight_decay: AdamW weight decay.
        seed: Seed of batch order, augmentation and dropout.
        hflip: Random horizontal flips (full mode; the linear probe trains on fixed features).
    """

    mode: str = "linear"
    steps: int = 100
    batch_size: int = 16
    lr: float | None = None
    weight_decay: float = 0.0
    seed: int = 0
    hflip: bool = True

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"training mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if int(self.steps) < 1 or int(self.batch_size) < 1:
            raise InputError(
                f"steps and batch size must be at least 1, got {self.steps} and {self.batch_size}"
            )
        if self.lr is not None and not float(self.lr) > 0:
            raise InputError(f"learning rate must be positive, got {self.lr}")

    @property
    def learning_rate(self) -> float:
        return float(self.lr) if self.lr is not None else DEFAULT_LR[self.mode]

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "lr": self.learning_rate, "optimizer": "AdamW"}


@dataclass
class TrainResult:
    """What a fine-tuning produced.

    Attributes:
        checkpoint: The state-dict file (the base model's own parameter names, so
            ``load_model(base_spec, weights=checkpoint)`` loads it).
        losses: Training loss per step.
        record: JSON-able record (also written next to the checkpoint as ``.json``).
        reused: True when an identical earlier training's checkpoint was reused.
    """

    checkpoint: Path
    losses: list[float]
    record: dict[str, Any] = field(default_factory=dict)
    reused: bool = False


def _output_columns(model):
    """Logit columns that correspond to the label space (None: all of them)."""
    head = getattr(model, "head", "direct")
    if head == "direct":
        return None
    if head == "subset":
        import torch

        return torch.tensor(model.label_space.subset_ids, dtype=torch.long)
    raise InputError(
        f"cannot fine-tune on label space {model.label_space.name!r}: a class that "
        "stands for several ImageNet classes has no single training target; "
        "use imagenet1k or a subset space"
    )


def _network(model):
    net = getattr(model, "module", None)
    if net is None:
        raise InputError(f"{model.spec} is not a torch model; only torch models can be fine-tuned")
    return net


def _item_tensors(model, samples, images, items, cache: dict):
    """Tensors of (sample index, shift, level) items; decoded sources cached per sample."""
    import torch

    out = []
    for i, shift, level in items:
        s = samples[i]
        if i not in cache:
            cache.clear()  # keep only the current source: memory stays flat
            cache[i] = images.base(s)
        img = images.cell(s, cache[i], shift, level)
        out.append(model.transform(img, crop=False))
    return torch.stack(out)


def _batches(n: int, batch: int, steps: int, gen):
    """``steps`` index batches: shuffled epochs, concatenated (every image seen equally)."""
    import torch

    order = torch.empty(0, dtype=torch.long)
    for _ in range(steps):
        while len(order) < batch:
            order = torch.cat([order, torch.randperm(n, generator=gen)])
        yield order[:batch]
        order = order[batch:]


def _loss(logits, labels, columns):
    import torch

    if columns is not None:
        logits = logits.index_select(1, columns.to(logits.device))
    return torch.nn.functional.cross_entropy(logits, labels)


class PlainTraining:
    """Plain fine-tuning as a training method: cross-entropy on the cells' own images.

    It has the interface of :mod:`robustlab.workflows.train.methods`' method objects, so one loop
    runs every method. Its images are the same at every step (``fixed_images``), which
    lets the linear probe compute the frozen backbone's features once instead of per step.
    """

    name = "plain"
    fixed_images = True

    def items(self, items, *, step: int, samples, seed: int):
        """The step's items, unchanged."""
        return items

    def loss(self, forward, x, labels, columns, gen, preprocessing):
        """Cross-entropy over the label space's logit columns."""
        return _loss(forward(x), labels, columns)


class _LinearProbe:
    """``linear`` mode: the frozen backbone gives features, only the classifier learns."""

    def __init__(self, model, net, device) -> None:
        if not all(hasattr(net, a) for a in ("forward_features", "forward_head", "get_classifier")):
            raise InputError(
                f"{model.spec}: the linear probe needs a timm-style network "
                "(forward_features/forward_head/get_classifier); use mode 'full'"
            )
        self.net, self.device, self.head = net, device, net.get_classifier()
        net.eval()

    def features(self, x):
        """Pooled backbone features of a batch of model inputs (no gradient)."""
        import torch

        with torch.no_grad():
            return self.net.forward_head(
                self.net.forward_features(x.to(self.device)), pre_logits=True
            )

    def forward(self, x):
        return self.head(self.features(x))

    def start(self) -> list:
        """Freeze the backbone, put the head in training mode; returns the trained weights."""
        params = list(self.head.parameters())
        for p in self.net.parameters():
            p.requires_grad_(False)
        for p in params:
            p.requires_grad_(True)
        self.head.train()
        return params


class _FullTraining:
    """``full`` mode: every weight learns; batch-norm statistics stay frozen (module doc)."""

    def __init__(self, net, device) -> None:
        self.net, self.device = net, device

    def forward(self, x):
        return self.net(x.to(self.device))

    def start(self) -> list:
        """Unfreeze every weight, training mode except batch norm; returns the weights."""
        import torch

        params = list(self.net.parameters())
        for p in params:
            p.requires_grad_(True)
        self.net.train()
        for m in self.net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.eval()
        return params


def _probe_features(trainer, model, samples, images, items, chunk: int, cache: dict):
    """Features of every training item, once (on the CPU, in item order)."""
    import torch

    feats = []
    for k in range(0, len(items), chunk):
        x = _item_tensors(model, samples, images, items[k : k + chunk], cache)
        feats.append(trainer.features(x).float().cpu())
    return torch.cat(feats)


def finetune(
    model,
    samples: Sequence,
    labels: Sequence[int],
    cells: Sequence[tuple[str, Any]],
    images,
    config: TrainConfig,
    checkpoint: str | Path,
    *,
    extra_record: dict | None = None,
    progress=None,
    method=None,
) -> TrainResult:
    """Fine-tune ``model`` in place on every (sample, cell) pair and save a checkpoint.

    Args:
        model: A loaded torch :class:`robustlab.models.Model` (its network is changed).
        samples: Training samples; ``labels`` their label-space indices.
        cells: Training cells, e.g. ``[("clean", 0)]`` or ``[("blur_bg", "default")]``.
        images: A :class:`robustlab.execution.tasks.CellImages` (protocol, seed, masks, donors).
        config: :class:`TrainConfig`.
        checkpoint: Where the state dict goes (``.pth``); a ``.json`` record goes beside it.
        extra_record: More provenance to store in the record (split, data, base model).
        progress: Optional callable ``(step, loss)``.
        method: A training method (:mod:`robustlab.workflows.train.methods`: stability training,
            corruption augmentation) that decides each step's images and loss; None trains
            with cross-entropy on the cells' images (:class:`PlainTraining`). Recorded as
            ``record["method"]``, with how many images of each shift it drew.

    Raises:
        InputError: no training images, a label space without single targets, or a
            network the linear probe cannot split into features and head.
    """
    import torch

    net = _network(model)
    columns = _output_columns(model)
    items = [(i, shift, level) for i in range(len(samples)) for shift, level in cells]
    if not items:
        raise InputError("no training images")
    y_all = torch.as_tensor(np.asarray(labels, dtype=np.int64))
    device = getattr(model, "device", "cpu")
    gen = torch.Generator().manual_seed(int(config.seed))
    started = time.perf_counter()
    item_labels = torch.stack([y_all[i] for i, _, _ in items])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(config.seed))
        losses, drawn = _train(
            model,
            method or PlainTraining(),
            samples,
            images,
            items,
            item_labels,
            config,
            gen,
            columns,
            device,
            progress,
        )
    net.eval()
    for p in net.parameters():
        p.requires_grad_(False)
    seconds = time.perf_counter() - started
    record = {
        "base_model": model.spec,
        "base_weights_hash": model.weights_hash,
        "label_space": model.label_space.name,
        "config": config.describe(),
        "cells": cells_record(cells),
        "n_train_images": len(samples),
        "n_train_items": len(items),
        "losses": losses,
        "seconds": round(seconds, 3),
        "device": str(device),
    }
    extra = {
        **({"method": {**method.describe(), "drawn": drawn}} if method is not None else {}),
        **(extra_record or {}),
    }
    ckpt, record = _save(net, Path(checkpoint), record, extra)
    return TrainResult(ckpt, losses, record)


def _save(net, ckpt: Path, record: dict, extra: dict) -> tuple[Path, dict]:
    """The state dict at ``ckpt`` (written whole or not at all) and the training record
    beside it (``.json``: ``record``, the checkpoint and its hash, then ``extra``)."""
    import torch

    from robustlab.models.weights import weights_hash

    from robustlab.files.atomic import atomic_path

    state = {k: v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    with atomic_path(ckpt) as tmp:
        torch.save(state, tmp)
    record = {**record, "checkpoint": str(ckpt), "weights_hash": weights_hash(ckpt), **extra}
    ckpt.with_suffix(".json").write_text(json.dumps(record, indent=1, default=str))
    return ckpt, record


def _train(
    model, method, samples, images, items, item_labels, config, gen, columns, device, progress
) -> tuple[list[float], dict[str, int]]:
    """Run ``config.steps`` optimiser steps of ``method``: the one training loop.

    Each step takes the next index batch of :func:`_batches`, lets the method choose the
    batch's images (``method.items``), makes them (random flips in ``full`` mode when
    ``config.hflip``) and minimises the method's loss. In ``linear`` mode the frozen
    backbone runs on each step's images, except for a method with ``fixed_images``
    (plain fine-tuning), whose features are computed once and reused every step.

    Returns:
        The loss per step, and how many training images each shift made (``clean``
        included): what the method actually drew, for the training record.
    """
    import torch

    net = _network(model)
    linear = config.mode == "linear"
    trainer = _LinearProbe(model, net, device) if linear else _FullTraining(net, device)
    cache: dict = {}
    drawn: dict[str, int] = {}
    forward = trainer.forward
    if linear and getattr(method, "fixed_images", False):
        feats = _probe_features(
            trainer, model, samples, images, items, max(1, int(config.batch_size)), cache
        )
        forward = trainer.head

        def inputs(step, idx):
            return feats[idx].to(device)

    else:

        def inputs(step, idx):
            batch = method.items(
                [items[j] for j in idx.tolist()], step=step, samples=samples, seed=int(config.seed)
            )
            for _, shift, _ in batch:
                drawn[shift] = drawn.get(shift, 0) + 1
            x = _item_tensors(model, samples, images, batch, cache)
            if not linear and config.hflip:
                flip = torch.rand(len(x), generator=gen) < 0.5
                x[flip] = x[flip].flip(-1)
            return x

    params = trainer.start()
    opt = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    losses: list[float] = []
    for step, idx in enumerate(_batches(len(items), config.batch_size, config.steps, gen)):
        x = inputs(step, idx)
        loss = method.loss(
            forward, x, item_labels[idx].to(device), columns, gen, model.preprocessing
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if progress:
            progress(step + 1, losses[-1])
    return losses, dict(sorted(drawn.items()))


__all__ = ["MODES", "PlainTraining", "TrainConfig", "TrainResult", "finetune"]
