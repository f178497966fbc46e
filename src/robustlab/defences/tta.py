"""Test-time augmentation: classify several views of an image and average their softmax.

The ImageNet-C paper's 10-crop classification (the four corners and the centre, each also
mirrored) raised clean accuracy without a matching gain in corruption robustness; it is
here so that finding can be checked on any model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from robustlab.errors import InputError


@dataclass(frozen=True)
class TenCrop:
    """Four corner crops and the centre crop of a larger image, and their mirror images.

    The model's input size is kept: the views are cut from the image the model would see
    grown by ``1 / scale`` (for a 224-pixel model and the default scale, a 256-pixel
    image: torchvision's ``Resize(256)`` then ``TenCrop(224)``). Each view covers ``scale``
    of the image's side, so the ten views together see all of it.

    Attributes:
        scale: Side of a crop as a fraction of the image side, in (0, 1). 0.875 = 224/256,
            the ratio of ImageNet's standard evaluation crop.
    """

    name: ClassVar[str] = "ten-crop"
    n_views: ClassVar[int] = 10
    scale: float = 0.875

    def __post_init__(self) -> None:
        if not 0 < float(self.scale) < 1:
            raise InputError(f"ten-crop scale must be in (0, 1), got {self.scale!r}")

    def source_hw(self, hw: tuple[int, int]) -> tuple[int, int]:
        """(height, width) of the image the crops of a ``hw`` input are cut from."""
        return tuple(round(side / float(self.scale)) for side in hw)

    def views(self, batch, hw: tuple[int, int]):
        """Yield the ten Bx3x``hw`` views of a Bx3xHxW batch (any dtype, any device).

        Order: top-left, top-right, bottom-left, bottom-right, centre (torchvision's
        centre rounding), then the same five mirrored left to right.

        Raises:
            ValueError: the batch is not larger than ``hw`` (it holds the model's input,
                not the larger image made by the defended preprocessing).
        """
        th, tw = hw
        height, width = int(batch.shape[-2]), int(batch.shape[-1])
        if height < th or width < tw or (height, width) == (th, tw):
            raise ValueError(
                f"ten-crop needs images larger than the model input {th}x{tw}, "
                f"got {height}x{width}: use the defended model's transform"
            )
        top, left = round((height - th) / 2.0), round((width - tw) / 2.0)
        corners = [
            (0, 0),
            (0, width - tw),
            (height - th, 0),
            (height - th, width - tw),
            (top, left),
        ]
        crops = [batch[..., y : y + th, x : x + tw] for y, x in corners]
        yield from crops
        for crop in crops:
            yield crop.flip(-1)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


TTA_METHODS = {c.name: c for c in (TenCrop,)}
