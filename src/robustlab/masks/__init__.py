"""Foreground masks: import (PNG folders, COCO JSON, bbox CSV), automatic maskers
(GrabCut seeded by a box or a lite0 CAM), quality records and agreement metrics."""

from robustlab.masks.auto import AutoMasker, MaskerParams, class_activation_map, grabcut_mask
from robustlab.masks.io import (
    bbox_to_mask,
    decode_rle,
    encode_rle,
    load_coco_masks,
    load_mask,
    mask_path_for,
    polygons_to_mask,
    read_bboxes_csv,
    resize_mask,
    save_mask,
)
from robustlab.masks.quality import (
    QualityThresholds,
    boundary_f,
    compare_mask_sets,
    iou,
    mask_record,
)

__all__ = [
    "AutoMasker",
    "MaskerParams",
    "class_activation_map",
    "grabcut_mask",
    "bbox_to_mask",
    "decode_rle",
    "encode_rle",
    "load_coco_masks",
    "load_mask",
    "mask_path_for",
    "polygons_to_mask",
    "read_bboxes_csv",
    "resize_mask",
    "save_mask",
    "QualityThresholds",
    "boundary_f",
    "compare_mask_sets",
    "iou",
    "mask_record",
]
