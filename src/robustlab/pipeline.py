"""The one image pipeline shared by ``generate`` (files on disk) and on-the-fly ``evaluate``.

A source image goes through the same four steps whichever way it is used::

    decode -> prepare (resize shorter side, center crop) -> apply_shift -> encode/decode

``generate`` writes ``encode(...)`` to disk; evaluating on the fly uses
``as_stored(...)`` = ``decode(encode(...))``, so both see exactly the same pixels. The
clean image is ``prepare(...)`` without any re-encoding.

Geometry follows the ImageNet-C reference preprocessing, checked bit for bit against
``imagenet_c_reference.npz``: the shorter side becomes ``protocol.resize`` and the longer
side ``round(long * resize / short)`` (Python rounding, computed exactly), bilinear
through Pillow; the crop box starts at ``floor((side - crop) / 2)``. Note this differs from
torchvision's ``Resize`` (which truncates the long side) for some aspect ratios, e.g.
500x357 gives 359x256 here and 358x256 in torchvision; the reference data shows 359.
A protocol with ``frame="squash"`` (ImageNet-E, the 32 and 64 px presets) resizes the
whole photo to ``resize x resize`` instead, as the official ImageNet-E editor and
torchvision's ``Resize((64, 64))`` do; ``frame="inception"`` (the 299 px preset) first
cuts the central 87.5 % of each side as ``make_imagenet_c_inception.py``'s
``center_crop(img, 0.875)`` does (``int(side * 0.875)`` pixels from ``round((side -
kept) / 2)``), then squashes that to ``resize x resize``.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
from PIL import Image

from robustlab.cells import level_key
from robustlab.data.images import MIN_SIDE, ImageError, array_to_rgb, read_image
from robustlab.errors import CellSkipped, InputError
from robustlab.seeding import derive_seed, make_rng
from robustlab.settings import ToolSettings
from robustlab.shifts.registry import Shift, get_shift, resource_context

# Pillow filters by the names a Protocol may use.
INTERPOLATION = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
JPEG_SUFFIXES = (".jpg", ".jpeg", ".jpe")
# The inception frame's central crop: make_imagenet_c_inception.py's center_crop(img, 0.875).
INCEPTION_FRACTION = 0.875
# Context keys a shift may need that the pipeline knows how to fill.
DONOR_KEYS = frozenset({"background", "background_mask", "background_bbox"})


@dataclass(frozen=True)
class Geometry:
    """Where a source image's pixels end up: resize to ``size``, then crop ``box``.

    Attributes:
        source: (width, height) of the decoded source.
        size: (width, height) after the resize (equal to ``source`` when none).
        box: (left, top, right, bottom) crop in resized pixels, or None for no crop.
        pre_box: (left, top, right, bottom) crop in source pixels made before the resize
            (the ``inception`` frame), or None.
    """

    source: tuple[int, int]
    size: tuple[int, int]
    box: tuple[int, int, int, int] | None
    pre_box: tuple[int, int, int, int] | None = None

    @property
    def output(self) -> tuple[int, int]:
        """(width, height) of the prepared image."""
        if self.box is None:
            return self.size
        return self.box[2] - self.box[0], self.box[3] - self.box[1]


def geometry(width: int, height: int, protocol) -> Geometry:
    """The resize and crop ``protocol`` applies to a ``width`` x ``height`` source.

    Raises:
        ImageError: the prepared image would be smaller than a crop or than 32x32 (only
            possible without a resize; with one, small sources are upscaled like the
            reference does).
    """
    w, h = int(width), int(height)
    size = (w, h)
    frame = getattr(protocol, "frame", "shorter_side")
    pre_box = None
    if frame == "inception":
        kept_w, kept_h = int(w * INCEPTION_FRACTION), int(h * INCEPTION_FRACTION)
        if kept_w < 1 or kept_h < 1:
            raise ImageError(f"too small: {w}x{h} has no central 87.5 % to crop")
        top, left = int(round((h - kept_h) / 2.0)), int(round((w - kept_w) / 2.0))
        pre_box = (left, top, left + kept_w, top + kept_h)
        size = (kept_w, kept_h)
    if protocol.resize and frame in ("squash", "inception"):
        # The whole photo (or its central part) to resize x resize, aspect ratio not kept.
        size = (int(protocol.resize), int(protocol.resize))
    elif protocol.resize:
        r = int(protocol.resize)
        short, long = (w, h) if w <= h else (h, w)
        # Exact rational arithmetic so that x.5 cases round the same on every machine.
        new_long = max(1, round(Fraction(long * r, short)))
        size = (r, new_long) if w <= h else (new_long, r)
    box = None
    if protocol.crop:
        c = int(protocol.crop)
        if size[0] < c or size[1] < c:
            raise ImageError(f"too small: {size[0]}x{size[1]} cannot be center-cropped to {c}x{c}")
        left, top = (size[0] - c) // 2, (size[1] - c) // 2
        box = (left, top, left + c, top + c)
    g = Geometry((w, h), size, box, pre_box)
    ow, oh = g.output
    if ow < MIN_SIDE or oh < MIN_SIDE:
        raise ImageError(f"too small: {ow}x{oh}; shifts need at least {MIN_SIDE}x{MIN_SIDE} pixels")
    return g


def _resample(protocol) -> Image.Resampling:
    try:
        return INTERPOLATION[str(protocol.interpolation).lower()]
    except KeyError:
        raise ValueError(
            f"unknown interpolation {protocol.interpolation!r}; use one of {', '.join(INTERPOLATION)}"
        ) from None


def _apply_geometry(img: Image.Image, g: Geometry, resample) -> Image.Image:
    if g.pre_box is not None:
        img = img.crop(g.pre_box)
    if g.size != img.size:
        img = img.resize(g.size, resample)
    if g.box is not None:
        img = img.crop(g.box)
    return img


def prepare(rgb, protocol) -> np.ndarray:
    """Resize the shorter side and center crop ``rgb`` as ``protocol`` says.

    Args:
        rgb: HxWx3 uint8 RGB (any layout :func:`robustlab.data.images.array_to_rgb`
            accepts; an alpha plane is dropped, as Pillow's ``convert("RGB")`` does).
        protocol: A :class:`robustlab.suites.Protocol` (``resize``, ``crop``,
            ``interpolation``).

    Returns:
        HxWx3 uint8, contiguous. With ``resize=None`` and ``crop=None`` a copy of the input.

    Raises:
        ImageError: the result would be smaller than 32x32 or than the crop.
    """
    rgb, _ = array_to_rgb(rgb)
    g = geometry(rgb.shape[1], rgb.shape[0], protocol)
    if g.size == g.source and g.box is None and g.pre_box is None:
        return rgb.copy()
    img = _apply_geometry(Image.fromarray(rgb, "RGB"), g, _resample(protocol))
    return np.asarray(img).copy()


def prepare_mask(mask, protocol) -> np.ndarray:
    """Put a source-sized HxW mask through the same geometry (nearest neighbour, uint8)."""
    m = np.asarray(mask)
    if m.ndim == 3:
        m = m[..., 0]
    if m.ndim != 2:
        raise ValueError(f"mask must be HxW, got shape {tuple(m.shape)}")
    m = (m > 0).astype(np.uint8) * 255 if m.dtype == bool else m.astype(np.uint8, copy=False)
    g = geometry(m.shape[1], m.shape[0], protocol)
    img = _apply_geometry(
        Image.fromarray(np.ascontiguousarray(m), "L"), g, Image.Resampling.NEAREST
    )
    return np.asarray(img).copy()


def prepare_bbox(bbox, source_size: tuple[int, int], protocol) -> tuple[int, int, int, int] | None:
    """Map an ``(x0, y0, x1, y1)`` source box into prepared-image pixels (clipped).

    Returns None when the box falls entirely outside the crop.
    """
    g = geometry(source_size[0], source_size[1], protocol)
    px, py, pw, ph = 0, 0, g.source[0], g.source[1]
    if g.pre_box is not None:
        px, py = g.pre_box[0], g.pre_box[1]
        pw, ph = g.pre_box[2] - g.pre_box[0], g.pre_box[3] - g.pre_box[1]
    sx, sy = g.size[0] / pw, g.size[1] / ph
    ox, oy = (g.box[0], g.box[1]) if g.box else (0, 0)
    ow, oh = g.output
    x0, y0, x1, y1 = (float(v) for v in bbox)
    x0, x1, y0, y1 = x0 - px, x1 - px, y0 - py, y1 - py
    nx0 = min(max(round(x0 * sx) - ox, 0), ow)
    ny0 = min(max(round(y0 * sy) - oy, 0), oh)
    nx1 = min(max(round(x1 * sx) - ox, 0), ow)
    ny1 = min(max(round(y1 * sy) - oy, 0), oh)
    if nx1 <= nx0 or ny1 <= ny0:
        return None
    return int(nx0), int(ny0), int(nx1), int(ny1)


def resolve_shift(shift: str | Shift, preset: str | None = None) -> Shift:
    """A :class:`Shift` from a name (ValueError listing the names if unknown) or itself,
    drawing from ``preset``'s parameter table when one is given (a protocol's
    ``preset``: :meth:`robustlab.shifts.registry.Shift.preset`)."""
    sh = shift if isinstance(shift, Shift) else get_shift(shift)
    return sh.preset(preset)


def _to_uint8(x) -> np.ndarray:
    # Clip then truncate, as the reference's np.uint8(...) after its own clipping.
    x = np.asarray(x)
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    return np.clip(x, 0, 255).astype(np.uint8)


def apply_shift(rgb, sample_id: str, shift: str | Shift, level, seed: int, ctx=None) -> np.ndarray:
    """Apply ``shift`` at ``level`` with the generator of the seed rule.

    The generator is ``make_rng(derive_seed(seed, sample_id, shift.name, level))``, so the
    result depends only on these arguments: never on worker count, order or machine.

    Returns:
        uint8 HxWx3 (HxWx4 for shifts that produce RGBA, such as ``transparent``).

    Raises:
        ValueError: unknown shift or level, or a context the shift needs is missing.
    """
    sh = resolve_shift(shift)
    rng = make_rng(derive_seed(seed, sample_id, sh.name, level))
    x = np.asarray(rgb)
    out = _to_uint8(sh.apply(x, level, rng, ctx))
    if out.shape[:2] != x.shape[:2]:
        raise RuntimeError(f"{sh.name} changed the image size {x.shape[:2]} -> {out.shape[:2]}")
    return out


def _format(protocol) -> str:
    fmt = str(protocol.format).lower()
    if fmt in ("jpeg", "jpg"):
        return "jpeg"
    if fmt == "png":
        return "png"
    raise InputError(f"unknown output format {protocol.format!r}; use jpeg or png")


def encode(img, protocol) -> bytes:
    """The bytes of a generated file: JPEG (quality, optimize=True) or PNG.

    Raises:
        ValueError: an RGBA image for JPEG output (JPEG has no alpha; use png), or an
            unknown format.
    """
    x = _encodable(img)
    fmt = _format(protocol)
    if fmt == "jpeg":
        return _jpeg_bytes(_jpeg_input(x), protocol)
    buf = io.BytesIO()
    Image.fromarray(x, "RGBA" if x.shape[2] == 4 else "RGB").save(buf, "PNG")
    return buf.getvalue()


def _encodable(img) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(img))
    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[2] not in (3, 4):
        raise ValueError(f"encode needs HxWx3 or HxWx4 uint8, got {x.dtype} {x.shape}")
    return x


def _jpeg_input(x: np.ndarray) -> np.ndarray:
    if x.shape[2] == 4:
        raise InputError("JPEG cannot store an alpha channel; use format png")
    return x


def _jpeg_bytes(x: np.ndarray, protocol) -> bytes:
    """Pillow's (libjpeg's) JPEG of HxWx3 uint8 ``x`` at the protocol's quality, with
    Huffman tables fitted to the image (``optimize``: smaller files, 2.4x the encoding
    time; the quantised DCT coefficients, and so the decoded pixels, are the same)."""
    buf = io.BytesIO()
    Image.fromarray(x, "RGB").save(buf, "JPEG", quality=int(protocol.jpeg_quality), optimize=True)
    return buf.getvalue()


def decode(data: bytes) -> np.ndarray:
    """Pixels of an encoded file: HxWx3 uint8, or HxWx4 when it stores alpha.

    Decoded by the one image reader (:func:`robustlab.data.images.read_image`: header
    limits before any pixel, odd modes converted the one way), as a source photo is: a
    generated or published cell file is user input too. No EXIF orientation: these files
    are the benchmark's pixels as stored.

    Raises:
        ImageError: unreadable, not an image, or refused by its header (a bomb).
    """
    from robustlab.data.images import read_image

    d = read_image(io.BytesIO(data), exif_transpose=False)
    return d.rgb if d.alpha is None else np.dstack([d.rgb, d.alpha])


def as_stored(img, protocol) -> np.ndarray:
    """Exactly what a generated file holds: ``decode(encode(img))``.

    PNG is lossless, so it returns a copy without the round trip. JPEG takes a shorter
    road to the same pixels, since this runs once per cell of every on-the-fly
    evaluation (it was about a third of a worker's time): OpenCV's encoder and decoder
    straight on numpy arrays (:func:`robustlab.data.jpeg.roundtrip`), without Pillow's
    image objects and buffers (about 25 % less time per 224x224 cell). Both libraries
    drive libjpeg(-turbo) with the same settings here, as ``jpeg_compression`` relies on
    too. The result is byte for byte ``decode(encode(img))``: tests/test_pipeline.py
    checks it on photos, corruptions, noise, flat images and odd sizes, so a wheel whose
    bundled codec diverges is caught.
    """
    from robustlab.data.jpeg import roundtrip

    x = _encodable(img)
    if _format(protocol) == "png":
        return x.copy()
    return roundtrip(_jpeg_input(x), int(protocol.jpeg_quality))


def output_suffix(sample, protocol) -> str:
    """File extension of a generated cell.

    JPEG output keeps a JPEG source's own extension (ImageNet's ``.JPEG``), so the layout
    matches the published ImageNet-C folders; other sources get ``.jpg``. PNG: ``.png``.
    """
    if _format(protocol) == "png":
        return ".png"
    suffix = PurePosixPath(sample.id).suffix
    return suffix if suffix.lower() in JPEG_SUFFIXES else ".jpg"


def relative_output(sample, protocol) -> PurePosixPath:
    """``<class>/<stem><ext>`` under a cell folder (class omitted when unknown).

    ImageFolder ids already start with their class folder; flat ids (CSV labels) get the
    class prepended, which turns a flat labelled folder into the published layout.
    """
    rel = PurePosixPath(sample.id)
    parent = rel.parent
    cls = sample.class_name
    if cls and (not rel.parts[:-1] or rel.parts[0] != cls):
        parent = PurePosixPath(str(cls)) / parent
    return parent / (rel.stem + output_suffix(sample, protocol))


def cell_path(out_root, sample, shift, level, protocol) -> Path:
    """``<out>/<shift>/<level>/<class>/<stem>.<ext>``: where one generated cell lives."""
    name = shift.name if isinstance(shift, Shift) else str(shift)
    return Path(out_root) / name / level_key(level) / relative_output(sample, protocol)


@dataclass
class Prepared:
    """A decoded and prepared source: everything a shift may need from the sample itself.

    Attributes:
        rgb: The prepared image (the clean cell).
        mask: Prepared foreground mask (HxW uint8) when the sample has one.
        bbox: Object box in prepared pixels when the sample has one.
        mode: Pillow mode of the source file (``"RGB"``, ``"CMYK"``, ``"L"``, ...).
        note: What conversion happened, e.g. ``"converted from CMYK"``, and any
            ``degenerate`` note; empty when none.
        mask_note: Why the prepared mask cannot serve a shift although the source mask
            has foreground (the protocol's crop leaves none of it); empty otherwise. A
            shift that needs the mask is skipped with this reason rather than "mask is
            empty", which would send the user to a mask that is not empty.
        degenerate: Why the source is usable but degenerate, empty when it is not: a side
            under ``MIN_SIDE`` (32 px, :mod:`robustlab.data.images`; the least a shift
            runs on without a resize) is upscaled by the protocol's resize and evaluated,
            but a 1x1 or 5x5 "photo" holds no object to classify, so its prediction,
            counted in the accuracy, is noted (``"tiny source 5x5 px ..."``).
    """

    rgb: np.ndarray
    mask: np.ndarray | None = None
    bbox: tuple[int, int, int, int] | None = None
    mode: str = "RGB"
    note: str = ""
    degenerate: str = ""
    mask_note: str = ""


def load_prepared(
    sample, protocol, *, with_mask: bool = False, max_pixels: int | None = None
) -> Prepared:
    """Decode ``sample`` once and prepare it (and its mask and box) for every shift.

    Args:
        sample: A :class:`robustlab.data.sources.Sample`.
        protocol: The suite's protocol.
        with_mask: Load ``sample.mask_path`` too (ImageError if the sample has none), with
            :func:`robustlab.masks.io.load_mask`, the one mask reader of every command.
        max_pixels: Decompression-bomb limit (default: the image module's).

    Raises:
        ImageError: the source or its mask cannot be used; ``reason`` says why.
    """
    kw: dict[str, Any] = {} if max_pixels is None else {"max_pixels": max_pixels}
    d = read_image(sample.path, **kw)
    notes = []
    if d.mode != "RGB":
        notes.append(f"converted from {d.mode}")
    if d.alpha is not None:
        notes.append("alpha dropped")
    h, w = d.rgb.shape[:2]
    degenerate = ""
    if min(h, w) < MIN_SIDE:
        degenerate = f"tiny source {w}x{h} px (a side under {MIN_SIDE} px), upscaled"
        notes.append(degenerate)
    rgb = prepare(d.rgb, protocol)
    mask = None
    mask_note = ""
    if with_mask:
        if sample.mask_path is None:
            note = getattr(sample, "mask_note", None)
            raise ImageError(f"no usable mask ({note})" if note else "no mask for this sample")
        from robustlab.masks.io import load_mask

        try:
            mk = load_mask(sample.mask_path, **kw)
        except ValueError as exc:
            raise ImageError(str(exc)) from None
        if mk.shape != d.rgb.shape[:2]:
            raise ImageError(
                f"mask is {mk.shape[1]}x{mk.shape[0]} but the image is "
                f"{d.rgb.shape[1]}x{d.rgb.shape[0]}"
            )
        mask = prepare_mask(mk, protocol)
        if not mask.any() and mk.any():
            mask_note = (
                f"the mask's {int(np.count_nonzero(mk))} foreground pixels all lie outside "
                f"the protocol's {mask.shape[1]}x{mask.shape[0]} frame of the image"
            )
    bbox = None
    if sample.bbox is not None:
        bbox = prepare_bbox(sample.bbox, (d.rgb.shape[1], d.rgb.shape[0]), protocol)
    return Prepared(rgb, mask, bbox, d.mode, "; ".join(notes), degenerate, mask_note)


def donor_seed(seed: int, sample_id: str, shift_name: str, level) -> int:
    """Seed of the donor draw for background-swap shifts.

    Kept apart from the shift's own stream (``derive_seed`` with ``shift + "/donor"``) so the
    donor choice and, e.g., ``random_bg``'s object position are independent draws.
    """
    return derive_seed(seed, sample_id, f"{shift_name}/donor", level)


def shift_context(
    sample,
    prepared: Prepared,
    shift,
    level,
    seed: int,
    protocol,
    donors=None,
    *,
    max_pixels: int | None = None,
    settings: ToolSettings | None = None,
) -> dict[str, Any]:
    """The ``ctx`` for one cell: the sample's mask and box, the tools the shift uses, and a
    donor when needed.

    Args:
        sample: The sample being shifted.
        prepared: Its :func:`load_prepared` result.
        shift: Shift or name.
        level: Level.
        seed: Global seed.
        protocol: The suite's protocol (donors are prepared the same way).
        donors: The data set's :class:`robustlab.shifts.scenes.DonorPool` (or the list of
            all its samples) for shifts with a ``donor_rule``; the donor is drawn from
            :func:`donor_seed`.
        settings: The run's tool settings (the inpainter, the hole-fill backend...), the
            ones its record describes; None: the environment's.

    Raises:
        ValueError / ImageError: a needed mask, donor or configured resource (see
            :func:`robustlab.shifts.registry.register_resource`) is missing or unusable.
    """
    sh = resolve_shift(shift)
    ctx: dict[str, Any] = {}
    # The sample's class, for shifts guided by a classifier (ImageNet-E's adversarial level).
    if getattr(sample, "class_name", None) is not None:
        ctx["class_name"] = sample.class_name
    if prepared.mask is not None:
        if prepared.mask_note and "mask" in sh.needs:
            raise CellSkipped(prepared.mask_note)
        ctx["mask"] = prepared.mask
    if prepared.bbox is not None:
        ctx["bbox"] = prepared.bbox
    # The run's tools the shift uses (the ai_bg inpainter), loaded once per process.
    ctx.update(resource_context(sh, settings))
    rule = sh.extra.get("donor_rule")
    if rule or sh.needs & DONOR_KEYS:
        from robustlab.shifts.scenes import DonorPool

        if donors is None:
            raise ValueError(f"{sh.name} needs background donors (a donor pool)")
        if not isinstance(donors, DonorPool):
            donors = DonorPool(donors)
        rng = make_rng(donor_seed(seed, sample.id, sh.name, level))
        donor = donors.choose(sample, sh, rng)
        need_mask = "background_mask" in sh.needs or donor.mask_path is not None
        try:
            dp = load_prepared(
                donor,
                protocol,
                with_mask=need_mask and donor.mask_path is not None,
                max_pixels=max_pixels,
            )
        except ImageError as exc:
            raise ImageError(f"donor {donor.id}: {exc.reason}") from None
        ctx["background"] = dp.rgb
        if dp.mask is not None:
            ctx["background_mask"] = dp.mask
        if dp.bbox is not None:
            ctx["background_bbox"] = dp.bbox
        ctx["donor_id"] = donor.id
    return ctx


__all__ = [
    "Geometry",
    "Prepared",
    "geometry",
    "prepare",
    "prepare_mask",
    "prepare_bbox",
    "apply_shift",
    "encode",
    "decode",
    "as_stored",
    "cell_path",
    "relative_output",
    "output_suffix",
    "load_prepared",
    "shift_context",
    "donor_seed",
    "resolve_shift",
]
