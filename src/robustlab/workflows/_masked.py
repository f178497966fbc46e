"""The run scaffolding of the workflows that score a model against object masks.

``saliency`` (where a classifier looks) and ``segment`` (what a segmentation network finds)
run a model on the clean images and the scenario cells of a mask suite and compare its
output with each cell's object mask. Everything but the model's part is the same, and lives
here once so the two cannot drift apart:

- the request's parts: :class:`MaskedData` (images, masks, labels, limit),
  :class:`MaskedCells` (suite, shifts, levels, seed), :class:`MaskedExecution`
  (database, batch size, progress) and the optional tools' settings
  (:class:`~robustlab.workflows.tools.ToolSpec`: ``ai_bg``'s inpainter), frozen and
  checked when built;
  :func:`robustlab.workflows.keywords.build_specs` builds them from the keyword arguments of the Python functions;
- :func:`select`: the cells (the one selection grammar, clean first) and the samples that
  have a mask;
- :func:`masked_record`: the run's identity (the model's part is the workflow's) through
  :func:`robustlab.records.identity.make_record`;
- :func:`target_rule` and :func:`target_mask`: which mask is a cell's truth (a table kept
  as data on the shifts: the object stays, is moved, or is gone);
- :func:`cell_images` and :func:`masked_cells`: each cell's pixels and its true mask, with
  the skips as reasons;
- :class:`StoredRun`: start or resume, write batches with progress, finish (or record an
  interruption or a failure).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import Cell, as_cells
from robustlab.errors import CellSkipped, InputError, MissingResourceError
from robustlab.seeding import check_seed
from robustlab.store.schema import CLEAN_CELL, CLEAN_SHIFT

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from robustlab.suites import Suite

    from robustlab.settings import ToolSettings
    from robustlab.workflows.tools import ToolSpec

    from robustlab.store import RunRecord, Store

log = logging.getLogger(__name__)

# robustlab.store.DEFAULT_DB (spelled here so that building a request imports no store code).
DEFAULT_DB = "robustlab.duckdb"


@dataclass(frozen=True)
class MaskedData:
    """Which images: ``data`` (class folders, or flat plus ``labels_csv``), the masks
    folder parallel to it (images without a mask are skipped, counted) and ``limit``
    (only the first N images with masks, sorted by id)."""

    data: str | Path
    masks: str | Path | None
    labels_csv: str | Path | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.masks is None:
            raise InputError(
                "scoring against object masks needs foreground masks",
                hint="pass --masks DIR (masks=DIR in Python)",
            )
        # limit=0 used to select nothing and be reported as "no images with masks".
        if self.limit is not None and (isinstance(self.limit, bool) or int(self.limit) < 1):
            raise InputError(f"limit must be at least 1, got {self.limit!r}")

    def roots(self) -> tuple[Path, Path]:
        """The data and masks folders, checked to exist."""
        root = Path(self.data).expanduser()
        if not root.is_dir():
            raise MissingResourceError(f"data folder {root} does not exist")
        mask_root = Path(str(self.masks)).expanduser()
        if mask_root.exists() and not mask_root.is_dir():
            raise InputError(f"masks folder {mask_root} is a file", hint="pass the masks folder")
        if not mask_root.is_dir():
            raise MissingResourceError(f"masks folder {mask_root} does not exist")
        return root, mask_root


@dataclass(frozen=True)
class MaskedCells:
    """Which cells: the scenarios of ``suite`` chosen by ``shifts`` and ``levels`` (the
    selection grammar of :meth:`robustlab.suites.Suite.select`; ``shifts=["clean"]``:
    the clean images only), made with the global ``seed`` (the cells ``evaluate`` sees)."""

    suite: str | Suite = "ximagenet12"  # a name, or a Suite object
    shifts: Sequence[str] | None = None
    levels: Sequence[Any] | str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_seed(self.seed)
        if self.shifts is not None and not isinstance(self.shifts, str):
            object.__setattr__(self, "shifts", tuple(self.shifts))
        if self.levels is not None and not isinstance(self.levels, str):
            object.__setattr__(self, "levels", tuple(self.levels))


@dataclass(frozen=True)
class MaskedExecution:
    """How the run goes: the results database, the cells per model call (None: the
    workflow's default) and a progress line on stderr now and then."""

    db: str | Path = DEFAULT_DB
    batch_size: int | None = None
    progress: bool = False

    def __post_init__(self) -> None:
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise InputError(f"batch size must be at least 1, got {self.batch_size}")


@dataclass(frozen=True)
class Selection:
    """What a masked run covers: the suite restricted to the chosen scenarios, its cells
    (clean first, levels as the suite gives them), every discovered sample (the donor
    pool), the samples with masks (after ``limit``) and what was left out, with reasons;
    ``tools``: the resolved tool settings the cells are drawn with."""

    suite: Suite
    cells: list[Cell]
    samples: Sequence[Any]
    usable: list[Any]
    skipped: list[tuple[str, str]]
    root: Path
    mask_root: Path
    tools: ToolSettings

    @property
    def keys(self) -> list[tuple[str, str]]:
        """The cells as stored: (shift, level as text)."""
        return [c.stored for c in as_cells(self.cells)]


def select_cells(cells: MaskedCells, tools: ToolSettings | None = None) -> tuple[Suite, list[Cell]]:
    """The suite restricted to the chosen scenarios and its cells, the clean one first
    (a shift whose tool ``tools`` do not configure is left out, logged)."""
    from robustlab.shifts.registry import available_shifts
    from robustlab.suites import get_suite

    s = get_suite(str(cells.suite)) if isinstance(cells.suite, (str, Path)) else cells.suite
    if cells.shifts is not None and list(cells.shifts) == [CLEAN_SHIFT]:
        return s, [CLEAN_CELL]
    wanted = [n for n in cells.shifts or () if n != CLEAN_SHIFT]
    names = available_shifts(s.match(wanted or None), tools, log=log)
    s = s.select(names, cells.levels or None).suite
    return s, [CLEAN_CELL, *s.cells()]


def select(data: MaskedData, cells: MaskedCells, tools: ToolSpec | None = None) -> Selection:
    """The cells and the samples with masks of a masked run (nothing decoded yet), drawn
    with ``tools``' settings (None: the environment's)."""
    from robustlab.data.sources import discover, no_mask_reason
    from robustlab.settings import ToolSettings

    root, mask_root = data.roots()
    settings = tools.settings if tools is not None else ToolSettings.from_environment()
    suite, chosen = select_cells(cells, settings)
    samples = discover(root, labels_csv=data.labels_csv, masks=mask_root)
    skipped: list[tuple[str, str]] = [tuple(x) for x in getattr(samples, "skipped", [])]
    skipped += [(x.id, no_mask_reason(x)) for x in samples if x.mask_path is None]
    usable = [x for x in samples if x.mask_path is not None]
    if data.limit is not None:
        usable = usable[: int(data.limit)]
    if not usable:
        raise InputError(f"no images with masks in {root}", hint="check --masks")
    return Selection(suite, chosen, samples, usable, skipped, root, mask_root, settings)


def masked_record(
    task: str,
    sel: Selection,
    data: MaskedData,
    seed: int,
    *,
    model: dict[str, Any],
    preprocessing: dict[str, Any],
    config: dict[str, Any],
    extra_versions: dict[str, str] | None = None,
) -> RunRecord:
    """The run record of a masked run: its id hashes the task, the model's part of the
    identity (``model``: spec, weights hash and what else decides its output), the suite,
    robustlab's version, the seed, the protocol, and the content of the images and of the
    masks (the masks are the truth: a replaced one is another run). Its config describes
    the tools the cells were drawn with (``ai_bg``'s inpainter), as an evaluation's does."""
    from robustlab.version import __version__
    from robustlab.records.identity import make_record, masked_fingerprints
    from robustlab.shifts.registry import describe_resources, get_shift

    fingerprint, mask_fingerprint = masked_fingerprints(sel.usable)
    protocol = sel.suite.protocol.describe()
    identity = {
        "task": task,
        **model,
        "suite": sel.suite.name,
        "suite_version": sel.suite.version,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "mask_fingerprint": mask_fingerprint,
        "seed": int(seed),
        "protocol": protocol,
    }
    return make_record(
        identity,
        data_root=sel.root,
        preprocessing={"model": preprocessing, "protocol": protocol},
        extra_versions=extra_versions,
        config={
            "task": task,
            "source": "on-the-fly",
            "masks": str(sel.mask_root.resolve()),
            "mask_fingerprint": mask_fingerprint,
            "labels_csv": str(data.labels_csv) if data.labels_csv else None,
            "cells": [list(c) for c in sel.keys],
            "limit": data.limit,
            **describe_resources(
                [get_shift(n) for n in dict.fromkeys(n for n, _ in sel.cells) if n != CLEAN_SHIFT],
                sel.tools,
            ),
            **config,
        },
        n_samples=len(sel.usable),
    )


def cell_images(sel: Selection, seed: int):
    """The :class:`robustlab.execution.tasks.CellImages` of a masked run. Donors come from the
    whole data set (DonorPool's rule), not from the first ``limit`` masked samples, so the
    cells are the pixels ``generate`` and ``evaluate`` make."""
    from robustlab.execution.tasks import CellImages
    from robustlab.shifts.registry import get_shift

    needs_donors = any(
        get_shift(n).extra.get("donor_rule") for n, _ in sel.cells if n != CLEAN_SHIFT
    )
    return CellImages(
        sel.suite.protocol,
        seed,
        donors=list(sel.samples) if needs_donors else None,
        with_mask=True,
        settings=sel.tools,
    )


def target_rule(shift: str) -> str | None:
    """What ``shift`` does to the object (:attr:`robustlab.shifts.registry.Shift.target`:
    ``"same"``, ``"moved"``, or None when the object is gone); the clean cell keeps it."""
    from robustlab.shifts.registry import get_shift

    return "same" if shift == CLEAN_SHIFT else get_shift(shift).target


def target_mask(sample, prepared, shift: str, level, seed: int) -> np.ndarray | None:
    """The true object mask of one cell (HxW bool), or None when the object is gone.

    Raises:
        CellSkipped: the sample has no usable mask.
    """
    from robustlab.shifts.scenes import check_mask

    m = check_mask(prepared.mask, prepared.rgb.shape)
    rule = target_rule(shift)
    if rule == "same":
        return m
    if rule is None:
        return None
    if rule == "moved":
        from robustlab.seeding import derive_seed, make_rng
        from robustlab.shifts.registry import get_shift
        from robustlab.shifts.scenes import moved_mask

        # the shift's own draw from its cell generator (it draws first): the same spot
        sh = get_shift(shift)
        if sh.draw is None:  # register_shift refuses a "moved" target without one
            raise ValueError(f"{shift} moves the object but has no draw")
        rng = make_rng(derive_seed(seed, sample.id, shift, level))
        draws = sh.draw(prepared.rgb, sh.params[level], rng, {"mask": m})
        return moved_mask(m, draws["offset"])
    raise ValueError(f"unknown target rule {rule!r} for {shift}")


def masked_cells(
    images, sample, todo: Sequence[tuple[str, Any]], seed: int
) -> tuple[list[tuple[str, Any, np.ndarray, np.ndarray]], list[tuple[str, str]]]:
    """The pixels and the true object mask of each cell of ``todo`` for one sample.

    Returns:
        ``(cells, errors)``: ``(shift, level, HxWx3 uint8, HxW bool mask)`` per cell whose
        object is still there (a scenario that removes it has no truth: left out), and
        ``(where, reason)`` per skip: ``where`` is ``""`` when the sample itself cannot
        be used (unreadable, no mask), else ``shift/level``. Only the skips of bad input
        (:class:`robustlab.errors.CellSkipped`, unreadable images) are caught; any other
        exception is a bug and fails the run.
    """
    from robustlab.data.images import ImageError

    try:
        base = images.base(sample)
        if base.mask is None:
            raise ImageError("no mask for this sample")
    except ImageError as exc:
        return [], [("", exc.reason)]
    except OSError as exc:
        return [], [("", f"unreadable: {exc}")]
    out, errors = [], []
    for shift, level in todo:
        try:
            truth = target_mask(sample, base, shift, level, seed)
            if truth is None:
                continue
            img = images.cell(sample, base, shift, level)
        except (CellSkipped, ImageError, OSError) as exc:
            errors.append((Cell(shift, level).folder, getattr(exc, "reason", None) or str(exc)))
            continue
        out.append((shift, level, img, truth))
    return out, errors


class StoredRun:
    """One masked run in the results database: started (or found, to resume), its rows
    written batch by batch with a progress line, and its status set when it ends.

    Args:
        store: The :class:`robustlab.store.Store`.
        record: The run record (:func:`masked_record`).
        write: The store's writer of this task's rows (``store.write_saliency``...).
        progress: ``(total, what, unit, done)`` of a progress line, or None for none.
    """

    def __init__(
        self,
        store: Store,
        record: RunRecord,
        write: Callable[[str, pd.DataFrame], int],
        progress: tuple[int, str, str, int] | None = None,
    ):
        self.store, self.run_id, self._write = store, record.run_id, write
        self.resumed = not store.start_run(record)
        self.n_written = 0
        self._lines = None
        if progress is not None:
            from robustlab.execution.progress import LineProgress

            total, what, unit, done = progress
            self._lines = LineProgress(total, what=what, unit=unit, done=done)

    def write(self, rows: pd.DataFrame) -> None:
        self.n_written += self._write(self.run_id, rows)
        if self._lines is not None:
            self._lines.update(len(rows))

    @contextmanager
    def running(self) -> Iterator[StoredRun]:
        """The work: an interruption or an exception marks the run (what was written stays
        written, so a rerun resumes) and goes on up."""
        try:
            yield self
        except KeyboardInterrupt:
            self.store.finish_run(self.run_id, status="interrupted")
            raise
        except BaseException:
            self.store.finish_run(self.run_id, status="failed")
            raise
        finally:
            if self._lines is not None:
                self._lines.close()

    def finish(self, n_samples: int, skipped: Sequence[Sequence[str]]) -> None:
        self.store.finish_run(
            self.run_id, status="finished", n_samples=n_samples, skipped=list(skipped)
        )

    def summary(self) -> dict[str, Any]:
        """``run_id``, ``db``, ``resumed`` and ``n_written``: what every masked run reports."""
        return {
            "run_id": self.run_id,
            "db": str(self.store.path),
            "resumed": self.resumed,
            "n_written": self.n_written,
        }
