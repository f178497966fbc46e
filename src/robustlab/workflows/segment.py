"""Segmentation models on the background scenarios: predicted foreground vs the object mask.

XIMAGENET-12 evaluates segmentation networks as well as classifiers (REFERENCE.md
section 2): when the background is blurred, recoloured or replaced, does the network still
find the object? Each scenario image goes through the network; every pixel whose arg-max
class is not ``background`` counts as foreground and is compared with the scenario's own
object mask. Per-image counts (tp, fp, fn, tn) are kept, so
:func:`robustlab.metrics.segmentation.summarize` can score any grouping (per scenario,
per class) from accumulated pixels.

The scenario images are made by the same :class:`robustlab.run.tasks.CellImages` as
classifier runs (same seed rule, same pixels as a generated folder). Which mask is the
truth depends on what a scenario does to the object, a table kept here as data:

- the object stays where it is (blur, colour, brightness, segmented, transparent,
  only_fg, the ImageNet-9 mixes, ai_bg): the sample's prepared mask;
- ``random_bg`` moves the object: its own draw (``Shift.draw``) with the cell's
  generator gives the placement, so the moved mask exactly;
- ``no_fg``, ``only_bg_b``, ``only_bg_t`` remove the object: nothing to segment, so these
  cells are skipped (counted, with the reason).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustlab.errors import CellSkipped, InputError, MissingResourceError
from robustlab.store.schema import CLEAN_SHIFT

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TORCHVISION_SEGMENTATION = (
    "lraspp_mobilenet_v3_large",
    "deeplabv3_mobilenet_v3_large",
    "deeplabv3_resnet50",
    "deeplabv3_resnet101",
    "fcn_resnet50",
    "fcn_resnet101",
)


class SegmentationModel:
    """A torchvision-style segmentation network: image in, foreground mask out.

    Args:
        module: ``torch.nn.Module`` returning ``(B, K, H, W)`` logits, or a dict holding
            them under ``"out"`` (torchvision's segmentation models).
        spec: The model spec, as for classifiers (e.g. ``"torchvision:lraspp_mobilenet_v3_large"``).
        mean, std: Input normalisation on the [0, 1] scale (torchvision: ImageNet's).
        background: The class index that means "not an object" (VOC: 0).
        device: ``cpu``/``cuda``/None (cuda when available).
        weights_hash: Recorded with the results.
    """

    def __init__(
        self,
        module,
        *,
        spec: str,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        background: int = 0,
        device=None,
        weights_hash: str | None = None,
    ):
        from robustlab.models.base import auto_device

        self.device = auto_device(device)
        self.module = module.eval().to(self.device)
        self.spec = spec
        self.mean = tuple(float(v) for v in mean)
        self.std = tuple(float(v) for v in std)
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise InputError("mean and std need 3 values each (std > 0)")
        self.background = int(background)
        self.weights_hash = weights_hash

    def logits(self, images: Sequence[np.ndarray]):
        """(B, K, H, W) float32 CPU logits for same-sized HxWx3 uint8 images."""
        import torch

        if not images:
            raise ValueError("no images to segment")
        shapes = {tuple(np.asarray(x).shape) for x in images}
        if len(shapes) != 1 or len(next(iter(shapes))) != 3 or next(iter(shapes))[2] != 3:
            raise ValueError(f"segment needs same-sized HxWx3 images, got shapes {sorted(shapes)}")
        x = torch.from_numpy(np.stack([np.asarray(i, np.uint8) for i in images]))
        x = x.permute(0, 3, 1, 2).float().div_(255.0)
        x = (x - torch.tensor(self.mean).view(1, 3, 1, 1)) / torch.tensor(self.std).view(1, 3, 1, 1)
        with torch.inference_mode():
            out = self.module(x.to(self.device))
            out = out["out"] if isinstance(out, dict) else out
            if out.ndim != 4 or out.shape[0] != x.shape[0]:
                raise ValueError(f"{self.spec} returned {tuple(out.shape)}, expected (B, K, H, W)")
            if out.shape[-2:] != x.shape[-2:]:
                out = torch.nn.functional.interpolate(
                    out, size=x.shape[-2:], mode="bilinear", align_corners=False
                )
            return out.float().cpu()

    def foreground(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """(B, H, W) bool: pixels whose arg-max class is not the background class."""
        out = self.logits(images)
        if not 0 <= self.background < out.shape[1]:
            raise InputError(
                f"background class {self.background} is outside the model's {out.shape[1]} classes"
            )
        return (out.argmax(1) != self.background).numpy()

    def describe(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "mean": list(self.mean),
            "std": list(self.std),
            "background": self.background,
            "device": self.device,
            "weights_hash": self.weights_hash,
        }


def load_segmentation_model(
    spec: str, *, weights=None, num_classes: int = 21, background: int = 0, device=None
) -> SegmentationModel:
    """A torchvision segmentation network from a local weights file (never a download).

    Args:
        spec: ``torchvision:NAME`` or ``NAME``, one of :data:`TORCHVISION_SEGMENTATION`.
        weights: A state-dict file, or ``"random"`` for an untrained network (tests, smoke
            runs: its numbers mean nothing).
        num_classes: Output classes of the checkpoint (VOC: 21).
        background: Index of the background class.
    """
    import torchvision.models.segmentation as tvs

    from robustlab.models.base import load_state_dict_file, load_strict, weights_hash

    name = spec.split(":", 1)[1] if spec.startswith("torchvision:") else spec
    if name not in TORCHVISION_SEGMENTATION:
        raise InputError(
            f"unknown segmentation model {spec!r}; use one of {', '.join(TORCHVISION_SEGMENTATION)}"
        )
    if weights is None:
        raise InputError(
            f"{name} needs weights: a local state-dict file (e.g. torchvision's "
            f"{name} checkpoint), or weights='random' for an untrained network"
        )
    kwargs = {"weights": None, "weights_backbone": None, "num_classes": int(num_classes)}
    if not name.startswith("lraspp"):
        kwargs["aux_loss"] = False
    module = getattr(tvs, name)(**kwargs)
    whash = "random"
    if weights != "random":
        path = Path(weights).expanduser()
        if not path.is_file():
            raise MissingResourceError(f"weights file {path} does not exist")
        sd = load_state_dict_file(path)
        sd = {k: v for k, v in sd.items() if not k.startswith("aux_classifier.")}
        load_strict(module, sd, f"torchvision:{name} with {num_classes} classes")
        whash = weights_hash(path)
    return SegmentationModel(
        module, spec=f"torchvision:{name}", background=background, device=device, weights_hash=whash
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
        rng = make_rng(derive_seed(seed, sample.id, shift, level))
        draws = sh.draw(prepared.rgb, sh.params[level], rng, {"mask": m})
        return moved_mask(m, draws["offset"])
    raise ValueError(f"unknown target rule {rule!r} for {shift}")


@dataclass
class SegmentationResult:
    """Per-image counts, per-scenario scores and what was skipped (with reasons)."""

    counts: pd.DataFrame
    summary: pd.DataFrame
    skipped: list[tuple[str, str]]
    record: dict


def evaluate_segmentation(
    model: SegmentationModel,
    data,
    *,
    masks,
    suite="ximagenet12",
    shifts=None,
    levels=None,
    seed: int = 0,
    labels_csv=None,
    batch_size: int = 8,
    limit: int | None = None,
    done=None,
    sink=None,
) -> SegmentationResult:
    """Segment the clean images and every cell of ``suite``; score predicted foreground.

    Args:
        model: A :class:`SegmentationModel`.
        data: Source folder (ImageFolder tree, or flat plus labels CSV).
        masks: Folder of foreground masks parallel to ``data``; images without one are
            skipped (counted).
        suite, shifts, levels: Which scenario cells (as for ``robustlab evaluate``).
        seed: Global seed of the seed rule (the same cells a classifier run sees).
        batch_size: Images per forward pass.
        limit: Only the first ``limit`` samples with masks (sorted by id).
        done: (sample_id, shift, level) keys to leave out (already stored: resume); a
            sample whose cells are all done is not even decoded.
        sink: Called with each batch's rows (a DataFrame with the ``counts`` columns) as
            soon as they are computed, so a store can persist them batch by batch.

    Returns:
        :class:`SegmentationResult`; ``summary`` has one row per (shift, level), clean first
        (only the cells computed by this call when ``done`` is given).
    """
    from robustlab.data.images import ImageError
    from robustlab.data.sources import discover
    from robustlab.run.tasks import CellImages
    from robustlab.shifts.registry import available_shifts, get_shift
    from robustlab.suites import get_suite

    if masks is None:
        raise InputError("segmentation scoring needs foreground masks; pass masks=DIR")
    if int(batch_size) < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    names = available_shifts(s.match(shifts or None), log=log)
    s = s.select(names, levels or None).suite
    cells = [(CLEAN_SHIFT, 0), *s.cells()]
    samples = discover(Path(data).expanduser(), labels_csv=labels_csv, masks=masks)
    skipped: list[tuple[str, str]] = [tuple(x) for x in getattr(samples, "skipped", [])]
    skipped += [(x.id, "no mask in the masks folder") for x in samples if x.mask_path is None]
    usable = [x for x in samples if x.mask_path is not None]
    if limit is not None:
        usable = usable[: int(limit)]
    if not usable:
        raise InputError(f"no images with masks in {data}")
    needs_donors = any(get_shift(n).extra.get("donor_rule") for n, _ in cells if n != CLEAN_SHIFT)
    # Donors come from the whole data set (DonorPool's rule), not from the first --limit
    # masked samples, so the cells are the pixels generate and evaluate make.
    images = CellImages(
        s.protocol, seed, donors=list(samples) if needs_donors else None, with_mask=True
    )
    for name in dict.fromkeys(n for n, _ in cells):
        if target_rule(name) is None:
            log.info("%s removes the object: no foreground to segment, its cells are skipped", name)

    rows: list[dict] = []
    batch: list[tuple[dict, np.ndarray, np.ndarray]] = []

    def flush():
        if not batch:
            return
        fg = model.foreground([img for _, img, _ in batch])
        new = []
        for (row, _, truth), pred in zip(batch, fg):
            tp, fp, fn, tn = _counts(pred, truth)
            new.append({**row, "tp": tp, "fp": fp, "fn": fn, "tn": tn})
        batch.clear()
        if sink is not None:
            sink(pd.DataFrame(new, columns=columns))
        rows.extend(new)

    columns = ["sample_id", "class_name", "shift", "level", "tp", "fp", "fn", "tn"]
    done = {(str(a), str(b), str(c)) for a, b, c in done} if done else set()
    for sample in usable:
        todo = [(sh, lv) for sh, lv in cells if (sample.id, sh, str(lv)) not in done]
        if not todo:
            continue
        try:
            base = images.base(sample)
            if base.mask is None:
                raise ImageError("no mask for this sample")
        except ImageError as exc:
            skipped.append((sample.id, exc.reason))
            log.warning("skipping %s: %s", sample.id, exc.reason)
            continue
        for shift, level in todo:
            try:
                truth = target_mask(sample, base, shift, level, seed)
                if truth is None:
                    continue
                img = images.cell(sample, base, shift, level)
            except (CellSkipped, ImageError, OSError) as exc:  # skips; others are bugs
                reason = getattr(exc, "reason", None) or str(exc)
                skipped.append((sample.id, f"{shift}/{level}: {reason}"))
                log.warning("skipping %s %s/%s: %s", sample.id, shift, level, reason)
                continue
            batch.append(
                (
                    {
                        "sample_id": sample.id,
                        "class_name": sample.class_name,
                        "shift": shift,
                        "level": str(level),
                    },
                    img,
                    truth,
                )
            )
            if len(batch) >= int(batch_size):
                flush()
    flush()
    counts = pd.DataFrame(rows, columns=columns)
    from robustlab.metrics.segmentation import summarize

    summary = (
        summarize(counts)
        if len(counts)
        else pd.DataFrame(
            columns=["shift", "level", "n", "pixel_acc", "miou", "fg_iou", "bg_iou", "image_fg_iou"]
        )
    )
    record = {
        "model": model.describe(),
        "suite": s.name,
        "suite_version": s.version,
        "seed": int(seed),
        "protocol": s.protocol.describe(),
        "data": str(data),
        "masks": str(masks),
        "n_samples": len(usable),
        "n_skipped": len(skipped),
    }
    return SegmentationResult(counts, summary, skipped, record)


def _counts(pred: np.ndarray, truth: np.ndarray) -> tuple[int, int, int, int]:
    from robustlab.metrics.segmentation import binary_counts

    return binary_counts(pred, truth)


def segment_to_store(
    model: SegmentationModel,
    data,
    *,
    masks,
    db="robustlab.duckdb",
    suite="ximagenet12",
    shifts=None,
    levels=None,
    seed: int = 0,
    labels_csv=None,
    batch_size: int = 8,
    limit: int | None = None,
    progress: bool = False,
) -> SegmentationResult:
    """:func:`evaluate_segmentation` with its per-image counts stored in the results database.

    The run gets a ``runs`` row like a classifier run (``config["task"] ==
    "segmentation"``) and one ``segmentation`` row per (image, cell). Its id hashes
    what decides the numbers: model name, weights hash, background class, suite and
    version, robustlab version, seed, protocol, and fingerprints of the images and of
    the masks (the masks are the truth). Rerunning the same command resumes: stored
    keys are skipped before any image is decoded, and batches are written as they finish
    (so an interrupted run keeps what it computed).

    Args:
        model: A :class:`SegmentationModel` loaded from a weights file (an untrained
            ``weights="random"`` network has no identity to resume under: ValueError).
        db: The DuckDB results file.
        progress: Print a progress line on stderr now and then (rows scored).
        (others): As for :func:`evaluate_segmentation`.

    Returns:
        :class:`SegmentationResult` read back from the database for the requested cells
        (``counts`` of every stored image, not only the ones computed now); ``record``
        adds ``run_id``, ``db``, ``resumed`` and ``n_written``.
    """
    from robustlab import __version__
    from robustlab.data.sources import discover
    from robustlab.metrics.segmentation import cell_scores
    from robustlab.run.identity import make_record, masked_fingerprints
    from robustlab.shifts.registry import available_shifts
    from robustlab.store import Store
    from robustlab.store.schema import SEGMENTATION_TASK
    from robustlab.suites import get_suite

    if masks is None:
        raise InputError("segmentation scoring needs foreground masks; pass masks=DIR")
    if model.weights_hash in (None, "random"):
        raise InputError(
            "storing segmentation results needs a model loaded from a weights file "
            "(an untrained random network has no identity to resume under)"
        )
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise InputError(f"seed must be an integer in [0, 2**63), got {seed!r}")
    root = Path(data).expanduser()
    if not root.is_dir():
        raise MissingResourceError(f"data folder {root} does not exist")
    mask_root = Path(masks).expanduser()
    if not mask_root.is_dir():
        raise MissingResourceError(f"masks folder {mask_root} does not exist")
    s = get_suite(suite) if isinstance(suite, (str, Path)) else suite
    s = s.select(available_shifts(s.match(shifts or None), log=log), levels or None).suite
    cells = [(CLEAN_SHIFT, "0"), *((sh, str(lv)) for sh, lv in s.cells())]
    samples = discover(root, labels_csv=labels_csv, masks=mask_root)
    usable = [x for x in samples if x.mask_path is not None]
    if limit is not None:
        usable = usable[: int(limit)]
    # By content (cached), not by size: a replaced photo or mask is another run.
    fingerprint, mask_fingerprint = masked_fingerprints(usable)
    protocol = s.protocol.describe()
    identity = {
        "task": SEGMENTATION_TASK,
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "background": model.background,
        "mean": list(model.mean),
        "std": list(model.std),
        "suite": s.name,
        "suite_version": s.version,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "mask_fingerprint": mask_fingerprint,
        "seed": int(seed),
        "protocol": protocol,
    }
    record = make_record(
        identity,
        data_root=root,
        preprocessing={
            "model": {"mean": list(model.mean), "std": list(model.std)},
            "protocol": protocol,
        },
        config={
            "task": SEGMENTATION_TASK,
            "source": "on-the-fly",
            "masks": str(mask_root.resolve()),
            "mask_fingerprint": mask_fingerprint,
            "labels_csv": str(labels_csv) if labels_csv else None,
            "model": model.describe(),
            "background": model.background,
            "cells": [list(c) for c in cells],
            "limit": limit,
        },
        n_samples=len(usable),
    )
    rid = record.run_id
    store = Store(db)
    done = store.segmentation_done_keys(rid)
    resumed = not store.start_run(record)
    written = [0]
    lines = None
    if progress:  # one line now and then on stderr: (image, cell) rows scored
        from robustlab.run.progress import LineProgress

        lines = LineProgress(len(usable) * len(cells), what="segment", unit="row", done=len(done))

    def sink(rows: pd.DataFrame) -> None:
        written[0] += store.write_segmentation(rid, rows)
        if lines is not None:
            lines.update(len(rows))

    try:
        res = evaluate_segmentation(
            model,
            root,
            masks=mask_root,
            suite=s,
            seed=seed,
            labels_csv=labels_csv,
            batch_size=batch_size,
            limit=limit,
            done=done,
            sink=sink,
        )
    except KeyboardInterrupt:
        store.finish_run(rid, status="interrupted")
        raise
    except BaseException:
        store.finish_run(rid, status="failed")
        raise
    finally:
        if lines is not None:
            lines.close()
    store.finish_run(
        rid, status="finished", n_samples=len(usable), skipped=[list(x) for x in res.skipped]
    )
    counts = store.segmentation_counts([rid])
    wanted = set(cells)
    counts = counts[[(a, b) in wanted for a, b in zip(counts["shift"], counts["level"])]]
    counts = counts.drop(columns=["run_id"]).reset_index(drop=True)
    summary = cell_scores(counts)
    record_out = {
        **res.record,
        "run_id": rid,
        "db": str(store.path),
        "resumed": resumed,
        "n_written": written[0],
    }
    return SegmentationResult(counts, summary, res.skipped, record_out)


__all__ = [
    "segment_to_store",
    "SegmentationModel",
    "SegmentationResult",
    "load_segmentation_model",
    "evaluate_segmentation",
    "target_mask",
    "target_rule",
]
