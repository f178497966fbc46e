"""How an image becomes a model's input: the recorded preprocessing and its transforms.

:class:`Preprocessing` is part of every model's record (and so of every run id): its
fields, and :meth:`Preprocessing.describe` in particular, must not change meaning.
:func:`scaled_side` and :func:`short_side_size` are public because the batched shifts
that resize on the GPU must land on exactly the sizes this resize picks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from robustlab.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_PIL_FILTERS = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


@dataclass(frozen=True)
class Preprocessing:
    """How an adapter turns an RGB image into its input tensor.

    Eval transform of timm/torchvision: resize the shorter side to
    ``floor(input_size / crop_pct)`` (long side truncated, as torchvision's ``Resize``),
    center-crop ``input_size``, scale to [0, 1], subtract ``mean``, divide by ``std``.

    Attributes:
        input_size: Side of the square input, or ``(height, width)``.
        crop_pct: Fraction of the resized image kept by the center crop (1.0: no margin).
        interpolation: ``bicubic``, ``bilinear``, ``nearest``, ``lanczos``, ``box``, ``hamming``.
        mean, std: Per-channel normalisation on the [0, 1] scale.
        resize_mode: ``"shorter"`` (scale the shorter side, keep the aspect ratio: timm,
            torchvision) or ``"squash"`` (scale both sides to the target square, as the
            ViT/BEiT processors of transformers do).
        crop_offset: Where the centre crop starts when the margin is odd: ``"round"``
            (``round(margin / 2)``, torchvision's ``CenterCrop``, timm, open_clip) or
            ``"floor"`` (``margin // 2``, transformers' image processors).
    """

    input_size: int | tuple[int, int]
    crop_pct: float
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize_mode: str = "shorter"
    crop_offset: str = "round"

    def __post_init__(self) -> None:
        size = self.input_size
        sizes = (size,) if isinstance(size, int) else tuple(size)
        if len(sizes) not in (1, 2) or any(not isinstance(s, int) or s < 1 for s in sizes):
            raise InputError(f"input_size must be a positive int or (height, width), got {size!r}")
        if not 0 < float(self.crop_pct) <= 1:
            raise InputError(f"crop_pct must be in (0, 1], got {self.crop_pct!r}")
        if self.interpolation not in _PIL_FILTERS:
            raise InputError(
                f"interpolation must be one of {', '.join(_PIL_FILTERS)}, "
                f"got {self.interpolation!r}"
            )
        if self.resize_mode not in ("shorter", "squash"):
            raise InputError(f"resize_mode must be 'shorter' or 'squash', got {self.resize_mode!r}")
        if self.crop_offset not in ("round", "floor"):
            raise InputError(f"crop_offset must be 'round' or 'floor', got {self.crop_offset!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise InputError("mean and std need 3 values each (std > 0)")

    @property
    def hw(self) -> tuple[int, int]:
        s = self.input_size
        return (s, s) if isinstance(s, int) else (int(s[0]), int(s[1]))

    def describe(self) -> dict[str, Any]:
        """The fields as JSON-able values; ``crop_offset`` only when it is not the default
        (it came later: the records, and so the run ids, of other models stay as they were)."""
        d = asdict(self)
        d["input_size"] = self.input_size if isinstance(self.input_size, int) else list(self.hw)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        if d["crop_offset"] == "round":
            del d["crop_offset"]
        return d

    def resize_crop(self, rgb: np.ndarray, *, crop: bool = True) -> np.ndarray:
        """The uint8 HxWx3 image the model sees (before normalisation).

        ``crop=False`` only resizes: in ``shorter`` mode the shorter side to the input size
        (a square image becomes exactly ``input_size``; a non-square one is kept whole, for
        class maps), in ``squash`` mode (or for a non-square input size) to exactly it.
        """
        from PIL import Image

        h, w = rgb.shape[:2]
        th, tw = self.hw
        resample = _PIL_FILTERS[self.interpolation]
        shorter = th == tw and self.resize_mode == "shorter"
        if crop:
            if shorter:
                size = short_side_size(h, w, scaled_side(th, self.crop_pct))
            else:
                size = (scaled_side(th, self.crop_pct), scaled_side(tw, self.crop_pct))
        else:
            size = short_side_size(h, w, th) if shorter else (th, tw)
        if size != (h, w):
            rgb = np.asarray(Image.fromarray(rgb).resize((size[1], size[0]), resample=resample))
        if crop:
            h, w = rgb.shape[:2]
            if self.crop_offset == "floor":
                top, left = (h - th) // 2, (w - tw) // 2
            else:
                top, left = round((h - th) / 2.0), round((w - tw) / 2.0)  # torchvision's
            rgb = rgb[top : top + th, left : left + tw]
        return rgb

    def to_uint8(self, rgb, *, crop: bool = True):
        """CxHxW uint8 tensor of the pixels the model sees, before normalisation.

        This is what evaluation workers hand to the main process: a quarter of the bytes
        of the float32 input, so less shared memory and less copying between processes
        and to the GPU. :meth:`normalize` finishes the job where the model runs.
        """
        import torch

        from robustlab.data.images import array_to_rgb

        rgb, _ = array_to_rgb(rgb)
        out = np.ascontiguousarray(self.resize_crop(rgb, crop=crop))
        if not out.flags.writeable:  # torch wants to own writable memory
            out = out.copy()
        return torch.from_numpy(out).permute(2, 0, 1)

    def normalize(self, batch):
        """Bx3xHxW uint8 -> float32 ``(x / 255 - mean) / std`` on the batch's own device.

        The same float32 operations in the same order as :meth:`to_tensor`, so the result
        is bit-identical whether it runs in a worker, on the CPU or on a GPU.
        """
        import torch

        x = batch.float().div_(255.0)
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        return x.sub_(mean).div_(std)

    def to_tensor(self, rgb, *, crop: bool = True):
        """CxHxW float32 tensor of ``rgb`` (uint8 HxW[x1|3|4] array or PIL image)."""
        return self.normalize(self.to_uint8(rgb, crop=crop)[None])[0]


def scaled_side(size: int, crop_pct: float) -> int:
    """``floor(size / crop_pct)`` as timm computes it, immune to float noise such as
    ``240 / (240 / 255) = 254.99999999999997``."""
    return math.floor(size / crop_pct + 1e-6)


def short_side_size(h: int, w: int, short: int) -> tuple[int, int]:
    """(height, width) with the shorter side ``short`` and the longer truncated (torchvision)."""
    if h <= w:
        return short, int(short * w / h)
    return int(short * h / w), short
