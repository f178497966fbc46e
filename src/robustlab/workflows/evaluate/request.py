"""What an evaluation run is asked to do: four frozen specs (data, cells, model, execution)
and the database, validated once when the request is built.

Why specs instead of one function with 26 keywords: every option is declared once, as a
field of the spec that owns it, with its default and its check. The Python API
(:func:`robustlab.evaluate`) routes each keyword to the spec owning a field of that name
(:meth:`EvaluateRequest.build`), and ``robustlab evaluate`` reads the same names from its
parsed arguments (:meth:`EvaluateRequest.from_args`). So adding an option touches its spec,
the parser and the code that uses it, nothing else; a misspelt keyword is a ``TypeError``
that names the closest option.

A field whose keyword differs from its name (the folder is passed as ``data``, the model as
``model``) says so in its metadata (``keyword``); a field the command line gives under
another name (``--no-progress`` for ``progress=False``) names the argument and how to read
it (``arg``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types of the fields only
    from collections.abc import Sequence

    from robustlab.defences.pixels import Clahe, NLMeans
    from robustlab.defences.tta import TenCrop

    from robustlab.data.labels import LabelSpace
    from robustlab.models.base import Model
    from robustlab.models.inference import Inference
    from robustlab.execution.device_shifts import ShiftDevice
    from robustlab.suites import Protocol, Suite

from robustlab.errors import InputError, MissingResourceError
from robustlab.seeding import check_seed
from robustlab.store import DEFAULT_DB
from robustlab.workflows.keywords import build_specs, owners, specs_from_args
from robustlab.workflows.tools import ToolSpec

__all__ = [
    "CellSpec",
    "DataSpec",
    "EvaluateRequest",
    "ExecutionSpec",
    "ModelSpec",
    "ToolSpec",
    "keywords",
]


def _cached(obj, name: str, value) -> None:
    """Keep a value parsed while validating on a frozen spec (not part of its equality)."""
    object.__setattr__(obj, name, value)


@dataclass(frozen=True)
class DataSpec:
    """The images and their classes.

    Attributes:
        folder: (keyword ``data``) Folder of source images (ImageFolder tree, or flat plus
            labels CSV), or a folder written by ``robustlab generate`` (its
            ``manifest.json`` names the suite, seed, protocol and source folder; shifted
            cells are read from its files and the clean cell from the source), or the
            published ImageNet-E archive (``ori/``, level folders and ``labels.txt``: each
            level folder is a cell, see :mod:`robustlab.data.imagenet_e`; suite and seed do
            not apply), or another published set as downloaded (ImageNet-C, ImageNet-9's
            bg_challenge, XIMAGENET-12: each cell folder a cell, with the benchmark's label
            space; an ImageNet-D tree gets the ``imagenet-d`` label space), see
            :mod:`robustlab.data.published`.
        labels_csv, masks: Passed to :func:`robustlab.data.sources.discover`.
        label_space: Label space name (default: the suite's, else ``imagenet1k``).
    """

    folder: Path = field(metadata={"keyword": "data"})
    labels_csv: str | Path | None = None
    masks: str | Path | None = None
    label_space: str | LabelSpace | None = None

    def __post_init__(self):
        root = Path(self.folder).expanduser()
        if not root.is_dir():
            raise MissingResourceError(
                f"data folder {root} does not exist"
                if not root.exists()
                else f"data folder {root} is not a folder"
            )
        _cached(self, "folder", root)


@dataclass(frozen=True)
class CellSpec:
    """Which cells are evaluated, and how the images are framed for the model.

    Attributes:
        suite: Suite name, YAML path or Suite; None evaluates the clean images only (for a
            generated folder: the suite it was generated for).
        shifts, levels: Restrict the suite to some shifts / levels (the grammar of
            :meth:`robustlab.suites.Suite.select`: names, families, globs, level ranges).
        seed: Global seed of the seed rule (default 0; a generated folder's own seed).
        protocol: How the model sees the images, instead of the benchmark's official
            protocol (:mod:`robustlab.suites`: ImageNet-C's 256/224 frame and the model's
            resize; ImageNet-D's model's own eval transform; ImageNet-E's 256/224 view of
            the stored image): a name (``imagenet-c``, ``model``, ``imagenet-e``) or
            ``key=value`` pairs (``view=model``). A run of its own (another run id).
    """

    suite: str | Path | Suite | None = None
    shifts: str | Sequence[str] | None = None
    levels: str | Sequence[int | str] | None = None
    seed: int | None = None
    protocol: str | Protocol | None = None

    def __post_init__(self):
        if self.seed is not None:
            check_seed(self.seed)  # the one seed rule (robustlab.seeding)


@dataclass(frozen=True)
class ModelSpec:
    """The model and how its forward pass computes.

    Attributes:
        spec: (keyword ``model``) A model spec (``"lite0"``, ``"timm:resnet50"``, ...) or
            a loaded Model.
        weights, device, batch_size: Passed to :func:`robustlab.models.load_model` (the
            batch size also sets the runner's batches).
        preprocess: Pixel defence applied to every image before the model: ``"clahe"``,
            ``"nlmeans"`` or ``"NAME:key=value,..."`` (:mod:`robustlab.defences`).
        tta: Test-time augmentation: ``"ten-crop"`` (softmax averaged over ten views).
            Either defence makes a run of its own (never mixed with the plain model's).
        precision: ``"fp32"`` (default: the comparable number), ``"bf16"`` or ``"fp16"``:
            the forward pass under ``torch.autocast`` on the model's device, softmax and
            top-k in float32 (:mod:`robustlab.models.inference`). Torch models only; a
            run of its own, labelled ``@bf16`` in tables. None keeps a loaded model's own.
        compile: Run the forward pass through ``torch.compile`` (compiled before any
            work; a run of its own, labelled ``@compiled``).
        inference, defences: Parsed from the fields above while validating.
    """

    spec: str | Model = field(metadata={"keyword": "model"})
    weights: str | Path | None = None
    device: str | None = None
    batch_size: int | None = None
    # a spec ("clahe", "nlmeans:h_factor=0.8"), then its parsed defence
    preprocess: str | Clahe | NLMeans | None = None
    tta: str | TenCrop | None = None  # a spec ("ten-crop"), then its parsed object
    precision: str | None = None
    compile: bool = False
    inference: Inference | None = field(init=False, default=None, repr=False, compare=False)
    defences: dict = field(init=False, default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        from robustlab.workflows.evaluate.model import parse_defences, parse_inference

        bs = self.batch_size
        if bs is not None and (isinstance(bs, bool) or not isinstance(bs, int) or bs < 1):
            raise InputError(
                f"batch size must be at least 1, got {bs!r}",
                hint="pass --batch-size 32, or leave it out for the model's own",
            )
        _cached(self, "inference", parse_inference(self.precision, self.compile))
        _cached(self, "defences", parse_defences(self.spec, self.preprocess, self.tta))


@dataclass(frozen=True)
class ExecutionSpec:
    """How the work is executed: none of it changes a prediction, except ``shift_device``,
    which gives the run its own identity (other pixels).

    Attributes:
        workers: DataLoader worker processes (default: one per CPU core the model leaves
            free, :func:`~robustlab.execution.lifeline.default_workers`: CPU cores - 1 for a model
            on a GPU, none for a model on the CPU, whose forward pass uses every core;
            0: the images are prepared in the main process between batches); with
            ``backend="ray"`` and no ``address``, the CPUs of the Ray instance started on
            this machine (default: all).
        prefetch, cells_per_task: Execution details (never change results; see
            :class:`robustlab.execution.runner.RunOptions`).
        backend: ``"local"`` (worker processes on this machine) or ``"ray"`` (a Ray
            cluster, :mod:`robustlab.execution.ray`): the same predictions and the same
            run id, so a run started on one may be finished on the other.
        address: The Ray cluster's ``HOST:PORT`` (``ray start --head`` prints it; None: a
            Ray instance on this machine). Only with ``backend="ray"``.
        progress: Show progress (default True): per-cell bars when stderr is a terminal,
            else a line every few seconds with done/total, rate and ETA (the command
            line's ``--no-progress`` is ``progress=False``).
        shift_device: None (default): the exact path, shifts applied image by image in
            the workers, byte for byte the reference's. ``"cuda"`` or ``"cpu"``: workers
            only decode; the corruptions and mask scenes run batched as torch tensor
            operations on that device (:mod:`robustlab.shifts.batched`). Different
            pixels, the same statistics (benchmarks/README.md): such a run has its own run
            id and is labelled ``torch:<device>``. With ``backend="ray"`` the model actors
            apply them on their own device (``cuda``: their GPUs), with the same rows and
            run id.
        shift_jpeg: With ``shift_device``: ``"cpu"`` (default: libjpeg, the protocol's
            Pillow bytes) or ``"device"`` (nvJPEG on CUDA) for the protocol's JPEG round
            trip. nvJPEG is not the protocol's codec: on an H200 it moved pixels by 1.99 on
            average and lowered impulse_noise's error by 4.4 points (benchmarks/README.md,
            "GPU checks"), so it is an opt-in.
        shift_settings: The :class:`~robustlab.execution.device_shifts.ShiftDevice` built while
            validating (None: the exact path).
        lanes: Batches a model on the CPU computes at once, each on its share of torch's
            threads (default: two when torch has two threads or more; 1: one batch at a
            time on every thread). The same batches, so the same top-5 classes, with
            probabilities equal up to float rounding, as with another torch thread count
            (:mod:`robustlab.execution.lanes`).
    """

    workers: int | None = None
    prefetch: int = 2
    cells_per_task: int = 0
    backend: str = "local"
    address: str | None = None
    progress: bool | None = field(
        default=None, metadata={"arg": ("no_progress", lambda off: False if off else None)}
    )
    shift_device: str | None = None
    shift_jpeg: str = "cpu"
    lanes: int | None = None
    shift_settings: ShiftDevice | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self):
        from robustlab.execution.executors import check_backend

        check_backend(self.backend, self.address)
        n = self.lanes
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise InputError(
                f"lanes must be a whole number of at least 1, got {n!r}",
                hint="pass --lanes 1 for one batch at a time, or leave it out",
            )
        w = self.workers
        if w is not None and (isinstance(w, bool) or int(w) < 0):
            raise InputError(
                f"workers must be 0 (in the main process) or more, got {w!r}",
                hint="pass --workers N, or leave it out for one per core the model leaves free",
            )
        if self.shift_device is None:
            return
        from robustlab.execution.device_shifts import ShiftDevice

        settings = ShiftDevice(str(self.shift_device), jpeg=self.shift_jpeg)
        if self.backend != "ray":  # on Ray: the model actors' devices (plan_placement)
            settings.check_here()
        _cached(self, "shift_settings", settings)

    @property
    def shift_path(self) -> dict | None:
        """The batched shift path's description (part of the run id), None for the exact."""
        return None if self.shift_settings is None else self.shift_settings.describe()


# The parts of a request, by attribute: each keyword is routed to the one with that field.
PARTS: dict[str, type] = {
    "data": DataSpec,
    "cells": CellSpec,
    "model": ModelSpec,
    "execution": ExecutionSpec,
    "tools": ToolSpec,  # the optional tools' settings (inpainter, hole fill...): pixels
}


# Keywords that belong to the request itself, not to one of its parts.
_TOP = ("db",)


def keywords() -> dict[str, tuple[str | None, str]]:
    """Every keyword of a request: ``keyword -> (part, field)``; the part is None for a
    field of the request itself (``db``)."""
    return {**owners(PARTS), **{k: (None, k) for k in _TOP}}


@dataclass(frozen=True)
class EvaluateRequest:
    """One evaluation run as asked for: its specs and the results database.

    Build it with :meth:`build` (the keywords of :func:`robustlab.evaluate`) or
    :meth:`from_args` (``robustlab evaluate``'s parsed arguments); :func:`make_plan` turns it
    into a :class:`~robustlab.execution.plan.RunPlan`, :func:`execute` runs that.
    """

    data: DataSpec
    cells: CellSpec
    model: ModelSpec
    execution: ExecutionSpec
    db: str | Path = DEFAULT_DB  # the results database file (created on the first write)
    tools: ToolSpec = field(default_factory=ToolSpec)  # resolved once, shipped with the work

    def __post_init__(self):
        ex, m = self.execution, self.model
        if ex.shift_device is not None and (m.preprocess is not None or m.tta is not None):
            raise InputError(
                "--shift-device does not combine with --preprocess or --tta yet "
                "(the defences run after the exact path's shifts)",
                hint="leave --shift-device out to evaluate a defended model",
            )

    @classmethod
    def build(cls, model, data, **options) -> EvaluateRequest:
        """The request for ``evaluate(model, data, **options)``: each keyword goes to the
        spec with a field of that name.

        Raises:
            TypeError: an unknown keyword (the message names the closest one).
            InputError: a value no run could use (one line, with a hint).
        """
        options = {"model": model, "data": data, **options}
        top = {k: options.pop(k) for k in _TOP if k in options}
        specs = build_specs("evaluate", options, PARTS)
        return cls(**specs, **top)

    @classmethod
    def from_args(cls, args) -> EvaluateRequest:
        """The request of ``robustlab evaluate``'s parsed arguments: the same keywords,
        read from the argument of the same name (or the one a field's ``arg`` names), by the
        rule every command uses (:func:`robustlab.workflows.keywords.specs_from_args`)."""
        specs = specs_from_args("evaluate", args, PARTS)
        return cls(**specs, **{k: getattr(args, k) for k in _TOP if hasattr(args, k)})
