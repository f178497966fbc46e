"""``robustlab holdout`` as a workflow: read a labelled set, make one protocol's split, train
and test (:func:`~robustlab.workflows.train.holdout.run.run_holdout`), store the run.

The request is three frozen specs beside the training's :class:`HoldoutConfig` (whose seed
also draws the split): :class:`HoldoutData` (which images), :class:`HoldoutProtocol` (what
is held out) and :class:`HoldoutOutputs` (where the run and the checkpoint go). The command
builds them from its flags and prints the result; :func:`holdout` (``robustlab.holdout``)
routes its keywords to them by the one rule of :mod:`robustlab.workflows.keywords`.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from robustlab.errors import InputError
from robustlab.store.connection import DEFAULT_DB
from robustlab.workflows.train.holdout.readers import read_set
from robustlab.workflows.train.holdout.run import HoldoutResult, run_holdout
from robustlab.workflows.train.holdout.splits import make_split
from robustlab.workflows.train.holdout.training import HoldoutConfig
from robustlab.workflows.keywords import as_names


@dataclass(frozen=True)
class HoldoutData:
    """Which images: ``data`` (a folder with metadata.csv, Icons-50.npy or CIFAR-100's
    pickles), how to read it (``layout``: auto, folder, icons50, cifar100), its metadata
    CSV (default ``DATA/metadata.csv``) and the ``classes`` to keep (default: all)."""

    data: str | Path
    layout: str = "auto"
    metadata: str | Path | None = None
    classes: tuple[str, ...] | None = None

    def __post_init__(self):
        object.__setattr__(self, "classes", as_names(self.classes))


@dataclass(frozen=True)
class HoldoutProtocol:
    """What is held out: exactly one of ``holdout`` (``COLUMN=VALUE``, e.g.
    ``style=openmoji``), ``holdout_subtypes`` (N per class, seeded, or the subtypes named)
    and ``holdout_versions`` (the control); ``test_fraction`` of each class's training pool
    is the in-distribution test when the set has no split of its own."""

    holdout: str | None = None
    holdout_subtypes: int | tuple[str, ...] | None = None
    holdout_versions: bool = False
    test_fraction: float = 0.1

    def __post_init__(self):
        if self.holdout_subtypes is not None and not isinstance(self.holdout_subtypes, int):
            object.__setattr__(self, "holdout_subtypes", as_names(self.holdout_subtypes))


@dataclass(frozen=True)
class HoldoutOutputs:
    """Where the run goes (``db``) and its checkpoint (``out``), the device it trains on
    (recorded, not identity) and whether each epoch's loss is printed on stderr."""

    db: str | Path = DEFAULT_DB
    out: str | Path = "checkpoints"
    device: str | None = None
    progress: bool = True


PARTS = {
    "data": HoldoutData,
    "protocol": HoldoutProtocol,
    "config": HoldoutConfig,
    "outputs": HoldoutOutputs,
}


@dataclass
class HoldoutRun:
    """What :func:`run_protocol` did: the stored run (:class:`HoldoutResult`: run id, split,
    both tests' top-1 and sizes, reused, checkpoint, losses), the classes it trained on and
    the database."""

    result: HoldoutResult
    classes: list[str] = field(default_factory=list)
    db: str = DEFAULT_DB


def holdout(data, **options) -> HoldoutRun:
    """Train a small network with a style, subtypes or versions held out, test it on what
    was held out and on a seeded in-distribution share, and store the run
    (``robustlab holdout``).

    Args:
        data: The labelled set (:class:`HoldoutData`).
        **options: The fields of :class:`HoldoutData`, :class:`HoldoutProtocol`,
            :class:`~robustlab.workflows.train.holdout.training.HoldoutConfig` (``arch``,
            ``width``, ``epochs``, ``seed``, ...) and :class:`HoldoutOutputs`.

    Raises:
        TypeError: an unknown keyword (the message names the closest).
        InputError: no protocol or several, an unknown class or value (one line).
    """
    from robustlab.workflows.keywords import build_specs

    specs = build_specs("holdout", {**options, "data": data}, PARTS)
    return run_protocol(**specs)


def run_protocol(
    data: HoldoutData,
    protocol: HoldoutProtocol,
    config: HoldoutConfig,
    outputs: HoldoutOutputs,
) -> HoldoutRun:
    """Read the set, split it, train, test and store (what ``robustlab holdout`` calls)."""
    from robustlab.store import Store

    Store(outputs.db).check()
    labelled = read_set(data.data, layout=data.layout, metadata=data.metadata)
    if data.classes:
        unknown = sorted(set(data.classes) - set(labelled.meta["class"]))
        if unknown:
            raise InputError(f"no class {unknown[0]!r} in {data.data}")
        keep = labelled.meta["class"].isin(list(data.classes))
        labelled.meta = labelled.meta[keep].reset_index(drop=True)
    subtypes = protocol.holdout_subtypes
    split = make_split(
        labelled.meta,
        holdout=protocol.holdout,
        holdout_subtypes=list(subtypes) if isinstance(subtypes, tuple) else subtypes,
        versions=protocol.holdout_versions,
        seed=config.seed,
        test_fraction=protocol.test_fraction,
    )

    def progress(epoch, loss):
        print(f"epoch {epoch}/{config.epochs}: loss {loss:.3f}", file=sys.stderr)

    res = run_holdout(
        labelled,
        split,
        config,
        db=outputs.db,
        out=outputs.out,
        progress=progress if outputs.progress else None,
        device=outputs.device,
    )
    return HoldoutRun(res, list(labelled.classes), str(outputs.db))
