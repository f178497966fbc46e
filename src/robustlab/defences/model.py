"""A defended model: any adapter's model behind a pixel defence and/or test-time augmentation.

The wrapper keeps the adapter's interface (``preprocessing``, ``transform``, ``predict``,
``predict_topk``, ``correct``, ``describe``...), so the runner, the training code and the
report use a defended model exactly like a plain one, whatever the adapter.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DefendedPreprocessing:
    """The adapter's :class:`robustlab.models.Preprocessing`, then the pixel defence.

    The pixel defence runs on the uint8 image the model is about to see (after resizing
    and cropping, before normalisation): its cost then follows the model's input size,
    not the source photo's, and it runs wherever :meth:`to_uint8` runs -- in the
    evaluation workers (see :mod:`robustlab.defences`). With test-time augmentation the
    image is made ``1 / scale`` larger, so the views can be cut from it on the device.

    Attributes:
        base: The adapter's own preprocessing (its normalisation is used unchanged).
        pixels: A pixel defence (:mod:`robustlab.defences.pixels`) or None.
        tta: A test-time augmentation (:mod:`robustlab.defences.tta`) or None.
    """

    base: Any
    pixels: Any = None
    tta: Any = None

    @property
    def hw(self) -> tuple[int, int]:
        """The model's input (height, width): the size of every view it classifies."""
        return self.base.hw

    @property
    def source_hw(self) -> tuple[int, int]:
        """(height, width) of the images :meth:`to_uint8` makes."""
        return self.tta.source_hw(self.hw) if self.tta is not None else self.hw

    def _sized(self, crop: bool):
        """The base preprocessing grown to :attr:`source_hw` (itself without TTA)."""
        if self.tta is None:
            return self.base
        h, w = self.source_hw
        size = h if (h == w and isinstance(self.base.input_size, int)) else (h, w)
        if not crop:
            return dataclasses.replace(self.base, input_size=size)
        # The plain model resizes to input / crop_pct, then crops the input size; the
        # larger image keeps that resize and crops the larger size out of it (no margin
        # when the base's crop_pct equals the ten-crop scale, as for lite0: 256 of 256).
        ratio = min(1.0, float(self.base.crop_pct) * h / self.hw[0])
        return dataclasses.replace(self.base, input_size=size, crop_pct=ratio)

    def resize_crop(self, rgb, *, crop: bool = True):
        out = self._sized(crop).resize_crop(rgb, crop=crop)
        return self.pixels(out) if self.pixels is not None else out

    def to_uint8(self, rgb, *, crop: bool = True):
        """CxHxW uint8 tensor: resized (and cropped) like the base, then defended."""
        import numpy as np
        import torch

        from robustlab.data.images import array_to_rgb

        rgb, _ = array_to_rgb(rgb)
        out = np.ascontiguousarray(self.resize_crop(rgb, crop=crop))
        if not out.flags.writeable:
            out = out.copy()
        return torch.from_numpy(out).permute(2, 0, 1)

    def normalize(self, batch):
        return self.base.normalize(batch)

    def to_tensor(self, rgb, *, crop: bool = True):
        return self.normalize(self.to_uint8(rgb, crop=crop)[None])[0]

    def describe(self) -> dict[str, Any]:
        return {**self.base.describe(), "defence": describe_parts(self.pixels, self.tta)}


def describe_parts(pixels, tta) -> dict[str, Any]:
    """The defence record: ``{"preprocess": {...} | None, "tta": {...} | None}``."""
    return {
        "preprocess": pixels.describe() if pixels is not None else None,
        "tta": tta.describe() if tta is not None else None,
    }


class DefendedModel:
    """A :class:`robustlab.models.Model` behind a pixel defence and/or test-time augmentation.

    Everything not defined here (``spec``, ``weights_hash``, ``label_space``, ``module``,
    ``correct``, ``head``...) is the wrapped model's, so a defended run is stored under the
    same model spec and weights; :attr:`defence` says what was added and is part of the
    run identity (:func:`robustlab.workflows.evaluate.make_plan`).

    Args:
        model: The plain model (any adapter).
        pixels: A pixel defence or None.
        tta: A test-time augmentation or None.
    """

    def __init__(self, model, *, pixels=None, tta=None):
        if isinstance(model, DefendedModel):
            raise TypeError("the model is already defended; wrap the plain model once")
        self.undefended = model
        self.preprocessing = DefendedPreprocessing(model.preprocessing, pixels, tta)
        self.defence = describe_parts(pixels, tta)

    def __getattr__(self, name: str):
        # Only reached for attributes not set on the wrapper: the plain model's.
        if name == "undefended":  # unpickling calls this before __init__ ran
            raise AttributeError(name)
        return getattr(self.undefended, name)

    @property
    def tta(self):
        return self.preprocessing.tta

    def transform(self, rgb_uint8_hwc, *, crop: bool = True):
        """CxHxW float tensor of one defended image (larger than the input with TTA)."""
        return self.preprocessing.to_tensor(rgb_uint8_hwc, crop=crop)

    def _probabilities(self, batch):
        """(B, num_outputs) softmax averaged over the views (one view without TTA)."""
        import torch

        inner = self.undefended
        if self.tta is None:
            return torch.softmax(inner._logits(batch), dim=1)
        if not isinstance(batch, torch.Tensor) or batch.ndim != 4 or batch.shape[1] != 3:
            shape = tuple(batch.shape) if hasattr(batch, "shape") else type(batch).__name__
            raise ValueError(f"predict needs a Bx3xHxW tensor, got {shape}")
        # Cut the views where the model runs: the worker shipped one image, not ten.
        batch = batch.to(inner.input_device(), non_blocking=True)
        total = None
        for view in self.tta.views(batch, self.preprocessing.hw):
            p = torch.softmax(inner._logits(view.contiguous()), dim=1)
            total = p if total is None else total.add_(p)
        return total.div_(self.tta.n_views)

    def predict(self, batch):
        """Log of the view-averaged softmax, float32 on the CPU (the plain model's logits
        without TTA); ``softmax`` of it gives back the averaged probabilities."""
        import torch

        with torch.inference_mode():
            if self.tta is None:
                return self.undefended._logits(batch).cpu()
            return torch.log(self._probabilities(batch)).cpu()

    def predict_topk(self, batch, k: int = 5):
        """(probabilities, column ids) of the ``k`` best classes by averaged softmax."""
        import torch

        with torch.inference_mode():
            probs = self._probabilities(batch)
            top = torch.topk(probs, min(int(k), probs.shape[1]), dim=1)
            return top.values.cpu(), top.indices.cpu()

    def describe(self) -> dict[str, Any]:
        return {**self.undefended.describe(), "defence": self.defence}

    def __repr__(self) -> str:
        return f"DefendedModel({self.undefended!r}, defence={self.defence!r})"
