"""What a fine-tuning experiment is asked to do, as four frozen specs validated once.

A request is the model (what is fine-tuned, and behind which pixel defence), the data (the
images, their labels and masks, the split and the seed rule's seed), the cells (suite,
shifts, levels) and the execution (where checkpoints and runs go, device, batching,
progress). ``robustlab train`` builds a :class:`TrainRequest` from its flags; the Python
functions that take keywords (``run_protocol(spec, data, masks=..., steps...)``) route
each keyword to the spec that owns it (:meth:`TrainRequest.from_keywords`), so adding an
option touches its spec, its parser and the code that reads it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.errors import InputError
from robustlab.seeding import check_seed
from robustlab.store import DEFAULT_DB
from robustlab.workflows.keywords import route_keywords
from robustlab.workflows.tools import ToolSpec
from robustlab.workflows.train.finetune import TrainConfig

if TYPE_CHECKING:
    from robustlab.data.labels import LabelSpace
    from robustlab.defences.pixels import Clahe, NLMeans
    from robustlab.suites import Suite


@dataclass(frozen=True)
class TrainModel:
    """The model fine-tuned: a spec, its starting weights, the training config and the
    pixel defence (``preprocess``, e.g. ``"clahe"``) it is trained and tested behind.

    A bad defence name fails here, before anything is loaded or trained.
    """

    model_spec: str
    config: TrainConfig = field(default_factory=TrainConfig)
    weights: str | Path | None = None
    preprocess: str | Clahe | NLMeans | None = None  # a defence spec, then its parsed object

    def __post_init__(self):
        from robustlab.defences import get_preprocess

        object.__setattr__(self, "preprocess", get_preprocess(self.preprocess))


@dataclass(frozen=True)
class TrainData:
    """The images every model of an experiment sees.

    Attributes:
        data: Source images (class folders, flat + ``labels_csv``, or a generated folder).
        masks: Foreground masks (scenarios need them; the split keeps images with one).
        labels_csv, label_space: Labels of a flat folder, and the model's label space.
        test_fraction, split_seed: The shared class-stratified split.
        seed: The seed rule's seed of the shifted images (training draws use the config's).
    """

    data: str | Path
    masks: str | Path | None = None
    labels_csv: str | Path | None = None
    label_space: str | LabelSpace | None = None
    test_fraction: float = 0.3
    split_seed: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        check_seed(self.split_seed, "split_seed")  # the one seed rule (robustlab.seeding)
        check_seed(self.seed)


@dataclass(frozen=True)
class TrainCells:
    """The cells trained and tested on: a suite (name or :class:`robustlab.suites.Suite`),
    optionally narrowed to ``shifts`` and ``levels``."""

    suite: str | Suite = "ximagenet12"
    shifts: Sequence[str] | None = None
    levels: Sequence[Any] | None = None


@dataclass(frozen=True)
class TrainExecution:
    """Where the work goes and how it runs: checkpoint folder, results database, device,
    evaluation batch size and loader workers, progress lines on stderr."""

    out: str | Path = "checkpoints"
    db: str | Path = DEFAULT_DB
    device: str | None = None
    batch_size: int | None = None
    workers: int | None = 0
    progress: bool = False


@dataclass(frozen=True)
class TrainRequest:
    """One experiment's request: :class:`TrainModel`, :class:`TrainData`,
    :class:`TrainCells`, :class:`TrainExecution` and the optional tools' settings the
    scenario cells are drawn with (:class:`~robustlab.workflows.tools.ToolSpec`)."""

    model: TrainModel
    data: TrainData
    cells: TrainCells = field(default_factory=TrainCells)
    execution: TrainExecution = field(default_factory=TrainExecution)
    tools: ToolSpec = field(default_factory=ToolSpec)

    @classmethod
    def from_keywords(
        cls, caller: str, model_spec: str, data: Any, options: Mapping[str, Any]
    ) -> TrainRequest:
        """The request the keyword arguments of ``caller`` (a public function's name, for
        the error) describe: each keyword goes to the spec with a field of its name.

        Raises:
            TypeError: A keyword no spec has (with the closest names), as Python says it
                for a function's own unknown keyword.
        """
        parts = route_keywords(
            caller,
            options,
            {
                "model": TrainModel,
                "data": TrainData,
                "cells": TrainCells,
                "execution": TrainExecution,
                "tools": ToolSpec,
            },
        )
        return cls(
            model=TrainModel(model_spec, **parts["model"]),
            data=TrainData(data, **parts["data"]),
            cells=TrainCells(**parts["cells"]),
            execution=TrainExecution(**parts["execution"]),
            tools=ToolSpec(**parts["tools"]),
        )

    def with_suite(self, suite: Any) -> TrainRequest:
        """The same request over ``suite`` (a resolved or narrowed :class:`Suite`)."""
        return dataclasses.replace(self, cells=dataclasses.replace(self.cells, suite=suite))

    def with_weights(self, weights: Any) -> TrainRequest:
        """The same request for the model at ``weights`` (a fine-tuned checkpoint)."""
        return dataclasses.replace(self, model=dataclasses.replace(self.model, weights=weights))


def check_choice(what: str, value: str, choices: Sequence[str]) -> str:
    """``value`` when it is one of ``choices``, else the one-line :class:`InputError`
    (``protocol must be one of ex1, ex2, both, not 'ex3'``)."""
    if value not in choices:
        raise InputError(f"{what} must be one of {', '.join(choices)}, not {value!r}")
    return value


__all__ = [
    "TrainCells",
    "TrainData",
    "TrainExecution",
    "TrainModel",
    "TrainRequest",
    "check_choice",
]
