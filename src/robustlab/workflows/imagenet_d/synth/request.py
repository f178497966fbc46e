"""What a ``synth`` call asks for, as three frozen specs validated once.

:class:`SynthGrid` decides which images the grid holds (classes x nuisances x N, seeds,
templates), :class:`SynthDiffusion` how each is drawn (both are the folder's identity),
:class:`SynthExecution` where the pipeline runs (recorded per run, never the identity).
``robustlab synth`` builds them from its flags;
:func:`robustlab.workflows.imagenet_d.synth.run.synth` also takes their fields as keywords.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustlab.errors import InputError
from robustlab.seeding import check_seed
from robustlab.shifts.generative.text2image import SCHEDULERS
from robustlab.workflows.imagenet_d.synth.prompts import VOCABULARIES


def _integer(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class SynthGrid:
    """The prompt grid.

    Attributes:
        label_space: Label space whose classes are drawn (name or CSV).
        classes: Only these classes (folder, name or index); None: all.
        nuisances: Built-in vocabularies (``background``, ``texture``, ``material``) and/or
            CSV files with a ``name`` column (subset = file stem).
        per_pair: Images per (class, nuisance) pair.
        seed: Global seed of the seed rule.
        templates: Mapping or CSV (``subset,template``) replacing the default templates.
        max_nuisances: Only the first N names of each vocabulary.
        limit: Only the first N images of the grid (in grid order).
    """

    label_space: str = "imagenet-d"
    classes: Sequence[str] | None = None
    nuisances: Sequence[str] = VOCABULARIES
    per_pair: int = 1
    seed: int = 0
    templates: Mapping[str, str] | str | Path | None = None
    max_nuisances: int | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        check_seed(self.seed)  # the one seed rule (robustlab.seeding)
        _integer("per_pair", self.per_pair, 1)
        if self.limit is not None and int(self.limit) < 1:
            raise InputError(f"limit must be at least 1, got {self.limit}")


@dataclass(frozen=True)
class SynthDiffusion:
    """How each image is drawn.

    Attributes:
        steps, guidance_scale, height, width, negative_prompt: Diffusion settings.
        sampler: A key of :data:`robustlab.shifts.generative.text2image.SCHEDULERS`; None
            keeps the checkpoint's scheduler.
    """

    steps: int = 30
    guidance_scale: float = 7.5
    height: int = 512
    width: int = 512
    negative_prompt: str = ""
    sampler: str | None = None

    def __post_init__(self) -> None:
        _integer("steps", self.steps, 1)
        if self.sampler is not None and self.sampler not in SCHEDULERS:
            raise InputError(
                f"unknown sampler {self.sampler!r}; use one of {', '.join(SCHEDULERS)}"
            )
        for side in (self.height, self.width):
            if int(side) < 8 or int(side) % 8:
                raise InputError(f"image size {side} must be a positive multiple of 8")

    def settings(self) -> dict[str, Any]:
        """The pipeline call's keyword arguments."""
        return dict(
            steps=int(self.steps),
            guidance_scale=float(self.guidance_scale),
            height=int(self.height),
            width=int(self.width),
            negative_prompt=self.negative_prompt,
        )


@dataclass(frozen=True)
class SynthExecution:
    """Where and how the pipeline runs (the same files byte for byte either way).

    Attributes:
        batch_size: Prompts per pipeline call (None: 8 on a GPU, 1 on the CPU).
        device, dtype: Where and how the pipeline runs (see ``TextToImage``).
        pipeline: An already loaded ``TextToImage`` for the checkpoint (local backend).
        backend: ``"local"`` (this process) or ``"ray"`` (one pipeline per GPU of a Ray
            cluster, or per node without GPUs, each loaded from the checkpoint).
        address: The Ray cluster's ``HOST:PORT`` (None: a Ray instance on this machine).
        progress: A tqdm bar on stderr.
    """

    batch_size: int | None = None
    device: str | None = None
    dtype: str | None = None
    pipeline: Any = None
    backend: str = "local"
    address: str | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        from robustlab.execution.executors import check_backend

        check_backend(self.backend, self.address)
        if self.backend == "ray" and self.pipeline is not None:
            raise InputError(
                "a loaded pipeline runs in this process; the Ray backend loads one per worker",
                hint="pass the checkpoint path only, or leave out backend='ray'",
            )
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")
