"""``generate cifar-c --out-layout npy``: the cells go straight into the release's arrays.

Why: CIFAR-10-C is used as its ``.npy`` arrays (RobustBench loads them), and writing a
PNG file per cell first costs about 1.1 ms per file at 32x32 (Pillow's encoder and the
atomic write), ten times what the corruption costs: 95 files per photo, 950,000 for the
CIFAR-10 test set. With this layout the workers write each photo's 5 x 19 images into
row ``k`` of memory-mapped arrays and no cell file is made.

How it stays correct when things go wrong (the folder layout's guarantees, kept):

- **Nothing that looks finished is half written.** The arrays grow in
  ``<out>/.release-partial/`` (hidden: every reader's walk skips it): one
  ``<shift>.npy`` of ``5 x N`` rows per shift, ``N`` the planned photos in id order, and
  ``plan.json`` naming those photos, the shifts and the image shape. Only when the run
  ends are they moved into ``<out>/<shift>.npy`` (a rename when every photo made all its
  cells, else a compacted copy without the missing rows, so rows line up with
  ``labels.npy``), ``labels.npy`` first.
- **Resume.** A photo counts as done once its rows are on disk: the driver appends its id
  to ``done.txt`` after ``fsync``-ing the arrays, in batches, so after a crash (of a
  worker, the driver or the machine) a photo is either recorded with its rows durable or
  drawn again, with the same seed and so the same bytes. A rerun with other photos or
  shifts starts a new partial state and copies in every row the finished arrays already
  hold for them (the manifest lists the photo of each row), so nothing is drawn twice.
- **Same pixels as the folders.** The cells are the same function of the same seed;
  tests/test_release_rows.py checks the arrays against the folder layout's, byte for byte.

Local folders and the local backend only: rows written through memory maps need one
file system that every writer maps (a Ray cluster's nodes or an object store do not).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from robustlab.data.release_npy import LABELS, SEVERITIES, read_header, write_arrays, write_labels
from robustlab.data.images import ImageError
from robustlab.errors import InputError
from robustlab.files.atomic import fsync_path

log = logging.getLogger(__name__)

PARTIAL = ".release-partial"
PLAN = "plan.json"
DONE = "done.txt"
# Photos recorded per fsync of the arrays: a crash redraws at most this many.
SYNC_EVERY = 256


@dataclass
class ReleaseRows:
    """Where a worker writes a photo's cells: row ``(level - 1) * n + index[id]`` of the
    partial ``<shift>.npy``, one ``pwrite`` per cell. Not a memory map: a map keeps every
    page it touched in the writer's resident set (3.1 GB at the end of a 10,000-photo run,
    the whole output), where written pages stay in the page cache, which the kernel
    reclaims once they are on disk. Sent to each worker once; the files are opened there
    on first use and never pickled."""

    folder: Path
    index: dict[str, int]
    shape: tuple[int, int, int]
    _files: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False, compare=False)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_files": {}}

    def __del__(self) -> None:
        for fd, _ in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def n(self) -> int:
        return len(self.index)

    def write(self, sample_id: str, shift: str, level, img: np.ndarray) -> None:
        """Put one cell's image in its row (ImageError for an image of another shape: that
        cell fails, and the photo is left out of the arrays)."""
        if img.shape != self.shape or img.dtype != np.uint8:
            raise ImageError(
                f"a {img.dtype} {'x'.join(map(str, img.shape))} image; the release's rows "
                f"are uint8 {'x'.join(map(str, self.shape))}"
            )
        opened = self._files.get(shift)
        if opened is None:
            path = self.folder / f"{shift}.npy"
            _, _, offset = read_header(path)
            opened = self._files[shift] = (os.open(path, os.O_WRONLY), offset)
        fd, offset = opened
        row = (int(level) - 1) * self.n + self.index[sample_id]
        data = np.ascontiguousarray(img).data
        if os.pwrite(fd, data, offset + row * data.nbytes) != data.nbytes:
            raise OSError(f"short write to {self.folder / shift}.npy")


def release_shape(protocol) -> tuple[int, int, int]:
    """The image shape every row has: the protocol's square frame (``cifar-c``: 32x32)."""
    if protocol.frame == "squash" and protocol.resize and not protocol.crop:
        return (int(protocol.resize), int(protocol.resize), 3)
    if protocol.crop:
        return (int(protocol.crop), int(protocol.crop), 3)
    raise InputError(
        "--out-layout npy needs a protocol with one image size (a square frame or a crop)",
        hint="leave out --keep-size",
    )


class PartialRelease:
    """The driver's side: the partial arrays, which photos are done, and the final move."""

    def __init__(
        self,
        root: Path,
        ids: Sequence[str],
        shifts: Sequence[str],
        shape,
        labels: dict[str, int],
    ):
        self.root = Path(root)
        self.folder = self.root / PARTIAL
        self.ids = list(ids)
        self.shifts = list(shifts)
        h, w, c = (int(v) for v in shape)
        self.shape = (h, w, c)
        self.done: set[str] = set()
        self.labels = labels  # photo id -> its label in labels.npy
        self._pending: list[str] = []

    @property
    def n(self) -> int:
        return len(self.ids)

    def _plan(self) -> dict:
        return {"samples": self.ids, "shifts": self.shifts, "shape": list(self.shape)}

    def open(self, previous: dict | None) -> None:
        """Resume the partial state of this plan, or start one (adopting the rows of the
        finished arrays that ``previous``, the manifest's release record, lists)."""
        plan_file = self.folder / PLAN
        try:
            found = json.loads(plan_file.read_text())
        except (OSError, ValueError):
            found = None
        if found == self._plan():
            done = (self.folder / DONE).read_text() if (self.folder / DONE).is_file() else ""
            wanted = set(self.ids)
            self.done = {line for line in done.splitlines() if line in wanted}
            # A run killed while moving the finished arrays into place left some moved:
            # those count when every photo was done and the moved file has this shape.
            gone = [s for s in self.shifts if not self._usable(s)]
            if not gone or (self.done == wanted and all(self._placed(s) for s in gone)):
                log.info(
                    "resuming the release arrays: %d of %d photos done", len(self.done), self.n
                )
                return
            self.done = set()
        if self.folder.exists():
            log.info("the partial release arrays were made for other photos or shifts: restarted")
            shutil.rmtree(self.folder)
        self.folder.mkdir(parents=True)
        for shift in self.shifts:  # zero-filled (sparse) files of the plan's full size
            np.lib.format.open_memmap(
                self.folder / f"{shift}.npy",
                mode="w+",
                dtype=np.uint8,
                shape=(5 * self.n, *self.shape),
            ).flush()
        (self.folder / DONE).write_text("")
        self._adopt(previous)
        plan_file.write_text(json.dumps(self._plan()))
        fsync_path(self.folder, folder=True)

    def _usable(self, shift: str) -> bool:
        """The partial file of ``shift`` is there with this plan's shape."""
        return self._fits(self.folder / f"{shift}.npy")

    def _placed(self, shift: str) -> bool:
        """The finished ``<shift>.npy`` is there with this plan's shape (moved by finish)."""
        return self._fits(self.root / f"{shift}.npy")

    def _fits(self, path: Path) -> bool:
        try:
            shape, dtype, _ = read_header(path)
        except (OSError, ValueError):
            return False
        return dtype == np.uint8 and shape == (5 * self.n, *self.shape)

    def _adopt(self, previous: dict | None) -> None:
        """Copy the rows that the finished arrays hold for planned photos (every planned
        shift there, same shape), so a rerun with more photos draws only the new ones."""
        rows = (previous or {}).get("rows") or []
        old = {sid: k for k, sid in enumerate(rows)}
        keep = [(i, old[sid]) for i, sid in enumerate(self.ids) if sid in old]
        if not keep:
            return
        finals = {s: self.root / f"{s}.npy" for s in self.shifts}
        try:
            headers = {s: read_header(p) for s, p in finals.items()}
        except (OSError, ValueError):
            return
        if any(h[0] != (5 * len(rows), *self.shape) for h in headers.values()):
            return
        for shift, path in finals.items():
            src = np.load(path, mmap_mode="r", allow_pickle=False)
            dst = np.load(self.folder / f"{shift}.npy", mmap_mode="r+", allow_pickle=False)
            for lv in SEVERITIES:
                base_new, base_old = (lv - 1) * self.n, (lv - 1) * len(rows)
                for i, k in keep:
                    dst[base_new + i] = src[base_old + k]
            dst.flush()
            del src, dst
        self.done = {self.ids[i] for i, _ in keep}
        (self.folder / DONE).write_text("".join(f"{self.ids[i]}\n" for i, _ in keep))
        log.info("copied %d photos' rows from the finished arrays", len(keep))

    def target(self) -> ReleaseRows:
        return ReleaseRows(self.folder, {sid: i for i, sid in enumerate(self.ids)}, self.shape)

    def mark(self, sample_id: str) -> None:
        """Record a photo whose every cell is in its rows (durable at the next sync)."""
        self._pending.append(sample_id)
        if len(self._pending) >= SYNC_EVERY:
            self.sync()

    def sync(self) -> None:
        """The arrays to disk, then the photos written since the last sync to ``done.txt``."""
        if not self._pending:
            return
        for shift in self.shifts:
            fsync_path(self.folder / f"{shift}.npy")
        with open(self.folder / DONE, "a") as fh:
            fh.write("".join(f"{sid}\n" for sid in self._pending))
            fh.flush()
            os.fsync(fh.fileno())
        self.done.update(self._pending)
        self._pending.clear()

    def finish(self, stale: Iterable[str] = ()) -> list[str]:
        """Move the arrays into place: the rows of the photos done with a label, in id
        order, and ``labels.npy``. Returns the photo ids of the rows. ``stale``: shifts of
        an earlier release of this folder left out now (their rows would not match)."""
        self.sync()
        labels = self.labels
        rows = [i for i, sid in enumerate(self.ids) if sid in self.done and sid in labels]
        ids = [self.ids[i] for i in rows]
        if not ids:  # as the folder layout does: no release of no image
            log.warning("no photo made all its cells: no .npy arrays written")
            return ids
        write_labels(self.root, [labels[sid] for sid in ids])
        if len(rows) == self.n:  # every photo: the partial arrays are the release
            for shift in self.shifts:
                if (self.folder / f"{shift}.npy").is_file():  # else moved by a killed finish
                    os.replace(self.folder / f"{shift}.npy", self.root / f"{shift}.npy")
        else:
            current: dict[str, np.ndarray] = {}  # one shift's map at a time (resident pages)

            def image(shift: str, severity: int, k: int) -> np.ndarray:
                if shift not in current:
                    current.clear()
                    path = self.folder / f"{shift}.npy"
                    current[shift] = np.load(path, mmap_mode="r", allow_pickle=False)
                return current[shift][(severity - 1) * self.n + rows[k]]

            write_arrays(self.root, self.shifts, len(rows), image, self.shape)
            current.clear()
        for shift in stale:
            if shift not in self.shifts and (self.root / f"{shift}.npy").is_file():
                (self.root / f"{shift}.npy").unlink()
                log.warning(
                    "%s.npy removed: its rows were an earlier release's photos, not these", shift
                )
        fsync_path(self.root, folder=True)
        return ids

    def remove(self) -> None:
        """Delete the partial state (after the manifest names the finished release)."""
        remove_partial(self.root)


def remove_partial(root: Path) -> None:
    """Delete the partial state under ``root``, if any."""
    shutil.rmtree(Path(root) / PARTIAL, ignore_errors=True)


def is_complete(root: Path, previous: dict | None, ids: Sequence[str], shifts, skipped) -> bool:
    """Whether the finished arrays already hold every planned photo that can be made:
    each is a row of the release the manifest records, or was skipped there (a rerun
    with changed sources is refused, so a skip stands), and every planned shift's file
    is there with that many rows."""
    if not previous or not previous.get("rows"):
        return False
    rows = set(previous["rows"])
    if not set(shifts) <= set(previous.get("shifts") or []):
        return False
    if any(sid not in rows and sid not in skipped for sid in ids):
        return False
    n = len(previous["rows"])
    for shift in shifts:
        try:
            shape, _, _ = read_header(root / f"{shift}.npy")
        except (OSError, ValueError):
            return False
        if shape[0] != 5 * n:
            return False
    return (root / LABELS).is_file()
