"""Mask a whole source with the automatic masker and cache the PNGs with quality records.

Output layout (parallel to the data, so ``discover(root, masks=out)`` finds them)::

    out/<id>.png               0/255 mask, same size as the source image (the image's full
                               file name plus .png: cat/a.jpg.png, so a.jpg and a.png in
                               one folder cannot share a mask); empty or full
                               masks are not written (a scenario cannot use them), so
                               the folder holds usable masks only and a rerun retries them
    out/masks_quality.csv      one row per image: area, pieces, border contact, flags
    out/masks_quality.json     the same records plus method, parameters, versions, skips

Rerunning reuses the masks already there (found by :func:`robustlab.masks.io.find_mask`,
so an older ``<id stem>.png`` is reused where unambiguous; their records are recomputed,
and one whose size differs from its image is skipped with the reason), so an interrupted
run resumes; ``overwrite=True`` remakes them.
"""

from __future__ import annotations

import csv
import json
import logging
import time
from collections import Counter
from pathlib import Path

from robustlab.data.images import ImageError, load_image, read_image
from robustlab.errors import CellSkipped, InputError
from robustlab.masks.auto import AutoMasker
from robustlab.masks.io import find_mask, load_mask, mask_name, save_mask, shared_stems
from robustlab.masks.parallel import in_order
from robustlab.masks.quality import QualityThresholds, mask_record, thresholds_dict
from robustlab.files.safety import claim_out_folder, file_inside, refuse_write_through

log = logging.getLogger(__name__)

CSV_FIELDS = (
    "id",
    "mask",
    "seed",
    "cam_class",
    "height",
    "width",
    "area_fraction",
    "components",
    "largest_fraction",
    "border_sides",
    "touches_border",
    "flags",
    "suspicious",
    "seconds",
)


def mask_file(out: Path, sample_id: str) -> Path:
    """Where a new mask of ``sample_id`` is written (:func:`robustlab.masks.io.mask_name`)."""
    return Path(out) / mask_name(sample_id)


def _cached(out: Path, sample, siblings) -> Path | None:
    """The mask already in ``out`` for ``sample``; None when there is none or when only an
    older stem-named mask exists that two images could claim (a new one is made then). A
    mask behind a link out of ``out`` is none (the link rule of :mod:`robustlab.files.safety`)."""
    try:
        found = find_mask(lambda rel: file_inside(out, rel) is not None, sample.id, siblings)
    except InputError:
        return None
    return None if found is None else out / found


def build_masks(
    samples,
    out,
    masker: AutoMasker,
    *,
    overwrite: bool = False,
    thresholds: QualityThresholds = QualityThresholds(),
    cam_class: str = "top1",
    progress=None,
    threads: int | None = None,
) -> dict:
    """Mask every sample; write PNGs, ``masks_quality.csv`` and ``masks_quality.json``.

    Args:
        samples: :class:`robustlab.data.sources.Sample` objects (``bbox`` seeds GrabCut).
        out: Output folder.
        masker: The :class:`AutoMasker` to use.
        overwrite: Remake masks that already exist.
        cam_class: ``"top1"`` (the classifier's own top class) or ``"label"`` (the sample's
            ImageNet-1k label index when it has one) as the CAM's target class.
        progress: Optional callable ``(done, total)``.
        threads: Images masked at once, each on a thread of its own with one torch and
            one OpenCV thread (None: one per CPU this process may use; 1: one after
            another on the libraries' own threads). See :mod:`robustlab.masks.parallel`.

    Returns:
        The summary written to ``masks_quality.json`` (without the per-image records).
    """
    if cam_class not in ("top1", "label"):
        raise InputError(f"cam_class must be 'top1' or 'label', not {cam_class!r}")
    # The owner mark first: an interrupted run's folder is still recognised as a masks
    # folder (robustlab.files.safety.check_out_folder), before masks_quality.json is written.
    out = claim_out_folder(out, command="masks")
    records, skipped = [], []
    siblings = shared_stems(s.id for s in samples)

    def one(s):
        return _mask_one(s, out, masker, siblings.get(s.id, ()), overwrite, cam_class, thresholds)

    uses_torch = masker.needs_network(samples)
    with in_order(one, samples, threads, uses_torch=uses_torch) as results:
        for i, (rec, skip) in enumerate(results):
            if skip is not None:
                log.warning("skipped %s: %s", skip["id"], skip["reason"])
                skipped.append(skip)
            else:
                records.append(rec)
            if progress:  # a skipped image is finished work: progress still reaches 100 %
                progress(i + 1, len(samples))
    summary = _summary(records, skipped, masker, thresholds, cam_class)
    _write_quality(out, summary, records)
    return summary


def _mask_one(
    sample, out: Path, masker: AutoMasker, siblings, overwrite: bool, cam_class, thresholds
):
    """One image's quality record, or its skip: ``(record, None)`` or ``(None, skip)``.
    Runs on a masking thread: it touches only its own image and its own mask file."""
    t0 = time.perf_counter()
    try:
        cached = None if overwrite else _cached(out, sample, siblings)
        if cached is not None:
            target, mask, info = cached, _checked_cached(cached, sample, out), _CACHED_INFO
        else:
            target = mask_file(out, sample.id)
            refuse_write_through(out, target.parent.relative_to(out).as_posix(), "--out")
            mask, info = _make_mask(sample, target, masker, cam_class)
    except (ImageError, CellSkipped) as exc:
        reason = getattr(exc, "reason", None) or str(exc)
        return None, {"id": sample.id, "reason": reason}
    usable = target.exists() and bool(mask.any()) and not bool(mask.all())
    rec = {
        "id": sample.id,
        "mask": target.relative_to(out).as_posix() if usable else "",
        **info,
        **mask_record(mask, thresholds),
        "seconds": round(time.perf_counter() - t0, 4),
    }
    return rec, None


# the record fields of a mask read back from disk (no seed, no CAM class was used)
_CACHED_INFO = {"seed": "cached", "cam_class": None}


def _checked_cached(target: Path, sample, out: Path):
    """Load an existing mask, refusing one whose size differs from its image's (a mask
    made for another photo would silently mask the wrong pixels)."""
    mask = load_mask(target)
    # Decoded, not read from the header: EXIF orientation may swap the sides.
    img = read_image(sample.path)
    if mask.shape != img.rgb.shape[:2]:
        raise ImageError(
            f"mask {target.relative_to(out).as_posix()} is {mask.shape[1]}x"
            f"{mask.shape[0]} but the image is {img.rgb.shape[1]}x{img.rgb.shape[0]}"
        )
    return mask


def _make_mask(sample, target: Path, masker: AutoMasker, cam_class: str):
    """Run the masker on one sample and save its mask to ``target`` unless the mask is
    empty or full (neither separates a foreground); return ``(mask, info)``."""
    rgb, _ = load_image(sample.path)
    cls = sample.label if cam_class == "label" else None
    mask, info = masker(rgb, bbox=sample.bbox, class_index=cls)
    if mask.any() and not mask.all():
        save_mask(target, mask)
    return mask, info


def _summary(records, skipped, masker: AutoMasker, thresholds, cam_class: str) -> dict:
    """What ``masks_quality.json`` says about the whole run (its records aside): the
    method and settings that made the masks, and the counts a reviewer reads first."""
    flags = Counter(f for r in records for f in r["flags"])
    return {
        "method": masker.method,
        "params": masker.params.describe(),
        "thresholds": thresholds_dict(thresholds),
        "cam_class": cam_class,
        "versions": _versions(),
        "n": len(records),
        "n_written": sum(bool(r["mask"]) for r in records),
        "n_skipped": len(skipped),
        "skipped": skipped,
        "flag_counts": dict(flags),
        "n_suspicious": sum(r["suspicious"] for r in records),
    }


def _write_quality(out: Path, summary: dict, records: list[dict]) -> None:
    """Write ``masks_quality.csv`` (one row per mask, flags joined by ``|``) and
    ``masks_quality.json`` (the summary and every record)."""
    with open(out / "masks_quality.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in records:
            w.writerow({**r, "flags": "|".join(r["flags"])})
    (out / "masks_quality.json").write_text(json.dumps({**summary, "records": records}, indent=1))


def _versions() -> dict:
    import cv2
    import numpy

    from robustlab.version import __version__

    return {"robustlab": __version__, "opencv": cv2.__version__, "numpy": numpy.__version__}
