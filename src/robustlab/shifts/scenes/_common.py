"""Shared pieces of the foreground/background scenarios: mask checks, geometry, donors.

Every scenario takes its foreground mask from ``ctx["mask"]`` (HxW, foreground > 0) and,
for the background swaps, a donor image from ``ctx["background"]``. The checks here turn
unusable input (wrong size, empty or full mask) into a one-line ``ValueError`` that the
runner records as a counted skip, instead of letting a scenario quietly return an image
that is not what its name promises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

from robustlab.errors import CellSkipped
from robustlab.seeding import randint

DONOR_RULES = ("same", "random", "next")


def check_image(image: np.ndarray) -> np.ndarray:
    """Return ``image`` as a contiguous HxWx3 uint8 array or raise ValueError."""
    x = np.asarray(image)
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[2] != 3:
        raise ValueError(f"scenario input must be an HxWx3 uint8 image, got {x.dtype} {x.shape}")
    return np.ascontiguousarray(x)


def check_mask(mask: Any, shape: Sequence[int], *, name: str = "mask") -> np.ndarray:
    """Validate a foreground mask against an image shape and return it as HxW bool.

    Why strict: a scenario run with a missing, mis-sized, empty or full mask would either
    crash deep inside OpenCV or return the clean image under a scenario's name; both
    corrupt the accuracy table silently. The caller skips the sample with this reason.

    Args:
        mask: HxW (or HxWx1) array of bool or integers; foreground is > 0.
        shape: The image's shape (only the first two entries are used).
        name: Context key, used in the message.

    Raises:
        ValueError: missing, wrong dimensionality or size, empty, or full.
    """
    if mask is None:
        raise CellSkipped(f"{name} is missing")
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[..., 0]
    if m.ndim != 2:
        raise CellSkipped(f"{name} must be a 2-D HxW array, got shape {tuple(m.shape)}")
    h, w = int(shape[0]), int(shape[1])
    if m.shape != (h, w):
        raise CellSkipped(f"{name} is {m.shape[1]}x{m.shape[0]} but the image is {w}x{h}")
    if m.dtype == bool:
        fg = m
    elif np.issubdtype(m.dtype, np.number):
        fg = m > 0
    else:
        raise CellSkipped(f"{name} must be bool or numeric, got {m.dtype}")
    n = int(fg.sum())
    if n == 0:
        raise CellSkipped(f"{name} is empty (no foreground pixels)")
    if n == fg.size:
        raise CellSkipped(f"{name} is full (no background pixels)")
    return np.ascontiguousarray(fg)


def mask_bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight box ``(x0, y0, x1, y1)`` (x1, y1 exclusive) around the foreground pixels."""
    ys = np.flatnonzero(mask.any(axis=1))
    xs = np.flatnonzero(mask.any(axis=0))
    return int(xs[0]), int(ys[0]), int(xs[-1]) + 1, int(ys[-1]) + 1


def moved_mask(mask: np.ndarray, offset: Sequence[int]) -> np.ndarray:
    """``mask`` (HxW bool) moved by ``offset`` ``(dx, dy)`` pixels, which must keep its box
    inside the image (a ``"moved"`` scene's draw: the object's true mask after the shift)."""
    x0, y0, x1, y1 = mask_bbox(mask)
    dx, dy = (int(v) for v in offset)
    h, w = mask.shape
    if not (0 <= x0 + dx and x1 + dx <= w and 0 <= y0 + dy and y1 + dy <= h):
        raise ValueError(f"offset {tuple(offset)} moves the box {(x0, y0, x1, y1)} off the image")
    moved = np.zeros_like(mask)
    moved[y0 + dy : y1 + dy, x0 + dx : x1 + dx] = mask[y0:y1, x0:x1]
    return moved


def check_bbox(bbox: Any, shape: Sequence[int]) -> tuple[int, int, int, int]:
    """Validate ``(x0, y0, x1, y1)`` in image pixels (x1, y1 exclusive); clip to the image."""
    try:
        x0, y0, x1, y1 = (int(round(float(v))) for v in bbox)
    except (TypeError, ValueError):
        raise CellSkipped(f"bbox must be four numbers (x0, y0, x1, y1), got {bbox!r}") from None
    h, w = int(shape[0]), int(shape[1])
    x0, x1 = max(0, x0), min(w, x1)
    y0, y1 = max(0, y0), min(h, y1)
    if x1 <= x0 or y1 <= y0:
        raise CellSkipped(f"bbox {tuple(bbox)} does not cover any pixel of the {w}x{h} image")
    return x0, y0, x1, y1


def object_box(ctx: dict, mask: np.ndarray, key: str = "bbox") -> tuple[int, int, int, int]:
    """The object's box: ``ctx[key]`` when given (prepared-image pixels), else the mask's."""
    if ctx.get(key) is not None:
        return check_bbox(ctx[key], mask.shape)
    return mask_bbox(mask)


def fit_donor(donor: Any, shape: Sequence[int], *, name: str = "background") -> np.ndarray:
    """Validate a donor image and resize it (bilinear) to the target's height and width."""
    if donor is None:
        raise CellSkipped(f"{name} is missing")
    d = np.asarray(donor)
    if d.dtype != np.uint8 or d.ndim != 3 or d.shape[2] not in (3, 4):
        raise CellSkipped(f"{name} must be an HxWx3 uint8 image, got {d.dtype} {d.shape}")
    d = np.ascontiguousarray(d[..., :3])
    h, w = int(shape[0]), int(shape[1])
    if d.shape[:2] != (h, w):
        d = cv2.resize(d, (w, h), interpolation=cv2.INTER_LINEAR)
    return d


def fit_mask(mask: Any, shape: Sequence[int], *, name: str) -> np.ndarray:
    """Resize a donor's mask (nearest neighbour) to ``shape`` and validate it."""
    if mask is None:
        raise CellSkipped(f"{name} is missing")
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[..., 0]
    if m.ndim == 2 and m.shape != tuple(shape[:2]):
        m = cv2.resize(
            (m > 0).astype(np.uint8),
            (int(shape[1]), int(shape[0])),
            interpolation=cv2.INTER_NEAREST,
        )
    return check_mask(m, shape, name=name)


def largest_background_strip(shape: Sequence[int], box: tuple[int, int, int, int]):
    """The largest of the four full-width/height strips outside ``box``, as slices.

    ImageNet-9 fills the object box with texture from the largest background rectangle that
    does not overlap the box; with one box the candidates are the strips above, below, left
    and right of it.
    """
    h, w = int(shape[0]), int(shape[1])
    x0, y0, x1, y1 = box
    strips = [
        ((slice(0, y0), slice(0, w)), y0 * w),
        ((slice(y1, h), slice(0, w)), (h - y1) * w),
        ((slice(0, h), slice(0, x0)), h * x0),
        ((slice(0, h), slice(x1, w)), h * (w - x1)),
    ]
    best, area = max(strips, key=lambda s: s[1])
    return best if area > 0 else None


def tile_fill(image: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """Copy of ``image`` with ``box`` filled by tiling the largest background strip.

    Raises:
        ValueError: the box covers the whole image, so there is no texture to tile.
    """
    strip = largest_background_strip(image.shape, box)
    if strip is None:
        raise CellSkipped("the object box covers the whole image: no background texture to tile")
    tex = image[strip]
    x0, y0, x1, y1 = box
    bh, bw = y1 - y0, x1 - x0
    reps = (-(-bh // tex.shape[0]), -(-bw // tex.shape[1]), 1)
    out = image.copy()
    out[y0:y1, x0:x1] = np.tile(tex, reps)[:bh, :bw]
    return out


def matte(rgba: np.ndarray, color: Sequence[int] = (255, 255, 255)) -> np.ndarray:
    """Composite an RGBA image over a solid colour and return HxWx3 uint8.

    Use this when a model needs RGB but a scenario produced RGBA (``transparent``).
    """
    x = np.asarray(rgba)
    if x.ndim != 3 or x.shape[2] != 4:
        return x
    a = x[..., 3:4].astype(np.float32) / 255.0
    out = x[..., :3].astype(np.float32) * a + np.asarray(color, np.float32) * (1.0 - a)
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------- donors
def _key(sample) -> Any:
    """Class key of a sample: its class name, else its label."""
    key = getattr(sample, "class_name", None)
    if key is None:
        key = getattr(sample, "label", None)
    if key is None:
        raise CellSkipped(
            f"sample {getattr(sample, 'id', sample)!r} has no class name or label; "
            "donor rules need classes"
        )
    return key


class DonorIndex:
    """Samples grouped by class, for picking background donors quickly.

    Build once per dataset and call :meth:`choose` per sample; :func:`choose_donor` builds
    one on every call, which is fine for small sets only.

    Args:
        samples: Candidate donors (anything with ``id`` and ``class_name`` or ``label``).
        eligible: Optional filter, e.g. ``lambda s: s.mask_path is not None`` for the
            ImageNet-9 mixes, whose donors need a mask of their own.
    """

    def __init__(self, samples: Sequence, eligible: Callable[[Any], bool] | None = None):
        pool = [s for s in samples if eligible is None or eligible(s)]
        pool.sort(key=lambda s: str(s.id))
        self.by_class: dict[Any, list] = {}
        for s in pool:
            self.by_class.setdefault(_key(s), []).append(s)
        self.classes = sorted(self.by_class, key=lambda k: (str(type(k)), k))

    def choose(self, sample, rule: str, rng):
        """A donor for ``sample`` under ``rule``.

        Rules:
            ``same``: another sample of the same class (ImageNet-9 mixed_same).
            ``random``: a class drawn uniformly among the *other* classes, then a sample of
            it (mixed_rand, XIMAGENET-12 random_bg).
            ``next``: the class after the sample's own in sorted class order, wrapping
            around (mixed_next), then a random sample of it.

        Raises:
            ValueError: unknown rule, or no donor exists under the rule.
        """
        if rule not in DONOR_RULES:
            raise ValueError(f"unknown donor rule {rule!r}; use one of {', '.join(DONOR_RULES)}")
        own = _key(sample)
        if rule == "same":
            pool = [s for s in self.by_class.get(own, []) if s.id != sample.id]
            if not pool:
                raise CellSkipped(f"no other sample of class {own!r} to use as a donor")
        else:
            others = [c for c in self.classes if c != own]
            if not others:
                raise CellSkipped("donor rule needs at least two classes")
            if rule == "random":
                cls = others[int(randint(rng, 0, len(others)))]
            else:
                ordered = sorted(set(self.classes) | {own}, key=lambda k: (str(type(k)), k))
                cls = ordered[(ordered.index(own) + 1) % len(ordered)]
                if cls == own:
                    raise CellSkipped("donor rule 'next' needs at least two classes")
            pool = self.by_class[cls]
        return pool[int(randint(rng, 0, len(pool)))]


def needs_donor_mask(shift) -> bool:
    """Whether ``shift``'s donors must bring a mask of their own (the ImageNet-9 mixes)."""
    return "background_mask" in shift.needs


class DonorPool:
    """The background donors of one data set: the one rule every path draws donors by.

    ``generate``, on-the-fly ``evaluate``, ``segment`` and the report's image grid all
    build their donors here from the *whole* discovered data set, so a cell's pixels
    depend only on the seed, the sample and the data set, never on ``--limit``, on which
    samples happen to be processed, or on which other shifts were selected. Per shift:

    - a shift that needs the donor's own mask (``background_mask``: ``mixed_same``,
      ``mixed_rand``, ``mixed_next``) draws among the samples that have a mask;
    - any other donor shift (``random_bg``) draws among all samples.

    Args:
        samples: Every sample of the data set (``discover``'s result), in any order.
    """

    def __init__(self, samples: Sequence):
        self.samples = tuple(samples)
        self._indexes: dict[bool, DonorIndex] = {}

    def __getstate__(self):
        return {"samples": self.samples, "_indexes": {}}  # indexes are rebuilt where used

    def index(self, shift) -> DonorIndex:
        """The :class:`DonorIndex` ``shift`` draws from (built once per eligibility kind)."""
        masked = needs_donor_mask(shift)
        if masked not in self._indexes:
            eligible = (lambda s: getattr(s, "mask_path", None) is not None) if masked else None
            self._indexes[masked] = DonorIndex(self.samples, eligible)
        return self._indexes[masked]

    def choose(self, sample, shift, rng):
        """A donor for ``sample`` under ``shift``'s donor rule (``random`` when it has none).

        Raises:
            ValueError: no donor exists under the rule (e.g. no other masked sample).
        """
        return self.index(shift).choose(sample, shift.extra.get("donor_rule") or "random", rng)


def choose_donor(
    samples: Sequence, sample, rule: str, rng, *, eligible: Callable[[Any], bool] | None = None
):
    """Pick a background donor for ``sample`` from ``samples`` under ``rule``.

    The runner calls this with the per-sample generator (``derive_seed(seed, sample.id,
    shift, level)``), so the donor is a function of the seed and the sample only. See
    :meth:`DonorIndex.choose` for the rules.
    """
    return DonorIndex(samples, eligible).choose(sample, rule, rng)
