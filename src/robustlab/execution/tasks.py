"""Worker-side work units: decode a source image once, produce its cells, preprocess.

A task is one sample plus a group of its (shift, level) cells. The worker decodes the
image once, prepares it with the suite's protocol, and for each cell either applies the
shift on the fly (``as_stored(apply_shift(prepare(rgb)))``, exactly the pixels a
generated file holds) or reads the generated file back; then the model's transform turns
each image into a tensor. Decoding once per task is what makes on-the-fly evaluation
cheap: a 76-cell suite decodes each photo a handful of times, not 76 times.

Everything here must be picklable (spawned workers) and use no global random state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.cells import Cell, as_cells, level_key
from robustlab.errors import CellSkipped
from robustlab.files.safety import file_inside, outside, why_not_inside
from robustlab.settings import ToolSettings
from robustlab.store.schema import CLEAN_SHIFT

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    """One sample (its index in the run's samples) and a group of its cells; the cells
    are :class:`~robustlab.cells.Cell` values, whatever pairs they were given as."""

    sample_index: int
    cells: tuple[Cell, ...]

    def __post_init__(self):
        object.__setattr__(self, "cells", as_cells(self.cells))


class CellImages:
    """Makes the uint8 image of each cell of one sample (on the fly or from disk).

    Uses :mod:`robustlab.pipeline` for every step (``load_prepared``, ``shift_context``,
    ``apply_shift``, ``as_stored``, ``cell_path``/``decode``), the same functions
    ``robustlab generate`` uses, so both paths give identical pixels.

    Args:
        protocol: The suite's :class:`~robustlab.suites.Protocol`.
        seed: Global seed of the seed rule.
        generated_root: A folder written by ``robustlab generate``; shifted cells are read
            from it instead of being computed. The clean cell always comes from the source.
        donors: Every sample of the data set (not only those evaluated: the donor pool
            must not depend on which samples a run covers), for shifts with a donor rule;
            :class:`robustlab.shifts.scenes.DonorPool` decides who may be a donor.
        with_mask: Load each sample's mask (scene shifts need one).
        generated_skips: For a generated folder, why its generate run made no file for a
            ``(sample id, shift, level)`` (the manifest's failures, e.g. "object touches
            every border") or for any cell of a sample id (``(id, None, None)``: its
            skipped inputs). Such a missing file is that skip, with that reason, not a
            "generated file missing" (which a rerun retries, the user may restore it).
        expected: For a generated folder, the content hash each cell file must have
            (:class:`robustlab.files.hashes.Digests`): a file whose bytes differ, or
            that has none, is skipped with the reason, never scored as its cell.

        settings: The run's tool settings (:class:`~robustlab.settings.
            ToolSettings`, resolved by the planner: the ones its record describes); every
            cell is computed with them wherever this object is unpickled, so a worker's own
            environment never changes a pixel. None: the environment of the process that
            builds this object.
    """

    def __init__(
        self,
        protocol,
        seed: int,
        generated_root: str | Path | None = None,
        donors: Sequence | None = None,
        with_mask: bool = False,
        generated_skips: dict[tuple[str, str | None, str | None], str] | None = None,
        expected=None,
        settings: ToolSettings | None = None,
    ):
        self.protocol = protocol
        self.expected = expected
        self.generated_skips = dict(generated_skips or {})
        self.seed = int(seed)
        self.generated_root = Path(generated_root) if generated_root is not None else None
        self.with_mask = with_mask
        self.settings = settings if settings is not None else ToolSettings.from_environment()
        self.donors = None
        if donors is not None:
            from robustlab.shifts.scenes import DonorPool

            self.donors = donors if isinstance(donors, DonorPool) else DonorPool(donors)

    def base(self, sample):
        """Decode and prepare the source once: a ``pipeline.Prepared`` (rgb = clean cell)."""
        from robustlab.pipeline import load_prepared

        return load_prepared(
            sample, self.protocol, with_mask=self.with_mask and sample.mask_path is not None
        )

    def cell(
        self, sample, prepared, shift: str, level: Any, attributes: dict | None = None
    ) -> np.ndarray:
        """HxWx3 uint8 pixels of one cell (an RGBA result keeps its colour channels).

        ``attributes``: a dict that an attribute edit computed on the fly fills with what
        it achieved (``ctx["attributes"]``); a generated folder's values are in its
        ``attributes.csv`` instead.
        """
        from robustlab import pipeline

        if shift == CLEAN_SHIFT:
            return prepared.rgb
        if self.generated_root is not None:
            path = pipeline.cell_path(self.generated_root, sample, shift, level, self.protocol)
            if outside(self.generated_root, path):  # robustlab.files.safety' link rule
                raise CellSkipped("the generated file is a link out of the generated folder")
            try:
                data = Path(path).read_bytes()
            except FileNotFoundError:
                why = self.generated_skips.get(
                    (str(sample.id), shift, level_key(level))
                ) or self.generated_skips.get((str(sample.id), None, None))
                if why is None:
                    raise
                raise CellSkipped(why) from None
            if self.expected is not None:
                self._check_content(sample.id, shift, level, data)
            img = pipeline.decode(data)
        else:
            sh = pipeline.resolve_shift(shift, getattr(self.protocol, "preset", None))
            ctx = None
            if sh.needs or prepared.mask is not None or sh.extra.get("donor_rule"):
                ctx = pipeline.shift_context(
                    sample,
                    prepared,
                    sh,
                    level,
                    self.seed,
                    self.protocol,
                    self.donors,
                    settings=self.settings,
                )
            if attributes is not None:
                ctx = {**(ctx or {}), "attributes": attributes}
            shifted = pipeline.apply_shift(prepared.rgb, sample.id, sh, level, self.seed, ctx)
            img = pipeline.as_stored(shifted, self.protocol)
        return img[..., :3] if img.shape[2] == 4 else img

    def _check_content(self, sample_id: str, shift: str, level: Any, data: bytes) -> None:
        """Skip a generated file whose bytes are not the ones generate wrote."""
        from robustlab.files.hashes import digest

        want = self.expected.get(sample_id, shift, level)
        if want is None:
            raise CellSkipped(
                "generate recorded no content hash for this file (written by a killed "
                "run, or not by generate): rerun generate to check it"
            )
        got = digest(data)
        if got != want:
            raise CellSkipped(
                f"the generated file's content is not what generate wrote (BLAKE2b "
                f"{got[:12]}..., recorded {want[:12]}...): rerun generate to draw it again"
            )


def model_input(preprocessing, img: np.ndarray, protocol=None):
    """The uint8 CxHxW tensor a model sees of a cell's image, as ``protocol``'s view says.

    First the view's own resize and centre crop of the stored image (``view_resize``,
    ``view_crop``: bilinear, torchvision's ``Resize``/``CenterCrop`` arithmetic), then the
    model's step: its resize only (``view="resize"``) or its whole eval transform
    (``view="model"``). No protocol: the model's resize only (ImageNet-C's view).
    """
    view = getattr(protocol, "view", "resize")
    v_resize = getattr(protocol, "view_resize", None)
    v_crop = getattr(protocol, "view_crop", None)
    if v_resize or v_crop:
        from robustlab.data.images import array_to_rgb
        from robustlab.models.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing

        img, _ = array_to_rgb(img)
        if v_resize:
            size = int(v_crop or v_resize)
            pct = size / int(v_resize)
            step = Preprocessing(size, pct, "bilinear", IMAGENET_MEAN, IMAGENET_STD)
            img = step.resize_crop(img, crop=bool(v_crop))
        if v_crop and not v_resize:
            h, w = img.shape[:2]
            c = int(v_crop)
            if h < c or w < c:
                raise CellSkipped(f"{w}x{h} image is smaller than the protocol's view crop {c}")
            top, left = round((h - c) / 2.0), round((w - c) / 2.0)
            img = img[top : top + c, left : left + c]
    return preprocessing.to_uint8(img, crop=view == "model")


class ArchiveImages(CellImages):
    """Cells of a published ImageNet-E archive (:mod:`robustlab.data.imagenet_e`).

    The clean cell is the ``ori/`` file, every other cell the file of the same stem in the
    cell's level folder; files are read as they are (no frame: the archive's images are
    the benchmark's pixels), then seen through the protocol's view, by default ImageNet-E's
    rule (:data:`robustlab.suites.IMAGENET_E_VIEW`), the one robustlab's own ImageNet-E
    folders are evaluated with too.

    Args:
        root: The archive folder.
        folders: (shift, level) -> level folder name.
        protocol: Another view (``--protocol``); its frame must be none.
    """

    def __init__(self, root: str | Path, folders: dict[tuple[str, str], str], protocol=None):
        from robustlab.suites import ARCHIVE_PROTOCOL

        super().__init__(protocol or ARCHIVE_PROTOCOL, 0)
        self.root = Path(root)
        self.folders = dict(folders)

    def cell(
        self, sample, prepared, shift: str, level: Any, attributes: dict | None = None
    ) -> np.ndarray:
        from robustlab import pipeline

        if shift == CLEAN_SHIFT:
            return prepared.rgb
        cell = Cell(shift, level)
        folder = self.folders.get(cell.stored)
        if folder is None:
            raise CellSkipped(f"{cell.folder}: the archive has no folder for this cell")
        path = self.path(sample, shift, level)
        if path is None:
            raise CellSkipped(self.missing(sample, folder))
        img = pipeline.decode(path.read_bytes())
        return img[..., :3] if img.shape[2] == 4 else img

    @staticmethod
    def _candidates(sample, folder: str) -> list[str]:
        """The names a level file of ``sample`` may have in the archive, in order."""
        name = Path(sample.id)
        names = [name.name, name.stem + ".png", name.stem + ".jpg", name.stem + ".JPEG"]
        return [f"{folder}/{c}" for c in dict.fromkeys(names)]

    def path(self, sample, shift: str, level: Any) -> Path | None:
        """The archive file of one shifted cell (any of the names the archive uses), or None."""
        folder = self.folders.get(Cell(shift, level).stored)
        if folder is None:
            return None
        for candidate in self._candidates(sample, folder):
            # robustlab.files.safety' link rule: never a file a link leads to outside the archive
            path = file_inside(self.root, candidate)
            if path is not None:
                return path
        return None

    def missing(self, sample, folder: str) -> str:
        """Why ``folder`` gives no file for ``sample``: the first candidate name that is
        there but unusable (a link out of the archive says so), else "missing"."""
        for candidate in self._candidates(sample, folder):
            why = why_not_inside(self.root, candidate)
            if why != "missing":
                return f"{candidate}: {why}"
        return f"{folder}/{Path(sample.id).stem}.png: missing from the archive"


class PublishedImages(CellImages):
    """Cells of a published benchmark folder (:mod:`robustlab.data.published`).

    Every cell is the file of the sample's id in the cell's folder, decoded and prepared
    with the layout's protocol (ImageNet-C and ImageNet-9: a center crop of 224 that leaves
    their 224x224 files as they are). An alpha plane, as in XIMAGENET-12's transparent
    PNGs, is dropped as Keras' ``load_img`` and Pillow's ``convert("RGB")`` drop it in the
    official code, leaving the colours stored under it (robustlab's own ``transparent``
    cell composites on white instead; docs/fidelity.md). The clean cell is the clean
    folder's file, when the layout has one.

    Args:
        root: The data folder.
        folders: (shift, level) -> cell folder relative to ``root``.
        clean: The clean folder relative to ``root``, or None.
        names: (folder, sample id) -> file inside the folder where it is not named like the
            id (only these few: the rest is found by name, so workers get a small object
            even for ImageNet-C's 3.75 million files).
        protocol: The layout's :class:`~robustlab.suites.Protocol`.
    """

    def __init__(
        self,
        root: str | Path,
        folders: dict[tuple[str, Any], str],
        clean: str | None,
        names: dict[tuple[str, str], str] | None = None,
        protocol=None,
    ):
        from robustlab.suites import Protocol

        super().__init__(protocol or Protocol(resize=None, crop=None, format="png"), 0)
        self.root = Path(root)
        self.folders = {Cell(*cell).stored: f for cell, f in folders.items()}
        self.clean = clean
        self.names = dict(names or {})

    def base(self, sample):
        """The decoded clean file, None when the layout (or this sample) has none, or the
        ImageError of an unreadable one: the shifted cells are read on their own, so a
        missing or broken original costs only the clean cell."""
        from robustlab.data.images import ImageError
        from robustlab.pipeline import Prepared

        path = self.path(sample, CLEAN_SHIFT, 0)
        if path is None:
            return None
        try:
            return Prepared(self._read(path))
        except ImageError as exc:
            return exc

    def cell(
        self, sample, prepared, shift: str, level: Any, attributes: dict | None = None
    ) -> np.ndarray:
        if shift == CLEAN_SHIFT:
            if prepared is None:
                where = f"{self.clean}/" if self.clean else "this layout (it has no clean set)"
                raise CellSkipped(f"no clean image in {where}")
            if isinstance(prepared, Exception):
                raise prepared
            return prepared.rgb
        path = self.path(sample, shift, level)
        if path is None:
            folder = self.folders.get(Cell(shift, level).stored)
            if folder is None:
                raise CellSkipped("the data folder has no folder for this cell")
            rel = f"{folder}/{self.names.get((folder, sample.id), sample.id)}"
            why = why_not_inside(self.root, rel)
            if why == "missing":
                raise CellSkipped(f"no file for this image in {folder}/")
            raise CellSkipped(f"{rel}: {why}")
        return self._read(path)

    def _read(self, path: Path) -> np.ndarray:
        from robustlab.data.images import read_image
        from robustlab.pipeline import prepare

        return prepare(read_image(path).rgb, self.protocol)

    def path(self, sample, shift: str, level: Any) -> Path | None:
        """The file of one cell of a sample, or None when its folder lacks it."""
        folder = self.clean if shift == CLEAN_SHIFT else self.folders.get(Cell(shift, level).stored)
        if folder is None:
            return None
        # The link rule: only a regular file whose real path stays inside the data folder.
        return file_inside(self.root, f"{folder}/{self.names.get((folder, sample.id), sample.id)}")


class NpyImages(CellImages):
    """Cells of a CIFAR-10-C style release (:mod:`robustlab.data.release_npy`): the cell
    ``(corruption, severity)`` of sample ``k`` is row ``(severity - 1) * n + k`` of
    ``<corruption>.npy``, read through a memory map. The release has no clean images.

    Args:
        root: The release folder.
        files: Corruption -> its ``.npy`` file name (the checked ones).
        n: Images per severity.
        protocol: Applied to each row (the layout's: none, the model's resize follows).
    """

    def __init__(self, root: str | Path, files: dict[str, str], n: int, protocol=None):
        from robustlab.data.release_npy import RowReader
        from robustlab.suites import Protocol

        super().__init__(protocol or Protocol(resize=None, crop=None, format="png"), 0)
        self.files = dict(files)
        self.n = int(n)
        self.reader = RowReader(root)

    def base(self, sample):
        return None

    def row(self, sample, level: Any) -> int:
        """The row of ``sample`` (id: its index, as text) at severity ``level``."""
        return (int(level) - 1) * self.n + int(sample.id)

    def cell(
        self, sample, prepared, shift: str, level: Any, attributes: dict | None = None
    ) -> np.ndarray:
        from robustlab.pipeline import prepare

        if shift == CLEAN_SHIFT:
            raise CellSkipped("no clean image in this layout (it has none)")
        file = self.files.get(shift)
        if file is None:
            raise CellSkipped("the data folder has no file for this corruption")
        return prepare(self.reader.image(file, self.row(sample, level)), self.protocol)


# Cell index of an ``errors`` entry that is a note, not a failure: the sample was evaluated,
# but is degenerate (``Prepared.degenerate``); the runner counts and stores it apart.
NOTE = -2


class TaskDataset:
    """A map-style dataset over tasks, for ``torch.utils.data.DataLoader``.

    Each item is ``(task_index, tensor K x C x H x W or None, errors)``. Unreadable images
    and failing cells come back as ``(cell index or -1 for the whole sample, reason)``
    instead of raising, so one bad file never stops a run; the runner counts and lists them.
    A degenerate source that is still evaluated (a 5x5 image) adds ``(NOTE, note)``.
    A fourth element lists ``(cell index, attributes dict)`` for cells whose shift reported
    what it achieved (the ImageNet-E attribute edits).
    """

    def __init__(
        self,
        samples: Sequence,
        tasks: Sequence[Task],
        images: CellImages,
        transform: Callable[[np.ndarray], Any],
    ):
        self.samples = samples
        self.tasks = tasks
        self.images = images
        self.transform = transform

    def __len__(self) -> int:
        return len(self.tasks)

    def _base(self, i: int):
        """``(task, sample, prepared photo, None)``, or, for a photo that cannot be read,
        ``(task, sample, None, row)`` where ``row`` is what ``__getitem__`` returns: every
        cell of the task skipped with the reason."""
        from robustlab.data.images import ImageError

        task = self.tasks[i]
        sample = self.samples[task.sample_index]
        try:
            return task, sample, self.images.base(sample), None
        except ImageError as exc:
            return task, sample, None, (i, None, [(-1, exc.reason)], [])
        except (OSError, CellSkipped) as exc:
            return task, sample, None, (i, None, [(-1, f"unreadable: {exc}")], [])

    def __getitem__(self, i: int):
        """``(i, tensor of the cells that worked, [(cell index or -1, reason), ...],
        [(cell index, measured attributes), ...])``."""
        import torch

        from robustlab.data.images import ImageError

        task, sample, base, failed = self._base(i)
        if failed is not None:
            return failed
        tensors, errors, measured = [], degenerate_notes(base), []
        for j, cell in enumerate(task.cells):
            attrs: dict = {}
            try:
                img = self.images.cell(sample, base, cell.shift, cell.level, attrs)
            except FileNotFoundError:
                errors.append((j, f"{cell.folder}: generated file missing"))
                continue
            except (OSError, CellSkipped, ImageError) as exc:  # skips; others are bugs
                errors.append((j, f"{cell.folder}: {exc}"))
                continue
            t = self.transform(img)
            tensors.append(t if isinstance(t, torch.Tensor) else torch.as_tensor(t))
            if attrs:
                measured.append((j, attrs))
        return i, (pack(tensors) if tensors else None), errors, measured


def degenerate_notes(base) -> list[tuple[int, str]]:
    """``[(NOTE, note)]`` for a degenerate prepared source, else ``[]``."""
    note = getattr(base, "degenerate", "")
    return [(NOTE, note)] if note else []


def pack(tensors: Sequence) -> Any:
    """``torch.stack(tensors)``, made for the hand-over of a task's cells to the model.

    The model transform gives each cell as a CxHxW view of an HxWxC uint8 image; torch's
    copy of such a view into a stack costs more than some corruptions (about 0.2 ms per
    224x224 cell, 16 ms per ImageNet-C task). OpenCV splits the channels into the planes
    of the result about ten times faster, with the same bytes. In a DataLoader worker the
    result is allocated in shared memory, as torch's ``default_collate`` does, so sending
    it to the main process does not copy it once more. Anything else (another dtype,
    layout or channel count) goes to ``torch.stack``.

    Cells of different sizes (a ``generate --keep-size`` folder holds each photo at its
    own size, and a shift may change a cell's size) cannot be stacked: they come back as
    a list of 1xCxHxW tensors, one per cell, and the runner batches each size on its own.
    """
    import torch

    first = tensors[0]
    shape = tuple(first.shape)
    if any(tuple(t.shape) != shape for t in tensors):
        return [t[None] for t in tensors]
    if not all(_is_hwc_view(t, shape) for t in tensors):
        return torch.stack(list(tensors))
    import cv2

    numel = len(tensors) * first.numel()
    if torch.utils.data.get_worker_info() is not None:
        storage = first._typed_storage()._new_shared(numel, device=first.device)
        out = first.new(storage).view(len(tensors), *shape)
    else:
        out = torch.empty((len(tensors), *shape), dtype=torch.uint8)
    planes = out.numpy()
    for j, t in enumerate(tensors):
        cv2.split(t.permute(1, 2, 0).numpy(), list(planes[j]))
    return out


def _is_hwc_view(t: Any, shape: tuple) -> bool:
    """A CPU uint8 CxHxW tensor (C of 2 to 4) whose memory is a contiguous HxWxC image."""
    import torch

    return (
        isinstance(t, torch.Tensor)
        and t.dtype == torch.uint8
        and t.device.type == "cpu"
        and tuple(t.shape) == shape
        and len(shape) == 3
        and 1 < shape[0] <= 4
        and t.permute(1, 2, 0).is_contiguous()
    )


def worker_init(_worker_id: int) -> None:
    """One thread per worker: the workers already run in parallel with the forward pass."""
    import torch

    torch.set_num_threads(1)
    try:
        import cv2

        cv2.setNumThreads(1)
    except ImportError:  # pragma: no cover
        pass
