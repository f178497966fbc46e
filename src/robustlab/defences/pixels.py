"""Pixel defences: a function ``uint8 HxWx3 RGB -> uint8 HxWx3 RGB`` applied before the model.

The ImageNet-C paper tried two input transformations as defences against corruptions:
contrast-limited adaptive histogram equalisation (CLAHE), which helped once the network
was fine-tuned on CLAHE images, and non-local-means denoising, which hurt (ResNet-50 mCE
76.7 -> 82.1). Both are here with their parameters as data, so a run records exactly what
was applied.

Both work on uint8 pixels, the currency of the evaluation workers (see
:mod:`robustlab.defences`), and return uint8 pixels rounded to the nearest value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from robustlab.errors import InputError

# 1 / Phi^-1(3/4): the median absolute value of a standard normal variable is 0.6745, so
# MAD / 0.6745 estimates the standard deviation of Gaussian noise (Donoho & Johnstone).
MAD_TO_SIGMA = 0.6745


def _check_rgb(rgb) -> np.ndarray:
    rgb = np.asarray(rgb)
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"a pixel defence needs a uint8 HxWx3 image, got {rgb.dtype} {rgb.shape}")
    return rgb


@dataclass(frozen=True)
class Clahe:
    """CLAHE on the lightness channel of CIELAB (OpenCV's implementation).

    Equalising L alone leaves hue and saturation as they were: equalising R, G and B
    separately would shift colours, which an ImageNet classifier relies on.

    Attributes:
        clip_limit: OpenCV's contrast limit (histogram bins are clipped at this multiple
            of the uniform bin height before equalising). 2.0 is the value of OpenCV's own
            CLAHE tutorial and the usual choice for photographs; OpenCV's API default, 40,
            amounts to plain adaptive equalisation and amplifies noise and JPEG blocks.
        tile_grid: Tiles per side (rows, columns). 8 x 8 tiles on a 224-pixel image are
            28 pixels wide, about the size of an object part: local enough to lift the
            contrast that fog and low contrast remove, coarse enough not to equalise noise.
    """

    name: ClassVar[str] = "clahe"
    clip_limit: float = 2.0
    tile_grid: tuple[int, int] = (8, 8)

    def __post_init__(self) -> None:
        grid = self.tile_grid
        if isinstance(grid, int):
            object.__setattr__(self, "tile_grid", (grid, grid))
        grid = tuple(self.tile_grid)
        if len(grid) != 2 or any(not isinstance(g, (int, np.integer)) or g < 1 for g in grid):
            raise InputError(
                f"clahe tile_grid must be one or two positive integers, got {self.tile_grid!r}"
            )
        object.__setattr__(self, "tile_grid", (int(grid[0]), int(grid[1])))
        if not float(self.clip_limit) > 0:
            raise InputError(f"clahe clip_limit must be positive, got {self.clip_limit!r}")

    def __call__(self, rgb) -> np.ndarray:
        import cv2

        rgb = _check_rgb(rgb)
        lab = cv2.cvtColor(rgb, cv2.COLOR_RGB2LAB)
        # cv2 takes the grid as (width, height): columns first.
        clahe = cv2.createCLAHE(
            clipLimit=float(self.clip_limit), tileGridSize=(self.tile_grid[1], self.tile_grid[0])
        )
        lab[..., 0] = clahe.apply(np.ascontiguousarray(lab[..., 0]))
        return cv2.cvtColor(lab, cv2.COLOR_LAB2RGB)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self), "tile_grid": list(self.tile_grid)}


def noise_sigma(rgb) -> float:
    """Standard deviation of additive Gaussian noise in ``rgb``, in 0..255 units.

    Donoho and Johnstone's robust estimator: the median absolute value of the finest
    diagonal wavelet coefficients divided by 0.6745. The finest diagonal subband of a
    natural image holds almost only noise (edges are sparse there), and the median ignores
    the few large coefficients they leave. The orthonormal Haar wavelet gives the subband
    directly: ``(a - b - c + d) / 2`` over each 2x2 block, which keeps the variance of
    white noise unchanged. One estimate per channel, averaged (as scikit-image's
    ``estimate_sigma(..., average_sigmas=True)``, which does the same with a Daubechies-2
    wavelet and needs PyWavelets).
    """
    rgb = _check_rgb(rgb)
    h, w = rgb.shape[0] // 2 * 2, rgb.shape[1] // 2 * 2
    if h == 0 or w == 0:
        return 0.0
    x = rgb[:h, :w].astype(np.float64)
    hh = (x[0::2, 0::2] - x[0::2, 1::2] - x[1::2, 0::2] + x[1::2, 1::2]) / 2.0
    sigmas = np.median(np.abs(hh.reshape(-1, 3)), axis=0) / MAD_TO_SIGMA
    return float(sigmas.mean())


@dataclass(frozen=True)
class NLMeans:
    """Non-local means whose strength follows the image's own noise estimate.

    Each pixel becomes a weighted mean of pixels whose surrounding patches look alike
    (scikit-image's ``denoise_nl_means``, fast mode). The noise sigma of every image is
    measured with :func:`noise_sigma` and passed to the filter, which subtracts the
    expected patch distance of pure noise (2 sigma^2) before weighting: on a clean photo
    (sigma of a pixel value or two) patches must match almost exactly to be averaged, so
    the photo is barely changed; on a noisy one the filter removes what it measured.

    Attributes:
        h_factor: Filter strength ``h = h_factor * sigma``. 0.6 is scikit-image's
            documented choice for the fast mode when sigma is given.
        patch_size: Side of the compared patches (5: scikit-image's example).
        patch_distance: Search radius in pixels (6: a 13 x 13 window, the same example).
        min_sigma: Below this estimated sigma (0..255 units) the image is returned
            unchanged: uint8 rounding alone gives 0.29, so there is nothing to remove.
    """

    name: ClassVar[str] = "nlmeans"
    h_factor: float = 0.6
    patch_size: int = 5
    patch_distance: int = 6
    min_sigma: float = 0.5

    def __post_init__(self) -> None:
        if not float(self.h_factor) > 0:
            raise InputError(f"nlmeans h_factor must be positive, got {self.h_factor!r}")
        if int(self.patch_size) < 1 or int(self.patch_distance) < 1:
            raise InputError(
                "nlmeans patch_size and patch_distance must be at least 1, got "
                f"{self.patch_size!r} and {self.patch_distance!r}"
            )
        if float(self.min_sigma) < 0:
            raise InputError(f"nlmeans min_sigma must be 0 or more, got {self.min_sigma!r}")

    def __call__(self, rgb) -> np.ndarray:
        from skimage.restoration import denoise_nl_means

        rgb = _check_rgb(rgb)
        sigma = noise_sigma(rgb)
        if sigma < float(self.min_sigma) or sigma == 0:
            return rgb.copy()
        s = sigma / 255.0
        out = denoise_nl_means(
            rgb.astype(np.float32) / 255.0,
            h=float(self.h_factor) * s,
            sigma=s,
            fast_mode=True,
            patch_size=int(self.patch_size),
            patch_distance=int(self.patch_distance),
            channel_axis=-1,
        )
        return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


PIXEL_DEFENCES = {c.name: c for c in (Clahe, NLMeans)}
