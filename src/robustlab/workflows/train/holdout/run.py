"""One surface-variation protocol as a stored, resumable run: train, test on the
in-distribution and the held-out images, store both tests' predictions."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.store.schema import HOLDOUT_SHIFT, HOLDOUT_SUITE
from robustlab.workflows.train.holdout.readers import LabelledSet
from robustlab.workflows.train.holdout.splits import HoldoutSplit
from robustlab.workflows.train.holdout.training import (
    MEAN,
    STD,
    EpochState,
    HoldoutConfig,
    predict,
    save_whole,
    train_network,
)

log = logging.getLogger(__name__)

SUITE = HOLDOUT_SUITE
SUITE_VERSION = "1"


@dataclass
class HoldoutResult:
    """One protocol's run.

    Attributes:
        run_id: The stored run.
        split: The :class:`HoldoutSplit`.
        seen_top1, held_top1: Accuracy on the in-distribution and the held-out test.
        n_seen, n_held: Their sizes.
        reused: The run was already stored (nothing was trained).
        checkpoint: The state dict (None when reused and not found).
        losses: Mean training loss per epoch.
    """

    run_id: str
    split: HoldoutSplit
    seen_top1: float
    held_top1: float
    n_seen: int
    n_held: int
    reused: bool = False
    checkpoint: Path | None = None
    losses: list[float] = field(default_factory=list)


def run_holdout(
    data: LabelledSet,
    split: HoldoutSplit,
    config: HoldoutConfig = HoldoutConfig(),
    *,
    db="robustlab.duckdb",
    out="checkpoints",
    progress: Callable[[int, float], None] | None = None,
    device: str | None = None,
) -> HoldoutResult:
    """Train on ``split.train``, test on ``split.seen`` and ``split.held``, store the run.

    A run with the same identity (data, split, config) already finished is reused. A
    training killed part-way resumes at its last finished epoch from the state file it
    keeps beside the checkpoint in ``out`` (removed when the run is stored), with the
    numbers an uninterrupted training gives.
    ``device`` (default: ``cuda`` when available, else ``cpu``) is where the network trains
    and predicts; like ``train``'s, it is recorded with the run but not part of its
    identity (the same batches and draws on every device, see :func:`train_network`).
    """
    from robustlab.models.devices import auto_device
    from robustlab.records.identity import run_id as hash_id
    from robustlab.store import CLEAN_LEVEL, CLEAN_SHIFT, Store

    device = auto_device(device)
    identity = run_identity(data, split, config)
    rid = hash_id(identity)
    store = Store(db)
    if store.exists():
        prev = store.get_run(rid)
        if prev is not None and prev.get("status") == "finished":
            return _result_from_store(store, rid, split)
    labels = _labels(data)
    log.info(
        "%s: training %s on %s on %d images, testing on %d seen and %d held-out images",
        split.label,
        config.arch,
        device,
        len(split.train),
        len(split.seen),
        len(split.held),
    )
    # Said before the first epoch: the folder (./checkpoints by default) is created where
    # the user may not expect it, and a killed training resumes from the state kept there.
    log.info(
        "checkpoint and training state go to %s (--out chooses the folder)", Path(out).resolve()
    )
    stem = Path(out) / f"holdout-{config.arch.replace(':', '_')}-{rid}"
    state = EpochState(stem.with_name(f"{stem.name}.training-state.pth"), rid)
    net, losses, timing = _train_timed(data, labels, split, config, progress, device, state)
    ckpt = _save_checkpoint(net, stem.with_name(f"{stem.name}.pth"))
    train = {**timing, "losses": losses, "checkpoint": str(ckpt)}
    store.start_run(_record(identity, data, split, config, ckpt, train))
    accs = {}
    for shift, level, rows in (
        (CLEAN_SHIFT, CLEAN_LEVEL, split.seen),
        (HOLDOUT_SHIFT, split.label, split.held),
    ):
        if rows:
            accs[shift] = _test(store, rid, net, data, labels, list(rows), shift, level, config)
    store.finish_run(
        rid, status="finished", n_samples=len(split.seen) + len(split.held), skipped=[]
    )
    state.path.unlink(missing_ok=True)
    return HoldoutResult(
        rid,
        split,
        accs.get(CLEAN_SHIFT, float("nan")),
        accs.get(HOLDOUT_SHIFT, float("nan")),
        len(split.seen),
        len(split.held),
        False,
        ckpt,
        losses,
    )


def run_identity(data: LabelledSet, split: HoldoutSplit, config: HoldoutConfig) -> dict[str, Any]:
    """Everything that decides a protocol run's predictions (its hash is the run id)."""
    identity = {
        "suite": SUITE,
        "version": SUITE_VERSION,
        "data": data.fingerprint,
        "split": split.fingerprint(data.meta),
        "split_spec": split.describe(),
        "config": asdict(config),
    }
    if config.network is not None:  # only the new architectures: old run ids stay as they were
        identity["network"] = config.network
    return identity


def _labels(data: LabelledSet) -> np.ndarray:
    """Class index of every row (classes in sorted order)."""
    index = {c: i for i, c in enumerate(data.classes)}
    return data.meta["class"].map(index).to_numpy()


def _train_timed(data, labels, split, config, progress, device, state):
    """The trained network, its losses, and where and how long it trained (recorded with
    the run; a resumed training's times are those of its last part)."""
    rows = list(split.train)
    started, cpu_started = time.perf_counter(), time.process_time()
    load_before = _loadavg()
    net, losses = train_network(
        data.load(rows, config.image_size),
        labels[rows],
        len(data.classes),
        config,
        progress,
        device=device,
        state=state,
    )
    timing = {
        "device": device,
        "resumed_from_epoch": state.resumed_from,
        "train_seconds": round(time.perf_counter() - started, 1),
        "train_cpu_seconds": round(time.process_time() - cpu_started, 1),
        "loadavg": [load_before, _loadavg()],
        "parameters": sum(int(t.numel()) for t in net.parameters()),
    }
    return net, losses, timing


def _save_checkpoint(net, ckpt: Path) -> Path:
    """The network's state dict at ``ckpt`` (written whole or not at all)."""
    state = {k: v.detach().cpu() for k, v in net.state_dict().items()}
    save_whole(state, ckpt, what="checkpoint")
    return ckpt


def _record(identity, data: LabelledSet, split: HoldoutSplit, config, ckpt: Path, train):
    """The run's stored record, through :func:`robustlab.records.identity.make_record`."""
    from robustlab.models.weights import weights_hash
    from robustlab.records.identity import RecordStyle, make_record
    from robustlab.store import CLEAN_LEVEL, CLEAN_SHIFT

    network = {"network": config.network} if config.network is not None else {}
    return make_record(
        identity,
        data_root=data.root,
        n_samples=0,  # counted when the run finishes
        style=RecordStyle(resolve_root=False),  # holdout runs store the folder as read
        model_spec=f"holdout:{config.arch}",
        weights_hash=weights_hash(ckpt),
        suite_version=SUITE_VERSION,
        data_fingerprint=identity["data"],  # hashed once, for the identity
        label_space=None,
        preprocessing={
            "input_size": config.image_size,
            "mean": [MEAN] * 3,
            "std": [STD] * 3,
            "resize": "bicubic",
        },
        seed=int(split.seed),
        config={
            "holdout": split.describe(),
            "data_layout": data.name,
            "classes": data.classes,
            "train": {**asdict(config), **network, **train},
            "cells": [[CLEAN_SHIFT, CLEAN_LEVEL], [HOLDOUT_SHIFT, split.label]],
        },
    )


def _test(store, rid, net, data, labels, rows, shift, level, config) -> float:
    """Predict ``rows``, store them as cell (``shift``, ``level``); their top-1 accuracy."""
    probs = predict(net, data.load(rows, config.image_size))
    k = min(5, probs.shape[1])
    top = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    y = labels[rows]
    correct = top[:, 0] == y
    store.write_predictions(
        rid,
        {
            "sample_id": data.meta["id"].to_numpy()[rows].tolist(),
            "shift": [shift] * len(rows),
            "level": [level] * len(rows),
            "label": y.tolist(),
            "class_name": data.meta["class"].to_numpy()[rows].tolist(),
            "top5_ids": top,
            "top5_probs": np.take_along_axis(probs, top, 1),
            "correct": correct,
            "correct5": (top == y[:, None]).any(1),
        },
    )
    return float(correct.mean())


def _loadavg() -> float | None:
    """The 1-minute load average (Linux), recorded beside training times."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _result_from_store(store, rid: str, split: HoldoutSplit) -> HoldoutResult:
    from robustlab.store import CLEAN_SHIFT

    preds = store.predictions([rid])
    acc = preds.groupby("shift")["correct"].agg(["mean", "size"])

    def get(shift, col):
        return float(acc.loc[shift, col]) if shift in acc.index else float("nan")

    rec = store.get_run(rid)
    train = (rec.get("config") or {}).get("train", {})
    ckpt = Path(train["checkpoint"]) if train.get("checkpoint") else None
    return HoldoutResult(
        rid,
        split,
        get(CLEAN_SHIFT, "mean"),
        get(HOLDOUT_SHIFT, "mean"),
        int(get(CLEAN_SHIFT, "size") if CLEAN_SHIFT in acc.index else 0),
        int(get(HOLDOUT_SHIFT, "size") if HOLDOUT_SHIFT in acc.index else 0),
        True,
        ckpt,
        list(train.get("losses", [])),
    )
