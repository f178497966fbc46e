"""frost: blend in a crop of a frost photograph (ImageNet-C, weather family).

Reference: ``idx = randint(5)`` (so the sixth texture is never used), ``frost =
cv2.imread(texture[idx])`` (BGR), ``x0 = randint(0, th - 224)``, ``y0 = randint(0, tw -
224)``, ``frost = frost[x0:x0+224, y0:y0+224][..., ::-1]`` (RGB); output ``clip(a * img +
b * frost, 0, 255)``, truncated to uint8. The same draws happen here in the same order,
so ``RandomState`` seeds reproduce the reference bit for bit.

Textures: the six reference files ship with robustlab (``robustlab/data/assets/frost``,
byte-identical copies of those in the Apache-2.0 PyPI distribution ``imagecorruptions``;
see the README there). They are read with OpenCV as the reference does; decoded textures
are cached per process.

Any size: when the image is not strictly smaller than the texture in both directions
(the crop offset needs at least one valid position), the texture is enlarged like the
common generalisation (imagecorruptions) does: by 1.1 x max(H / th, W / tw), bicubic,
sizes rounded up. 224x224 images never trigger this (the smallest texture is 315x560).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import cv2
import numpy as np
from numba import njit

from robustlab.seeding import randint
from robustlab.shifts.registry import register_shift

TEXTURES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
N_DRAWN = 5  # the reference draws randint(5): frost6.jpg is never used
ENLARGE = 1.1


class FrostTexturesMissing(ValueError):
    """The frost textures are missing from the installation (a damaged install)."""


@functools.lru_cache(maxsize=1)
def texture_paths() -> tuple[Path, ...]:
    """Paths of the six reference frost textures shipped with robustlab."""
    folder = Path(str(resources.files("robustlab.data").joinpath("assets", "frost")))
    missing = [t for t in TEXTURES if not (folder / t).is_file()]
    if missing:
        raise FrostTexturesMissing(
            f"robustlab's frost textures {', '.join(missing)} are missing from {folder}; "
            "reinstall robustlab (pip install --force-reinstall robustlab)"
        )
    return tuple(folder / t for t in TEXTURES)


@functools.lru_cache(maxsize=len(TEXTURES))
def texture(index: int) -> np.ndarray:
    """Frost texture ``index`` (0..5) as OpenCV decodes it: HxWx3 uint8, BGR, read-only."""
    path = texture_paths()[index]
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FrostTexturesMissing(f"cannot decode the frost texture {path}")
    img.setflags(write=False)
    return img


def scaled_texture(index: int, scale: float) -> np.ndarray:
    """Texture ``index`` shrunk as the small-image generators do before cropping:
    ``cv2.resize(frost, (0, 0), fx=scale, fy=scale)`` (bilinear; make_cifar_c.py 0.2,
    make_tinyimagenet_c.py / make_imagenet_64_c.py 0.3). Scale 1: the texture itself."""
    return texture(index) if scale == 1 else _shrunk(index, scale)


@functools.lru_cache(maxsize=len(TEXTURES) * 4)
def _shrunk(index: int, scale: float) -> np.ndarray:
    small = cv2.resize(texture(index), (0, 0), fx=scale, fy=scale)
    small.setflags(write=False)
    return small


@functools.lru_cache(maxsize=32)
def _enlarged(index: int, h: int, w: int, scale: float = 1.0) -> np.ndarray:
    tex = scaled_texture(index, scale)
    th, tw = tex.shape[:2]
    scale = max(h / th, w / tw) * ENLARGE
    size = (int(np.ceil(tw * scale)), int(np.ceil(th * scale)))
    big = cv2.resize(tex, dsize=size, interpolation=cv2.INTER_CUBIC)
    big.setflags(write=False)
    return big


def texture_for(index: int, h: int, w: int, scale: float = 1.0) -> np.ndarray:
    """Texture ``index`` at ``scale``, enlarged when an ``h x w`` crop would not leave it
    any play."""
    tex = scaled_texture(index, scale)
    if tex.shape[0] > h and tex.shape[1] > w:
        return tex
    return _enlarged(index, h, w, scale)


def draw(rng, h: int, w: int, scale: float = 1.0) -> tuple[int, int, int]:
    """The reference's draws for an ``h x w`` image: texture index, crop top, crop left."""
    idx = int(randint(rng, N_DRAWN))
    tex = texture_for(idx, h, w, scale)
    top = int(randint(rng, 0, tex.shape[0] - h))
    left = int(randint(rng, 0, tex.shape[1] - w))
    return idx, top, left


@njit(cache=True, nogil=True)
def _blend(x, frost, top, left, ta, tb, out):
    """``uint8(clip(a*x + b*rgb(frost crop), 0, 255))``; ``ta[v] = a*v``, ``tb[v] = b*v``."""
    h, w, ch = x.shape
    for i in range(h):
        for j in range(w):
            for k in range(ch):
                v = ta[x[i, j, k]] + tb[frost[top + i, left + j, ch - 1 - k]]
                out[i, j, k] = np.uint8(min(max(v, 0.0), 255.0))


# The other official generators' constants (hendrycks/robustness ImageNet-C/create_c/):
# make_cifar_c.py; make_tinyimagenet_c.py = make_imagenet_64_c.py; make_imagenet_c_inception.py.
_CIFAR = [(1, 0.2, 0.2), (1, 0.3, 0.2), (0.9, 0.4, 0.2), (0.85, 0.4, 0.2), (0.75, 0.45, 0.2)]
_64PX = [(1, 0.3, 0.3), (0.9, 0.4, 0.3), (0.8, 0.45, 0.3), (0.75, 0.5, 0.3), (0.7, 0.55, 0.3)]
_299PX = [(1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)]
PRESETS = {
    "cifar-c": dict(enumerate(_CIFAR, 1)),
    "tiny-imagenet-c": dict(enumerate(_64PX, 1)),
    "imagenet-64-c": dict(enumerate(_64PX, 1)),
    "imagenet-c-299": dict(enumerate(_299PX, 1)),
}


@register_shift(
    "frost",
    family="weather",
    # (image weight, frost weight)
    params={1: (1.0, 0.4), 2: (0.8, 0.6), 3: (0.7, 0.7), 4: (0.65, 0.7), 5: (0.6, 0.75)},
    tags=("imagenet-c",),
    presets=PRESETS,
)
def frost(x, params, rng, ctx):
    """Frost: the image blended with a random crop of one of five frost photographs.

    ``params`` is ``(a, b)`` (image and frost weights), or ``(a, b, scale)`` for a preset
    whose generator shrinks the texture first (:func:`scaled_texture`).
    """
    a, b = params[:2]
    scale = float(params[2]) if len(params) > 2 else 1.0
    x = np.asarray(x)
    h, w = x.shape[:2]
    idx, top, left = draw(rng, h, w, scale)
    tex = texture_for(idx, h, w, scale)
    levels = np.arange(256, dtype=np.float64)
    out = np.empty(x.shape, np.uint8)
    _blend(x, tex, top, left, a * levels, b * levels, out)
    return out
