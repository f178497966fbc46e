"""The CIFAR-10-C release layout beside a generated ``cifar-c`` folder.

``robustlab generate cifar-c`` writes the cells as PNG files (lossless, like the release's
arrays) in the usual ``<shift>/<level>/<class>/<file>`` folders and then, from those
files, the layout make_cifar_c.py releases and RobustBench loads: ``<shift>.npy`` holding
5 x N uint8 images in severity order and ``labels.npy`` (:mod:`robustlab.data.release_npy`).
Row k of every array is the k-th source image in id order that has all its cells; an image
missing a cell (an unreadable source) is left out of every array, so rows line up.

With ``--out-layout npy`` there are no cell files: :func:`open_rows`, :func:`marking` and
:func:`stale_shifts` drive :mod:`~robustlab.workflows.generate.release_rows`, where the
workers write the rows, from ``generate``'s run (which photos are done, which are drawn,
which are skipped for want of a label).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from robustlab.data.release_npy import SEVERITIES, write_release
from robustlab.pipeline import cell_path, decode
from robustlab.workflows.generate.release_rows import (
    PartialRelease,
    is_complete,
    release_shape,
    remove_partial,
)
from robustlab.workflows.generate.worker import SampleOutcome

log = logging.getLogger(__name__)

# The presets whose release is arrays rather than folders.
RELEASE_NPY_PRESETS = ("cifar-c",)


def release_labels(samples, label_space: str) -> dict[str, int]:
    """Photo id -> its integer label in ``label_space`` (a labels CSV's integer, else the
    class folder's index), for every photo that has one: ``labels.npy`` needs one per row,
    so a photo without is left out of the arrays (logged)."""
    from robustlab.data.labels import get_label_space

    space = get_label_space(label_space)
    out = {}
    for s in samples:
        try:
            out[s.id] = int(s.label if s.label is not None else space.index_of(s.class_name))
        except (KeyError, ValueError):
            log.info(
                "%s: left out of the .npy layout (class %r not in %s)",
                s.id,
                s.class_name,
                space.name,
            )
    return out


def write_release_arrays(plan, folder) -> list[str]:
    """Write the ``.npy`` layout of a finished ``cifar-c`` generate into its folder.

    Returns the files written (none, with a warning line, when the folder cannot hold a
    release: not a local folder, not every severity of a shift, or no image with a label).
    """
    from robustlab.files.outputs import LocalFolder

    if plan.protocol.preset not in RELEASE_NPY_PRESETS:
        return []
    if not isinstance(folder, LocalFolder):
        log.warning("the .npy release layout is written to local folders only; %s has none", folder)
        return []
    shifts = [n for n in plan.names if {lv for sh, lv in plan.cells if sh == n} == set(SEVERITIES)]
    if not shifts:
        log.warning("no .npy release layout: it needs all five severities of a corruption")
        return []
    root = folder.root
    known = release_labels(plan.samples, plan.suite.label_space)
    rows, labels = [], []
    for s in plan.samples:
        paths = {
            (n, lv): cell_path(root, s, n, lv, plan.protocol) for n in shifts for lv in SEVERITIES
        }
        if not all(p.is_file() for p in paths.values()):
            log.info("%s: left out of the .npy layout (a cell file is missing)", s.id)
            continue
        if s.id not in known:
            continue
        rows.append(paths)
        labels.append(known[s.id])
    if not rows:
        log.warning("no .npy release layout: no generated image has a label")
        return []
    shape = decode(rows[0][(shifts[0], 1)].read_bytes()).shape

    def image(shift: str, severity: int, k: int) -> np.ndarray:
        img = decode(rows[k][(shift, severity)].read_bytes())
        if img.shape != shape:
            raise ValueError(f"{rows[k][(shift, severity)]} is {img.shape}, not {shape}")
        return img

    written = write_release(root, shifts, len(rows), image, labels, shape)
    log.info(
        "wrote the .npy release layout: %d images x 5 severities in %d files",
        len(rows),
        len(written),
    )
    return written


def open_rows(
    plan, root: Path, prev: dict | None, result, collect
) -> tuple[PartialRelease | None, list]:
    """``--out-layout npy``: the partial arrays to write into and the photos still to draw;
    (None, []) when the finished arrays hold every photo already. Photos done are
    collected as existing."""
    labels = plan.labels  # computed by the plan, which refused a folder without any
    for s in plan.samples:  # never drawn: a row of the arrays needs its label
        if s.id not in labels:
            collect(SampleOutcome(s.id, skip_reason=no_label(s, plan.suite.label_space)))
    ids = [s.id for s in plan.samples if s.id in labels]
    prev = prev or {}
    earlier = prev.get("release") or {}
    skipped = {d.get("id") for d in prev.get("skipped_inputs", [])}
    skipped |= {d.get("id") for d in prev.get("failures", [])}
    if is_complete(root, earlier, ids, plan.names, skipped):
        log.info("the release arrays in %s hold every photo already", root)
        # a run killed after its manifest named the arrays, before it removed its partial
        remove_partial(root)
        rows = set(earlier["rows"])
        for sid in ids:
            if sid in rows:
                collect(SampleOutcome(sid, existing=len(plan.cells)))
        # The photos left out stay left out, with their reasons (same sources, same outcome).
        wanted = set(ids) - rows
        result.skipped_inputs += [
            (d["id"], d["reason"]) for d in prev.get("skipped_inputs", []) if d["id"] in wanted
        ]
        result.failures += [
            (d["id"], d["shift"], d["level"], d["reason"])
            for d in prev.get("failures", [])
            if d["id"] in wanted
        ]
        result.release = earlier
        return None, []
    partial = PartialRelease(root, ids, plan.names, release_shape(plan.protocol), labels)
    partial.open(earlier)
    todo = []
    for s in plan.samples:
        if s.id in partial.done:
            collect(SampleOutcome(s.id, existing=len(plan.cells)))
        elif s.id in labels:
            todo.append(s)
    return partial, todo


def no_label(sample, label_space: str) -> str:
    """Why a photo is not drawn into the arrays: no label for ``labels.npy``."""
    return (
        f"class {sample.class_name!r} is not in {label_space} and no labels CSV gives an "
        "integer label: labels.npy needs one per row"
    )


def marking(collect, partial: PartialRelease, n_cells: int):
    """The tally, then a photo whose every cell is in its rows is recorded as done."""

    def mark(o: SampleOutcome) -> None:
        collect(o)
        if o.written == n_cells and not o.failures and not o.skip_reason:
            partial.mark(o.id)

    return mark


def stale_shifts(prev: dict | None, partial: PartialRelease) -> list[str]:
    """Shifts of the folder's earlier release that this one leaves out."""
    earlier = ((prev or {}).get("release") or {}).get("shifts") or []
    return [s for s in earlier if s not in partial.shifts]
