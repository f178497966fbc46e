"""Reading and writing foreground masks: PNG folders, COCO RLE/polygon JSON, bbox CSVs.

Masks in robustlab are HxW bool arrays (foreground True). Sources disagree about how to
store them (0/255 or 0/1 grayscale, palette indices, an alpha plane, COCO run-lengths),
so everything is converted here, once, with the rule written down in each reader.
Every path that reads a mask file (``evaluate``, ``generate``, ``segment``, ``robustlab
masks``) goes through :func:`load_mask`, so a mask cannot mean one thing to one command
and another thing to the next.

Which mask belongs to which image (:func:`find_mask`): the mask of ``<dir>/<name>`` is
``<dir>/<name>.png`` (the image's full file name plus a mask extension, e.g.
``cat/a.jpg.png``), which can never be shared by two images. The older ``<dir>/<stem>.png``
(``cat/a.png``) is still accepted when no other image in ``<dir>`` has the same stem;
when one does (``a.jpg`` and ``a.png``), a stem-named mask is refused as ambiguous.
``robustlab masks`` writes full-name masks.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

import cv2
import numpy as np
from PIL import Image, ImageOps

from robustlab.data.images import MAX_PIXELS
from robustlab.errors import InputError

# Extensions a mask file may have (each also in upper case), in order of preference.
MASK_EXTENSIONS = (".png", ".bmp", ".tif", ".tiff")


def mask_from_pil(img: Image.Image) -> np.ndarray:
    """Foreground of a mask image, whatever its mode.

    Rules: palette (``P``) images: index > 0 (index 0 is background, as in VOC/COCO
    exports); images with a non-constant alpha plane: alpha > 0 (cut-outs); other images:
    values 0/1 are taken as they are, anything else is thresholded at half range (>= 128,
    or >= 32768 for 16-bit) so anti-aliased or JPEG-touched 0/255 masks still binarise;
    colour masks use their brightest channel.
    """
    mode = img.mode
    if mode == "P" and "transparency" not in img.info:
        return np.asarray(img) > 0
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        rgba = np.asarray(img.convert("RGBA"))
        alpha = rgba[..., 3]
        if alpha.min() != alpha.max():
            return alpha > 0
        arr = rgba[..., :3].max(axis=2)
    elif mode == "1":
        return np.asarray(img).astype(bool)
    elif mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        arr = np.asarray(img)
        if arr.max(initial=0) <= 1:
            return arr > 0
        return arr >= (128 if arr.max() <= 255 else 32768)
    elif mode == "L":
        arr = np.asarray(img)
    else:
        arr = np.asarray(img.convert("RGB")).max(axis=2)
    if arr.max(initial=0) <= 1:
        return arr > 0
    return arr >= 128


def load_mask(path: str | Path, *, max_pixels: int = MAX_PIXELS) -> np.ndarray:
    """Load one mask file as HxW bool (see :func:`mask_from_pil` for the rules).

    The EXIF orientation tag is applied, as for images, so a mask and its photo stay
    aligned whichever tool wrote them.

    Args:
        path: Mask file.
        max_pixels: Decompression-bomb limit, checked on the header before decoding.

    Raises:
        ValueError: missing, unreadable or too large file (the message says which).
    """
    path = Path(path)
    try:
        with Image.open(path) as img:
            w, h = img.size
            if w * h > max_pixels:
                raise InputError(
                    f"mask {path} is too large: {w}x{h} pixels exceeds the limit of {max_pixels}"
                )
            img.load()
            try:
                img = ImageOps.exif_transpose(img) or img
            except Exception:  # noqa: BLE001 - bad EXIF must not lose a good mask
                pass
            return mask_from_pil(img)
    except FileNotFoundError:
        raise InputError(f"mask file not found: {path}") from None
    except (
        OSError,
        SyntaxError,
        EOFError,
        Image.UnidentifiedImageError,
        Image.DecompressionBombError,
    ) as exc:
        raise InputError(f"unreadable mask {path}: {exc}") from None


def save_mask(path: str | Path, mask: np.ndarray) -> Path:
    """Write ``mask`` as an 8-bit 0/255 PNG (creating folders), whole or not at all.

    Through a temp file renamed into place (:func:`robustlab.files.outputs.atomic_write`): a
    symbolic link at ``path`` is replaced, never written through, so a link in a masks
    folder cannot make ``robustlab masks`` overwrite a file elsewhere."""
    import io

    from robustlab.files.atomic import atomic_write

    path = Path(path)
    buf = io.BytesIO()
    pixels = np.where(np.asarray(mask) > 0, 255, 0).astype(np.uint8)
    Image.fromarray(pixels, mode="L").save(buf, "PNG")
    atomic_write(path, buf.getvalue())
    return path


def _with_exts(base: PurePosixPath, name: str) -> list[PurePosixPath]:
    return [base / (name + e) for ext in MASK_EXTENSIONS for e in (ext, ext.upper())]


def mask_name(sample_id: str) -> PurePosixPath:
    """Where a new mask of ``sample_id`` is written, relative to a masks folder.

    The image's full file name plus ``.png`` (``cat/a.jpg`` -> ``cat/a.jpg.png``), so
    ``a.jpg`` and ``a.png`` in one folder get two different masks.
    """
    rel = PurePosixPath(sample_id)
    return rel.parent / (rel.name + ".png")


def stem_key(sample_id: str) -> tuple[str, str]:
    """(folder, case-folded stem): images with equal keys cannot share a stem-named mask."""
    rel = PurePosixPath(sample_id)
    return rel.parent.as_posix(), rel.stem.casefold()


def shared_stems(sample_ids) -> dict[str, list[str]]:
    """``id -> the other ids in its folder with the same stem``, for ids that have any."""
    groups: dict[tuple[str, str], list[str]] = {}
    for i in sample_ids:
        groups.setdefault(stem_key(i), []).append(i)
    return {i: [o for o in g if o != i] for g in groups.values() if len(g) > 1 for i in g}


def find_mask(
    exists: Callable[[PurePosixPath], bool], sample_id: str, siblings: list[str] | tuple = ()
) -> PurePosixPath | None:
    """The mask of ``sample_id`` relative to a masks folder, under the naming rule above.

    Args:
        exists: Whether a relative path is a file in the masks folder.
        sample_id: The image's id (posix path relative to the data root).
        siblings: Other images in the same folder with the same stem (see
            :func:`shared_stems`); with any, a stem-named mask is ambiguous.

    Raises:
        InputError: only a stem-named mask exists and it could belong to several images.
    """
    rel = PurePosixPath(sample_id)
    for cand in _with_exts(rel.parent, rel.name):
        if exists(cand):
            return cand
    for cand in _with_exts(rel.parent, rel.stem):
        if exists(cand):
            if siblings:
                raise InputError(
                    f"mask {cand} could belong to {sample_id} or {', '.join(sorted(siblings))} "
                    f"(same name stem); name each mask after its image's full file name, "
                    f"e.g. {mask_name(sample_id)}"
                )
            return cand
    return None


def mask_path_for(
    masks_root: str | Path, sample_id: str, siblings: list[str] | tuple = ()
) -> Path | None:
    """The mask file of ``sample_id`` under ``masks_root`` (:func:`find_mask`), if any."""
    from robustlab.files.safety import file_inside

    root = Path(masks_root)
    found = find_mask(lambda rel: file_inside(root, rel) is not None, sample_id, siblings)
    return None if found is None else root / found


def resize_mask(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Nearest-neighbour resize of a bool mask to ``(height, width)``."""
    h, w = size
    m = np.asarray(mask)
    if m.shape[:2] == (h, w):
        return m > 0
    return cv2.resize((m > 0).astype(np.uint8), (w, h), interpolation=cv2.INTER_NEAREST) > 0


# ------------------------------------------------------------------ COCO
def rle_string_to_counts(s: str | bytes) -> list[int]:
    """Decode COCO's compressed RLE string into run lengths.

    The format packs each count in 5-bit groups (ASCII offset 48, bit 0x20 = more groups
    follow, bit 0x10 of the last group = negative); from the fourth count on, each is
    stored as a difference to the count two places earlier.
    """
    if isinstance(s, bytes):
        s = s.decode("ascii")
    counts: list[int] = []
    p = 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            if p >= len(s):
                raise InputError("truncated COCO RLE string")
            c = ord(s[p]) - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def counts_to_rle_string(counts: Iterable[int]) -> str:
    """Encode run lengths as COCO's compressed RLE string (inverse of the decoder)."""
    counts = list(counts)
    out = []
    for i, c in enumerate(counts):
        x = c - counts[i - 2] if i > 2 else c
        more = True
        while more:
            ch = x & 0x1F
            x >>= 5
            more = not ((x == 0 and not ch & 0x10) or (x == -1 and ch & 0x10))
            if more:
                ch |= 0x20
            out.append(chr(ch + 48))
    return "".join(out)


def decode_rle(rle: dict) -> np.ndarray:
    """COCO RLE (``{"size": [h, w], "counts": list or str}``) to HxW bool.

    Runs alternate background/foreground starting with background, over the image in
    column-major (Fortran) order.
    """
    try:
        h, w = (int(v) for v in rle["size"])
        counts = rle["counts"]
    except (KeyError, TypeError, ValueError):
        raise InputError("COCO RLE needs 'size': [h, w] and 'counts'") from None
    if isinstance(counts, (str, bytes)):
        counts = rle_string_to_counts(counts)
    counts = np.asarray(counts, dtype=np.int64)
    if (counts < 0).any() or counts.sum() != h * w:
        raise InputError(f"COCO RLE counts sum to {int(counts.sum())}, expected {h}x{w}={h * w}")
    values = np.zeros(len(counts), dtype=bool)
    values[1::2] = True
    flat = np.repeat(values, counts)
    return flat.reshape((w, h)).T.copy()


def encode_rle(mask: np.ndarray) -> dict:
    """HxW mask to uncompressed COCO RLE (``counts`` as a list)."""
    m = np.asarray(mask) > 0
    flat = m.T.reshape(-1)
    change = np.flatnonzero(np.diff(flat.astype(np.int8))) + 1
    edges = np.concatenate([[0], change, [flat.size]])
    runs = np.diff(edges).tolist()
    if flat.size and flat[0]:
        runs = [0] + runs
    return {"size": [int(m.shape[0]), int(m.shape[1])], "counts": runs}


def polygons_to_mask(polygons: list, height: int, width: int) -> np.ndarray:
    """Rasterise COCO polygons (lists of x1, y1, x2, y2, ...) into an HxW bool mask."""
    canvas = np.zeros((height, width), np.uint8)
    pts = []
    for poly in polygons:
        a = np.asarray(poly, dtype=np.float64).reshape(-1)
        if a.size < 6 or a.size % 2:
            raise InputError(f"COCO polygon needs at least 3 (x, y) points, got {a.size} numbers")
        pts.append(np.round(a.reshape(-1, 2)).astype(np.int32))
    cv2.fillPoly(canvas, pts, 1)
    return canvas > 0


def load_coco_masks(
    path: str | Path, *, category_ids: Iterable[int] | None = None
) -> dict[str, np.ndarray]:
    """Union of every annotation's segmentation per image, keyed by ``file_name``.

    Args:
        path: COCO-style JSON with ``images`` (id, file_name, height, width) and
            ``annotations`` (image_id, segmentation as polygons or RLE, category_id).
        category_ids: Keep only these categories (all when None).
    """
    try:
        data = json.loads(Path(path).read_text())
        images = {im["id"]: im for im in data["images"]}
        anns = data["annotations"]
    except FileNotFoundError:
        raise InputError(f"COCO file not found: {path}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: not a COCO annotation file ({exc})") from None
    keep = None if category_ids is None else set(category_ids)
    out: dict[str, np.ndarray] = {}
    for ann in anns:
        if keep is not None and ann.get("category_id") not in keep:
            continue
        im = images.get(ann.get("image_id"))
        if im is None:
            raise InputError(
                f"{path}: annotation {ann.get('id')} refers to unknown image {ann.get('image_id')}"
            )
        h, w = int(im["height"]), int(im["width"])
        seg = ann.get("segmentation")
        if isinstance(seg, dict):
            m = decode_rle(seg)
        elif isinstance(seg, list):
            m = polygons_to_mask(seg, h, w)
        else:
            raise InputError(f"{path}: annotation {ann.get('id')} has no segmentation")
        if m.shape != (h, w):
            raise InputError(f"{path}: annotation {ann.get('id')} is {m.shape}, image is {(h, w)}")
        key = im["file_name"]
        out[key] = out[key] | m if key in out else m
    for im in images.values():
        out.setdefault(im["file_name"], np.zeros((int(im["height"]), int(im["width"])), bool))
    return out


# ------------------------------------------------------------------ bounding boxes
_BOX_COLUMNS = (("x0", "y0", "x1", "y1"), ("xmin", "ymin", "xmax", "ymax"), ("x", "y", "w", "h"))


def read_bboxes_csv(path: str | Path) -> dict[str, tuple[int, int, int, int]]:
    """Read ``file,x0,y0,x1,y1`` (or ``xmin..ymax`` or ``x,y,w,h``) rows; key: the file column.

    Several rows for one file are merged into the box around all of them (the seed for
    GrabCut must contain the whole object). Coordinates are source-image pixels, x1/y1
    exclusive.
    """
    path = Path(path)
    try:
        rows = list(csv.DictReader(path.read_text().splitlines()))
    except FileNotFoundError:
        raise InputError(f"bbox CSV not found: {path}") from None
    if not rows:
        raise InputError(f"{path}: no rows")
    cols = {c.strip().lower(): c for c in rows[0]}
    key = next(
        (cols[k] for k in ("file", "id", "image", "filename", "file_name") if k in cols), None
    )
    if key is None:
        raise InputError(f"{path}: needs a 'file' column (or id/image/filename)")
    names = next((n for n in _BOX_COLUMNS if all(c in cols for c in n)), None)
    if names is None:
        raise InputError(f"{path}: needs columns x0,y0,x1,y1 or xmin,ymin,xmax,ymax or x,y,w,h")
    out: dict[str, tuple[int, int, int, int]] = {}
    for i, row in enumerate(rows, start=2):
        try:
            a, b, c, d = (float(row[cols[n]]) for n in names)
        except (TypeError, ValueError):
            raise InputError(f"{path}:{i}: box values must be numbers") from None
        if names[2] == "w":
            c, d = a + c, b + d
        if c <= a or d <= b:
            raise InputError(f"{path}:{i}: empty box {a, b, c, d}")
        box = (int(np.floor(a)), int(np.floor(b)), int(np.ceil(c)), int(np.ceil(d)))
        f = row[key]
        if f in out:
            o = out[f]
            box = (min(o[0], box[0]), min(o[1], box[1]), max(o[2], box[2]), max(o[3], box[3]))
        out[f] = box
    return out


def bbox_to_mask(bbox, height: int, width: int) -> np.ndarray:
    """A filled rectangle mask for ``(x0, y0, x1, y1)`` (x1, y1 exclusive), clipped."""
    x0, y0, x1, y1 = (int(v) for v in bbox)
    m = np.zeros((height, width), bool)
    m[max(0, y0) : max(0, min(height, y1)), max(0, x0) : max(0, min(width, x1))] = True
    return m
