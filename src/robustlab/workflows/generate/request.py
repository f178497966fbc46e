"""What a ``generate`` call asks for, as three frozen specs validated once.

:class:`GenerateCells` decides the pixels (which cells, the seed, the file format),
:class:`GenerateInputs` which sources are read, :class:`GenerateExecution` where the
work runs (never part of the folder's identity). ``robustlab generate`` builds them from
its flags; :func:`robustlab.workflows.generate.generate` also takes their fields as
keywords (:func:`robustlab.workflows.keywords.build_specs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustlab.data.images import MAX_PIXELS
from robustlab.errors import InputError
from robustlab.seeding import check_seed

# Where generate's cells go: a file per cell, or (cifar-c) straight into the release arrays.
LAYOUTS = ("folders", "npy")


@dataclass(frozen=True)
class GenerateCells:
    """What decides the files' pixels beyond the suite.

    Attributes:
        shifts: Names, families, tags or globs selecting the suite's shifts (None: all).
        levels: Levels to build (``[1, 3]`` or ``"1,3"`` / ``"1-3"``; None: all).
        seed: Global seed of the seed rule.
        fmt: Output format override (``"png"`` or ``"jpeg"``).
        keep_size: No resize and no crop: shifts run on the source size.
        out_layout: ``"folders"`` (a file per cell; ``cifar-c`` adds the release's ``.npy``
            arrays) or ``"npy"`` (``cifar-c`` only: the arrays alone, written directly,
            :mod:`robustlab.workflows.generate.release_rows`). Same pixels either way;
            part of the folder's identity, since the two hold different files.
    """

    shifts: Sequence[str] | None = None
    levels: Sequence | str | None = None
    seed: int = 0
    fmt: str | None = None
    keep_size: bool = False
    out_layout: str = "folders"

    def __post_init__(self) -> None:
        check_seed(self.seed)  # the one seed rule (robustlab.seeding)
        if self.out_layout not in LAYOUTS:
            raise InputError(
                f"unknown out_layout {self.out_layout!r}; use {' or '.join(LAYOUTS)}",
                hint="npy writes only the CIFAR-10-C arrays (suite cifar-c)",
            )


@dataclass(frozen=True)
class GenerateInputs:
    """Which source images are read.

    Attributes:
        labels_csv, masks, bboxes: Passed to :func:`robustlab.data.sources.discover`.
        unlabelled: Accept a folder whose images have no labels (refused by default:
            nothing can score such cells, so files would be written for nothing).
        limit: Use only the first ``limit`` images (sorted by id).
        max_pixels: Decompression-bomb limit for sources.
    """

    labels_csv: str | Path | None = None
    masks: str | Path | None = None
    bboxes: str | Path | None = None
    unlabelled: bool = False
    limit: int | None = None
    max_pixels: int = MAX_PIXELS

    def __post_init__(self) -> None:
        if self.limit is not None and int(self.limit) < 1:
            raise InputError(f"limit must be at least 1, got {self.limit}")


@dataclass(frozen=True)
class GenerateExecution:
    """Where and how the work runs (the files are the same bytes either way).

    Attributes:
        workers: Worker processes; None one per available CPU, 0 everything in this process.
        backend: ``"local"`` (a process pool) or ``"ray"`` (a Ray cluster's workers write).
        address: The Ray cluster's ``HOST:PORT`` (None: a Ray instance on this machine).
        progress: A tqdm progress bar on stderr.
        storage_options: Options of a URL's fsspec filesystem; never written anywhere.
        into_existing: Write into a local ``out`` that holds files ``generate`` did not
            write (refused otherwise: :func:`robustlab.files.safety.check_out_folder`).
    """

    workers: int | None = None
    backend: str = "local"
    address: str | None = None
    progress: bool = True
    storage_options: dict[str, Any] | None = None
    into_existing: bool = False

    def __post_init__(self) -> None:
        from robustlab.execution.executors import check_backend

        check_backend(self.backend, self.address)
        workers = self.workers
        if workers is not None and (isinstance(workers, bool) or int(workers) < 0):
            raise InputError(f"workers must be 0 (in this process) or more, got {workers!r}")
