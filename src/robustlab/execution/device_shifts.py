"""Batched shifts on the model's side of the hand-over (``--shift-device cuda|cpu``).

On the exact path every worker decodes a photo, applies each cell's shift with numpy, JPEG
round-trips it and ships one image per cell. With a shift device the workers only decode
and prepare: each task ships one :class:`CleanTaskDataset` payload, a dict of

* ``image``: the prepared photo, (1, 3, H, W) uint8;
* ``scene``: for suites with masks, :func:`robustlab.shifts.batched.scenes.scene_inputs`
  (the prepared (H, W) bool mask, the object box, and why the exact path would skip the
  photo's mask or box scenes), else None;
* ``exact``: ``{cell index: (3, H, W) uint8}`` for the cells whose shift has no batched
  version (spatter, the donor scenes, ai_bg), made by the worker exactly as on the exact
  path (donors, configured tools and the protocol's storage included).

The main process (on ``--backend ray``: each model actor, on its own device, see
:mod:`robustlab.execution.ray`) gathers a group of tasks, applies each (shift, level) to
all their images at once with :mod:`robustlab.shifts.batched` on the device (the masks and
boxes travel with the images), does the protocol's JPEG round trip and the model's resize
there, and hands the model the same ``(index, tensor, errors, measured)`` items it gets
from workers, in order. Each image draws from its own seed-rule generator, so which
images share a group (the local prefetch, a Ray batch) does not change its pixels.

The pixels differ from the exact path (torch draws, float32 arithmetic, nvJPEG on CUDA),
so such a run has its own identity (:func:`describe` goes into the run id and the record).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from robustlab.cells import Cell
from robustlab.errors import CellSkipped, EnvironmentProblem, InputError
from robustlab.execution.tasks import TaskDataset, degenerate_notes
from robustlab.store.schema import CLEAN_SHIFT

if TYPE_CHECKING:
    from robustlab.shifts.batched.jpeg import RoundTrip

# Photos shifted together, by device type: on CUDA a shift's cost is mostly kernel
# launches (glass_blur's chained copies: about 60 launches per image row), paid once per
# group, so larger groups are faster there (benchmarks/README.md, "GPU checks").
DEFAULT_GROUPS = {"cpu": 64, "cuda": 256}


@dataclass(frozen=True)
class ShiftDevice:
    """Where and how batched shifts run.

    Attributes:
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        jpeg: ``cpu`` (default: libjpeg, also for CUDA batches: the protocol's bytes) or
            ``device`` (the device's codec: nvJPEG on CUDA, measurably not the protocol's).
        group: Tasks (photos) whose cells are shifted together (default by device type,
            :data:`DEFAULT_GROUPS`); larger groups mean fewer, larger tensor operations and
            more device memory (a group holds its photos' cells, about 150 KB each at
            224x224: 256 photos x 76 cells, about 2.9 GB). The pixels do not depend on it.
    """

    device: str
    jpeg: str = "cpu"
    group: int | None = None

    def __post_init__(self):
        from robustlab.shifts.batched import codec_name

        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            raise InputError(f"unknown shift device {self.device!r}; use cpu or cuda") from None
        if dev.type not in ("cpu", "cuda"):
            raise InputError(f"shifts run on cpu or cuda, not {self.device!r}")
        try:
            codec_name(dev, self.jpeg)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        if self.group is None:
            object.__setattr__(self, "group", DEFAULT_GROUPS[dev.type])
        if int(self.group) < 1:
            raise InputError(f"shift group must be at least 1, got {self.group}")

    @property
    def type(self) -> str:
        """``cpu`` or ``cuda``."""
        return torch.device(self.device).type

    def check_here(self) -> None:
        """Refuse a CUDA shift device in a process that has none, in one line.

        Not part of construction: a Ray driver describes the run for the cluster's GPUs,
        which it need not have itself (the model actors check on their own machine).

        Raises:
            EnvironmentProblem: ``cuda`` asked for and torch finds no CUDA device.
        """
        if self.type == "cuda" and not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"--shift-device {self.device}: no CUDA device here",
                hint="use --shift-device cpu, or leave it out",
            )

    def describe(self) -> dict:
        """What decides the pixels (part of the run id): path, device type, JPEG codec."""
        from robustlab.shifts.batched import codec_name

        dev = torch.device(self.device)
        return {
            "path": "torch",
            "device": dev.type,
            "jpeg": codec_name(dev, self.jpeg),
            "torch": torch.__version__.split("+")[0],
        }


# Suites whose shifts the shift device takes (batched, or made exactly by the workers).
DEVICE_TAGS = frozenset({"imagenet-c", "imagenet-c-extra", "ximagenet12", "imagenet9"})


def check_shifts(names: Iterable[str]) -> None:
    """Refuse shifts outside the ImageNet-C corruptions and the XIMAGENET-12 / ImageNet-9
    scenes (the attribute edits and synthesis report measurements or need tools that
    only the exact path's workers handle)."""
    from robustlab.shifts.registry import get_shift

    bad = [n for n in names if not (DEVICE_TAGS & get_shift(n).tags)]
    if bad:
        raise InputError(
            f"--shift-device applies ImageNet-C corruptions and XIMAGENET-12 / ImageNet-9 "
            f"scenes only; {', '.join(dict.fromkeys(bad))} cannot run there",
            hint="leave out --shift-device for this suite",
        )


def _tensor(img) -> torch.Tensor:
    return torch.from_numpy(img.copy()).permute(2, 0, 1).contiguous()


class CleanTaskDataset(TaskDataset):
    """Worker side: each task's prepared photo, its mask inputs and its unbatched cells."""

    def __getitem__(self, i: int):
        from robustlab.data.images import ImageError
        from robustlab.shifts.batched import has_batched
        from robustlab.shifts.batched.scenes import scene_inputs

        task, sample, base, failed = self._base(i)
        if failed is not None:
            return failed
        errors, measured, exact = degenerate_notes(base), [], {}
        for j, cell in enumerate(task.cells):
            if cell.shift == CLEAN_SHIFT or has_batched(cell.shift):
                continue
            attrs: dict = {}
            try:
                exact[j] = _tensor(self.images.cell(sample, base, cell.shift, cell.level, attrs))
            except (OSError, CellSkipped, ImageError) as exc:  # skips; others are bugs
                errors.append((j, f"{cell.folder}: {exc}"))
                continue
            if attrs:
                measured.append((j, attrs))
        payload = {
            "image": _tensor(base.rgb)[None],
            "scene": scene_inputs(base) if self.images.with_mask else None,
            "exact": exact,
        }
        return i, payload, errors, measured


def _model_size(preprocessing, h: int, w: int) -> tuple[int, int]:
    """(height, width) the model's resize (``resize_crop(crop=False)``) gives an h x w image."""
    from robustlab.models.preprocess import short_side_size

    th, tw = preprocessing.hw
    if th == tw and preprocessing.resize_mode == "shorter":
        return short_side_size(h, w, th)
    return th, tw


class DeviceShifts:
    """Turns the workers' clean images into the runner's per-task cell tensors.

    Args:
        preprocessing: The model's :class:`~robustlab.models.preprocess.Preprocessing` (its
            resize is reproduced on the device with Pillow's own coefficients).
        samples: The run's samples (ids key the seed rule).
        tasks: The planned tasks (cells per task).
        protocol: The suite protocol (JPEG round trip of shifted cells).
        seed: Global seed of the seed rule.
        settings: :class:`ShiftDevice`.
    """

    def __init__(
        self,
        preprocessing,
        samples: Sequence,
        tasks: Sequence,
        protocol,
        seed: int,
        settings: ShiftDevice,
    ):
        self.preprocessing = preprocessing
        self.samples = samples
        self.tasks = tasks
        self.protocol = protocol
        self.seed = int(seed)
        self.settings = settings
        self.device = torch.device(settings.device)

    def dataset(self, images) -> CleanTaskDataset:
        return CleanTaskDataset(self.samples, self.tasks, images, transform=None)

    def wrap(self, items: Iterable) -> Iterator:
        """The items of ``items`` in order, each clean image replaced by its task's cells."""
        group: list = []
        n_images = 0
        for item in items:
            group.append(item)
            n_images += item[1] is not None
            if n_images >= int(self.settings.group or 1):
                yield from self._shift(group)
                group, n_images = [], 0
        if group:
            yield from self._shift(group)

    def _stored(self, x: torch.Tensor, shifted: bool) -> RoundTrip:
        """The protocol's JPEG round trip (shifted cells only, as ``pipeline.as_stored``),
        started now: on libjpeg the host codes it while the device shifts the next cell."""
        from robustlab.pipeline import _format
        from robustlab.shifts.batched.jpeg import RoundTrip, jpeg_roundtrip_async

        if shifted and _format(self.protocol) == "jpeg":
            from robustlab.execution.codec_pool import codec_pool

            return jpeg_roundtrip_async(
                x, int(self.protocol.jpeg_quality), self.settings.jpeg, pool=codec_pool()
            )
        return RoundTrip.done(x)

    def _resize(self, x: torch.Tensor) -> torch.Tensor:
        """The model's resize (Pillow's coefficients on the device)."""
        from robustlab.shifts.batched._ops import PIL_FILTERS, pil_resize

        size = _model_size(self.preprocessing, *x.shape[-2:])
        if size == tuple(x.shape[-2:]):
            return x
        name = str(self.preprocessing.interpolation)
        if name in PIL_FILTERS:
            return pil_resize(x, size, name)
        host = x.permute(0, 2, 3, 1).cpu().numpy()  # e.g. nearest: Pillow itself, per image
        out = [
            torch.from_numpy(self.preprocessing.resize_crop(img, crop=False).copy()) for img in host
        ]
        return torch.stack(out).permute(0, 3, 1, 2).to(x.device)

    def _batch(self, shift: str, level, members, ids, clean: dict, scene: dict) -> torch.Tensor:
        """The shifted cells of ``members`` (photos the shift can use), before JPEG and
        resize; the masks and boxes of the scenes go along with the images."""
        from robustlab.shifts.batched import apply
        from robustlab.shifts.registry import get_shift

        x = torch.stack([clean[pos] for pos, _ in members])
        needs = get_shift(shift, batched=True).batched_needs
        masks = boxes = None
        if "masks" in needs:
            masks = torch.stack([scene[pos]["mask"] for pos, _ in members]).to(self.device)
        if "boxes" in needs:
            boxes = torch.tensor([scene[pos]["box"] for pos, _ in members], device=self.device)
        return apply(shift, level, x, ids, seed=self.seed, masks=masks, boxes=boxes)

    def _shift(self, group: list) -> Iterator:
        from robustlab.shifts.batched import has_batched
        from robustlab.shifts.batched.scenes import problem

        clean, scene, exact = {}, {}, {}
        for pos, (_, payload, _, _) in enumerate(group):
            if payload is not None:
                clean[pos] = payload["image"][0].to(self.device, non_blocking=True)
                scene[pos] = payload["scene"]
                exact.update({(pos, j): t for j, t in payload["exact"].items()})
        errors: dict[int, list] = {pos: list(item[2]) for pos, item in enumerate(group)}
        # (kind, shift, level, height, width) -> [(position in group, cell index)]
        cells: dict[tuple, list[tuple[int, int]]] = {}
        for pos, img in clean.items():
            for j, (shift, level) in enumerate(self.tasks[group[pos][0]].cells):
                if shift == CLEAN_SHIFT:
                    kind = "clean"
                elif (pos, j) in exact:
                    kind = "exact"
                elif not has_batched(shift):  # the worker failed it: its error is listed
                    continue
                else:
                    kind = "batched"
                    why = problem(shift, scene[pos], img.shape[-2:])
                    if why:  # the exact scene's skip reason for this photo
                        errors[pos].append((j, f"{Cell(shift, level).folder}: {why}"))
                        continue
                cells.setdefault((kind, shift, level, *img.shape[-2:]), []).append((pos, j))
        # Every cell's round trip is started before any is awaited, so the host's codec
        # threads work while the device shifts the cells after it.
        started: list[tuple[list[tuple[int, int]], RoundTrip]] = []
        for (kind, shift, level, _, _), members in cells.items():
            if kind == "clean":
                x = torch.stack([clean[pos] for pos, _ in members])
                started.append((members, self._stored(x, shifted=False)))
            elif kind == "exact":  # made (and stored) by the worker: only the model's resize
                x = torch.stack([exact[key] for key in members]).to(self.device)
                started.append((members, self._stored(x, shifted=False)))
            else:
                ids = [
                    self.samples[self.tasks[group[pos][0]].sample_index].id for pos, _ in members
                ]
                try:
                    x = self._batch(shift, level, members, ids, clean, scene)
                except CellSkipped as exc:  # a per-cell skip, as on the exact path
                    for pos, j in members:
                        errors[pos].append((j, f"{Cell(shift, level).folder}: {exc}"))
                    continue
                started.append((members, self._stored(x, shifted=True)))
        rows: dict[tuple[int, int], torch.Tensor] = {}
        for members, stored in started:
            out = self._resize(stored.result())
            for r, key in enumerate(members):
                rows[key] = out[r]
        for pos, (index, tensor, _, measured) in enumerate(group):
            errs = sorted(errors[pos], key=lambda e: e[0])  # in cell order, as a worker lists them
            if tensor is None:
                yield index, None, errs, measured
                continue
            n_cells = len(self.tasks[index].cells)
            kept = [rows[(pos, j)] for j in range(n_cells) if (pos, j) in rows]
            yield index, (torch.stack(kept) if kept else None), errs, measured
