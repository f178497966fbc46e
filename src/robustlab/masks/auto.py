"""Automatic foreground masks without downloaded weights: GrabCut seeded by a box or a CAM.

ImageNet-9 made its masks with GrabCut inside the ImageNet bounding box; we do the same
when a box exists. Without a box, the seed comes from a class-activation map (CAM) of the
bundled classifier (``lite0``): its last convolutional features weighted by the
classifier row of the target class show where the class evidence is, which is a coarse
but honest guess at the object. The CAM is cut into sure/probable foreground and
background labels and GrabCut refines the edges from colour statistics.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

import cv2
import numpy as np

from robustlab.errors import CellSkipped, InputError, MissingResourceError

# GrabCut labels (cv2.GC_BGD, GC_FGD, GC_PR_BGD, GC_PR_FGD)
BGD, FGD, PR_BGD, PR_FGD = 0, 1, 2, 3


@dataclass(frozen=True)
class MaskerParams:
    """How the automatic masker seeds and runs GrabCut.

    Attributes:
        max_side: GrabCut runs on a copy whose longer side is at most this many pixels
            (its cost grows with the pixel count); the mask is scaled back up.
        iterations: GrabCut iterations.
        cam_sure_fg: CAM (scaled to max 1) at or above this is sure foreground.
        cam_prob_fg: ...at or above this probable foreground.
        cam_sure_bg: ...below this sure background; between: probable background.
        border: Width of the image border ring, as a fraction of the shorter side, that is
            at least probable background when seeding from a CAM.
        seed: cv2's internal RNG seed (GrabCut's k-means initialisation draws from it), so
            the same image always gives the same mask.
    """

    max_side: int = 256
    iterations: int = 5
    cam_sure_fg: float = 0.6
    cam_prob_fg: float = 0.3
    cam_sure_bg: float = 0.08
    border: float = 0.04
    seed: int = 0

    def describe(self) -> dict:
        return asdict(self)


def _work_copy(rgb: np.ndarray, max_side: int) -> tuple[np.ndarray, float]:
    h, w = rgb.shape[:2]
    s = min(1.0, max_side / max(h, w))
    if s >= 1.0:
        return rgb, 1.0
    return cv2.resize(
        rgb, (max(1, round(w * s)), max(1, round(h * s))), interpolation=cv2.INTER_AREA
    ), s


def _run_grabcut(bgr: np.ndarray, labels: np.ndarray, params: MaskerParams) -> np.ndarray:
    fg_seed = np.isin(labels, (FGD, PR_FGD)).any()
    bg_seed = np.isin(labels, (BGD, PR_BGD)).any()
    if not (fg_seed and bg_seed):
        raise CellSkipped("GrabCut seed has no foreground or no background pixels")
    cv2.setRNGSeed(int(params.seed))
    lab = labels.astype(np.uint8).copy()
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.grabCut(bgr, lab, None, bgd, fgd, int(params.iterations), cv2.GC_INIT_WITH_MASK)
    return np.isin(lab, (FGD, PR_FGD))


def _upscale(mask: np.ndarray, h: int, w: int) -> np.ndarray:
    if mask.shape == (h, w):
        return mask
    up = cv2.resize(mask.astype(np.uint8) * 255, (w, h), interpolation=cv2.INTER_LINEAR)
    return up >= 128


def seed_from_bbox(shape, bbox) -> np.ndarray:
    """GrabCut labels for a box: outside sure background, inside probable foreground.

    A box that touches all four sides leaves no background; then a one-pixel ring at the
    image edge becomes probable background so GrabCut still has a colour model for it.
    """
    h, w = shape[:2]
    x0, y0, x1, y1 = (int(v) for v in bbox)
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(w, x1), min(h, y1)
    if x1 <= x0 or y1 <= y0:
        raise CellSkipped(f"bbox {tuple(bbox)} does not cover any pixel of the {w}x{h} image")
    labels = np.full((h, w), BGD, np.uint8)
    labels[y0:y1, x0:x1] = PR_FGD
    if not (labels == BGD).any():
        labels[[0, -1], :] = PR_BGD
        labels[:, [0, -1]] = PR_BGD
    return labels


def seed_from_cam(cam: np.ndarray, params: MaskerParams, bbox=None) -> np.ndarray:
    """GrabCut labels from a CAM in [0, 1] (HxW): thresholds plus a background border ring."""
    cam = np.asarray(cam, np.float32)
    h, w = cam.shape
    labels = np.full((h, w), PR_BGD, np.uint8)
    labels[cam < params.cam_sure_bg] = BGD
    labels[cam >= params.cam_prob_fg] = PR_FGD
    labels[cam >= params.cam_sure_fg] = FGD
    r = max(1, int(round(params.border * min(h, w))))
    ring = np.zeros((h, w), bool)
    ring[:r], ring[-r:], ring[:, :r], ring[:, -r:] = True, True, True, True
    labels[ring & (labels != BGD)] = PR_BGD
    if bbox is not None:
        x0, y0, x1, y1 = (int(v) for v in bbox)
        outside = np.ones((h, w), bool)
        outside[max(0, y0) : y1, max(0, x0) : x1] = False
        labels[outside] = BGD
    return labels


def grabcut_mask(
    rgb: np.ndarray,
    *,
    bbox=None,
    cam: np.ndarray | None = None,
    params: MaskerParams = MaskerParams(),
) -> np.ndarray:
    """Foreground mask of ``rgb`` (HxWx3 uint8) by GrabCut.

    Args:
        bbox: ``(x0, y0, x1, y1)`` in ``rgb``'s pixels: GrabCut inside the box.
        cam: HxW (any size; resized) class-activation map in [0, 1]: seeds from thresholds
            (combined with ``bbox`` when both are given: outside the box is background).
        params: Seeding thresholds and work resolution.

    Raises:
        ValueError: neither a box nor a CAM, or a seed without foreground/background.
    """
    if bbox is None and cam is None:
        raise ValueError("grabcut_mask needs a bbox or a CAM to seed it")
    h, w = rgb.shape[:2]
    small, s = _work_copy(np.ascontiguousarray(rgb[..., :3]), params.max_side)
    sh, sw = small.shape[:2]
    sbox = (
        None
        if bbox is None
        else tuple(
            int(np.floor(v * s)) if i < 2 else int(np.ceil(v * s)) for i, v in enumerate(bbox)
        )
    )
    if cam is not None:
        c = cv2.resize(np.asarray(cam, np.float32), (sw, sh), interpolation=cv2.INTER_LINEAR)
        labels = seed_from_cam(c, params, sbox)
    else:
        labels = seed_from_bbox(small.shape, sbox)
    mask = _run_grabcut(cv2.cvtColor(small, cv2.COLOR_RGB2BGR), labels, params)
    return _upscale(mask, h, w)


# ------------------------------------------------------------------ CAM
def _torch_module(model: Any):
    """The ``torch.nn.Module`` behind a robustlab Model (or the module itself)."""
    import torch

    if isinstance(model, torch.nn.Module):
        return model
    for attr in ("module", "net", "model", "network", "torch_module"):
        m = getattr(model, attr, None)
        if isinstance(m, torch.nn.Module):
            return m
    raise InputError(f"cannot find a torch module inside {type(model).__name__} for a CAM")


def _features_and_fc(net):
    """Last conv features function and the final linear layer of a timm-style classifier."""
    import torch

    if hasattr(net, "forward_features") and hasattr(net, "get_classifier"):
        fc = net.get_classifier()
        if isinstance(fc, torch.nn.Linear):
            return net.forward_features, fc
    raise InputError(
        f"{type(net).__name__} has no forward_features/linear classifier; "
        "CAM needs a global-pool + linear head (timm convention)"
    )


def class_activation_map(
    model: Any, rgb: np.ndarray, class_index: int | None = None, transform=None
) -> tuple[np.ndarray, int]:
    """CAM of ``class_index`` (default: the top-1 class) at ``rgb``'s size, scaled to [0, 1].

    CAM_c = ReLU(sum_k w_ck F_k), with F the last conv features and w the linear
    classifier: exact for global-average-pool heads, no gradient needed.

    Args:
        model: A robustlab Model (its ``transform(rgb, crop=False)`` is used, so the map
            covers the whole image) or a timm module with ``transform`` given.
        transform: ``rgb -> CxHxW tensor``; default ``model.transform(rgb, crop=False)``.

    Returns:
        (HxW float32 map in [0, 1], the class index used).
    """
    import torch

    net = _torch_module(model)
    feats_fn, fc = _features_and_fc(net)
    if transform is None:
        if not hasattr(model, "transform"):
            raise ValueError("pass transform= for a bare torch module")
        x = model.transform(rgb, crop=False)
    else:
        x = transform(rgb)
    was_training = net.training
    net.eval()
    with torch.inference_mode():
        feats = feats_fn(x.unsqueeze(0))[0]  # C x h x w
        logits = fc(feats.mean(dim=(1, 2)))
        c = int(logits.argmax()) if class_index is None else int(class_index)
        if not 0 <= c < fc.out_features:
            raise InputError(f"class index {c} outside 0..{fc.out_features - 1}")
        cam = torch.einsum("k,khw->hw", fc.weight[c], feats).clamp_min(0)
    net.train(was_training)
    cam = cam.float().numpy()
    top = float(cam.max())
    cam = cam / top if top > 0 else cam
    h, w = rgb.shape[:2]
    return cv2.resize(cam, (w, h), interpolation=cv2.INTER_CUBIC).clip(0, 1), c


class AutoMasker:
    """Masks images by GrabCut, seeded by a box when one exists, else by a lite0 CAM, or by
    the user's own segmentation network.

    Args:
        method: ``"grabcut"`` (box seed; images without a box fall back to the CAM),
            ``"cam-grabcut"`` (CAM seed always; a box, when present, bounds it) or
            ``"segmentation"`` (every non-background pixel of ``segmenter``'s prediction,
            kept inside the box when there is one).
        model: A loaded classifier for the CAM; loaded lazily (``load_model("lite0")``) the
            first time a CAM is needed.
        params: :class:`MaskerParams` (``max_side`` also bounds the segmentation input).
        segmenter: For ``"segmentation"``: a
            :class:`robustlab.workflows.segment.SegmentationModel` (e.g. from
            ``load_segmentation_model("torchvision:deeplabv3_resnet50", weights=PATH)``).
    """

    METHODS = ("grabcut", "cam-grabcut", "segmentation")

    def __init__(
        self,
        method: str = "grabcut",
        model: Any = None,
        params: MaskerParams = MaskerParams(),
        segmenter: Any = None,
    ):
        if method not in self.METHODS:
            raise InputError(
                f"unknown masking method {method!r}; use one of {', '.join(self.METHODS)}"
            )
        if (method == "segmentation") != (segmenter is not None):
            raise InputError("the 'segmentation' method needs a segmenter, and only it takes one")
        self.method, self.params, self._model, self.segmenter = method, params, model, segmenter
        # Masking threads (robustlab.masks.parallel) share one classifier: loaded once.
        self._loading = threading.Lock()
        self._eval_set = False

    @property
    def model(self):
        """The CAM classifier, loaded on first use and put in eval mode once, so that
        :func:`class_activation_map`'s own switch to eval and back changes nothing while
        another thread computes with the same network."""
        with self._loading:
            if self._model is None:
                try:
                    from robustlab.models import load_model
                except ImportError as exc:
                    raise MissingResourceError(
                        f"CAM seeding needs robustlab.models.load_model ({exc})"
                    ) from None
                self._model = load_model("lite0")
            if not self._eval_set:
                _torch_module(self._model).eval()
                self._eval_set = True
        return self._model

    def needs_network(self, samples) -> bool:
        """Whether masking ``samples`` may run a network (a CAM or the segmenter)."""
        if self.method != "grabcut":
            return True
        return any(getattr(s, "bbox", None) is None for s in samples)

    def __call__(
        self, rgb: np.ndarray, *, bbox=None, class_index: int | None = None
    ) -> tuple[np.ndarray, dict]:
        """Mask ``rgb``; returns (HxW bool, info dict with ``seed`` and ``cam_class``)."""
        if self.method == "segmentation":
            return self._segment(rgb, bbox), {"seed": "segmentation", "cam_class": None}
        if self.method == "grabcut" and bbox is not None:
            return grabcut_mask(rgb, bbox=bbox, params=self.params), {
                "seed": "bbox",
                "cam_class": None,
            }
        cam, c = class_activation_map(self.model, rgb, class_index)
        mask = grabcut_mask(rgb, cam=cam, bbox=bbox, params=self.params)
        return mask, {"seed": "cam+bbox" if bbox is not None else "cam", "cam_class": c}

    def _segment(self, rgb: np.ndarray, bbox) -> np.ndarray:
        h, w = rgb.shape[:2]
        small, _ = _work_copy(rgb, self.params.max_side)
        mask = _upscale(self.segmenter.foreground([small])[0], h, w)
        if bbox is not None:
            inside = seed_from_bbox((h, w), bbox) != BGD
            mask &= inside
        return mask
