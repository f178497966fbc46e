"""Exemplar hole fill: multi-scale PatchMatch completion, weights-free and seeded.

Why: OpenCV's diffusion-style inpainting (Telea, Navier-Stokes) propagates the hole's
boundary colours inwards along straight lines. On a large hole (the object that an
ImageNet-E edit moves or shrinks usually covers a third of the photo or more) that draws
radial streaks converging where the object was: a silhouette a classifier can see. An
exemplar fill instead copies whole patches of the surrounding background into the hole, so
the filled region has the background's own texture and no object-shaped structure.

The method is the classic image-completion loop (Wexler, Shechtman and Irani 2007; Barnes et
al. 2009's PatchMatch for the nearest-neighbour search), written here from the papers:

1. a Gaussian-free pyramid (area averages of the known pixels only; a coarse pixel is part
   of the hole when any of its fine pixels is), down to a side of about ``min_side``;
2. at the coarsest level the hole starts from OpenCV's Telea fill (only colours matter
   there) and every *target* patch (a patch centre within ``radius`` of the hole) gets a
   random *source* patch (a centre whose whole patch is known and inside the image);
3. per level, ``em`` rounds of: PatchMatch (propagation from the left/upper neighbour, or
   right/lower on odd sweeps, then random search at halving radii) minimising the patch
   SSD, and voting: every hole pixel becomes the weighted mean of the source pixels that
   the target patches covering it map onto it, with weights ``exp(-d / (2 sigma^2))``
   (``sigma^2`` the 75th percentile of the patches' mean squared distance);
4. the nearest-neighbour field and the image go up one level (the field doubled, the hole's
   colours bilinearly upsampled) and step 3 repeats, down to full resolution.

Pixels outside the hole are never changed. Every random draw comes from numba's generator
seeded with ``seed`` + level + round before each sweep, on one thread, so the output is a
function of (image, hole, settings) alone.
"""

from __future__ import annotations

import cv2
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _dist(img, ty, tx, sy, sx, r, limit):
    """Sum of squared differences of the patches at (ty, tx) and (sy, sx) and the number of
    pixels compared; the target patch is clipped to the image (the source one never needs
    to be). Stops early (returning a value above ``limit``) once the sum exceeds it."""
    h, w = img.shape[0], img.shape[1]
    s = 0.0
    n = 0
    for dy in range(-r, r + 1):
        y = ty + dy
        if y < 0 or y >= h:
            continue
        for dx in range(-r, r + 1):
            x = tx + dx
            if x < 0 or x >= w:
                continue
            for c in range(3):
                d = img[y, x, c] - img[sy + dy, sx + dx, c]
                s += d * d
            n += 1
        if s > limit:
            return s, n
    return s, n


@njit(cache=True, nogil=True)
def _patchmatch(img, valid, ty, tx, nny, nnx, nnd, r, sweeps, seed, search):
    """Improve the field (nny, nnx) of the targets (ty, tx) in place; nnd gets each target's
    mean squared patch distance per pixel and channel. Entries < 0 start at random."""
    np.random.seed(seed)
    h, w = img.shape[0], img.shape[1]
    vy, vx = np.nonzero(valid)
    nv = vy.size
    nt = ty.size
    raw = np.empty(nt, np.float64)
    cnt = np.empty(nt, np.int64)
    # index of each target in the lists, for the neighbours' look-up
    where = np.full((h, w), -1, np.int64)
    for i in range(nt):
        where[ty[i], tx[i]] = i
    for i in range(nt):
        y, x = nny[i], nnx[i]
        if y < 0 or not valid[y, x]:
            k = np.random.randint(0, nv)
            y, x = vy[k], vx[k]
        nny[i], nnx[i] = y, x
        raw[i], cnt[i] = _dist(img, ty[i], tx[i], y, x, r, np.inf)
    big = min(max(h, w), search)
    for sweep in range(sweeps):
        step = 1 if sweep % 2 == 0 else -1
        for j in range(nt):
            i = j if step == 1 else nt - 1 - j
            y0, x0 = ty[i], tx[i]
            best, by, bx = raw[i], nny[i], nnx[i]
            # propagation: the neighbour's match, shifted by one pixel
            for ny, nx in ((y0, x0 - step), (y0 - step, x0)):
                if ny < 0 or ny >= h or nx < 0 or nx >= w:
                    continue
                k = where[ny, nx]
                if k < 0:
                    continue
                cy, cx = nny[k] + (y0 - ny), nnx[k] + (x0 - nx)
                if cy < 0 or cy >= h or cx < 0 or cx >= w or not valid[cy, cx]:
                    continue
                d, c = _dist(img, y0, x0, cy, cx, r, best)
                if d < best:
                    best, by, bx = d, cy, cx
            # random search around the best match, at halving radii
            rad = big
            while rad >= 1:
                cy = by + np.random.randint(-rad, rad + 1)
                cx = bx + np.random.randint(-rad, rad + 1)
                rad //= 2
                if cy < 0 or cy >= h or cx < 0 or cx >= w or not valid[cy, cx]:
                    continue
                d, c = _dist(img, y0, x0, cy, cx, r, best)
                if d < best:
                    best, by, bx = d, cy, cx
            raw[i], nny[i], nnx[i] = best, by, bx
    for i in range(nt):
        nnd[i] = raw[i] / max(cnt[i] * 3, 1)


@njit(cache=True, nogil=True)
def _vote(img, hole, ty, tx, nny, nnx, nnd, r, sigma2, sharp):
    """Every hole pixel of ``img`` (in place): the weighted mean of the source pixels that
    the target patches covering it map onto it; ``sharp``: the pixel of the best-matching
    patch alone (no averaging, so fine grain is copied rather than blurred)."""
    h, w = img.shape[0], img.shape[1]
    acc = np.zeros((h, w, 3), np.float64)
    wsum = np.zeros((h, w), np.float64)
    best = np.full((h, w), np.inf)
    for i in range(ty.size):
        wt = np.exp(-nnd[i] / (2.0 * sigma2)) + 1e-12
        if sharp:
            for dy in range(-r, r + 1):
                y = ty[i] + dy
                if y < 0 or y >= h:
                    continue
                for dx in range(-r, r + 1):
                    x = tx[i] + dx
                    if x < 0 or x >= w or not hole[y, x] or nnd[i] >= best[y, x]:
                        continue
                    best[y, x] = nnd[i]
                    for c in range(3):
                        acc[y, x, c] = img[nny[i] + dy, nnx[i] + dx, c]
                    wsum[y, x] = 1.0
            continue
        for dy in range(-r, r + 1):
            y = ty[i] + dy
            if y < 0 or y >= h:
                continue
            for dx in range(-r, r + 1):
                x = tx[i] + dx
                if x < 0 or x >= w or not hole[y, x]:
                    continue
                sy, sx = nny[i] + dy, nnx[i] + dx
                for c in range(3):
                    acc[y, x, c] += wt * img[sy, sx, c]
                wsum[y, x] += wt
    for y in range(h):
        for x in range(w):
            if hole[y, x] and wsum[y, x] > 0:
                for c in range(3):
                    img[y, x, c] = acc[y, x, c] / wsum[y, x]


def _sources(hole: np.ndarray, r: int) -> np.ndarray:
    """Centres whose (2r+1)^2 patch is inside the image and holds no hole pixel."""
    h, w = hole.shape
    k = 2 * r + 1
    touched = cv2.dilate(hole.astype(np.uint8), np.ones((k, k), np.uint8)) > 0
    valid = ~touched
    valid[:r] = False
    valid[h - r :] = False
    valid[:, :r] = False
    valid[:, w - r :] = False
    return valid


def _targets(hole: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Centres of the patches that overlap the hole, in raster order."""
    k = 2 * r + 1
    near = cv2.dilate(hole.astype(np.uint8), np.ones((k, k), np.uint8)) > 0
    ty, tx = np.nonzero(near)
    return ty.astype(np.int64), tx.astype(np.int64)


def _down(img: np.ndarray, hole: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Half-size image (means of the known pixels) and hole (any fine hole pixel)."""
    h, w = hole.shape
    size = ((w + 1) // 2, (h + 1) // 2)
    known = (~hole).astype(np.float32)
    num = cv2.resize(img * known[..., None], size, interpolation=cv2.INTER_AREA)
    den = cv2.resize(known, size, interpolation=cv2.INTER_AREA)
    out = num / np.maximum(den, 1e-6)[..., None]
    return out.astype(np.float32), den < 1.0 - 1e-4


def patch_fill(
    image: np.ndarray,
    hole: np.ndarray,
    *,
    patch: int = 7,
    min_side: int = 32,
    min_sources: int = 64,
    em: tuple[int, int, int] = (4, 2, 1),
    sweeps: tuple[int, int, int] = (4, 2, 2),
    search: int = 8,
    sharp: bool = True,
    seed: int = 0,
) -> np.ndarray:
    """``image`` (HxWx3 uint8) with ``hole`` (HxW bool) filled by patches of the rest.

    ``em`` and ``sweeps``: EM rounds and PatchMatch sweeps per round at the coarser levels
    and at full resolution. A level is only added to the pyramid while it keeps at least
    ``min_sources`` whole known patches. ``sharp``: the last vote at full resolution takes
    each pixel from its best-matching patch instead of averaging (averaging blurs fine grain
    such as grass or noise into a smooth blob, itself a cue). Raises ValueError when even the full-resolution
    image has fewer (an object covering nearly all of it).
    """
    r = patch // 2
    hole = np.asarray(hole, dtype=bool)
    imgs = [np.asarray(image, dtype=np.float32)]
    holes = [hole]
    if _sources(hole, r).sum() < min_sources:
        raise ValueError("too little background for an exemplar fill")
    while min(holes[-1].shape) // 2 >= min_side:
        im2, ho2 = _down(imgs[-1], holes[-1])
        if _sources(ho2, r).sum() < min_sources:
            break
        imgs.append(im2)
        holes.append(ho2)
    # coarsest level: colours from Telea's fill, a random field
    top = imgs[-1]
    u8 = np.clip(top + 0.5, 0, 255).astype(np.uint8)
    cur = cv2.inpaint(u8, holes[-1].astype(np.uint8) * 255, 3, cv2.INPAINT_TELEA)
    cur = cur.astype(np.float32)
    ty, tx = _targets(holes[-1], r)
    nny = np.full(ty.size, -1, np.int64)
    nnx = np.full(ty.size, -1, np.int64)
    nlev = len(imgs)
    for lev in range(nlev - 1, -1, -1):
        ho = holes[lev]
        valid = _sources(ho, r)
        stage = 0 if lev == nlev - 1 else (2 if lev == 0 else 1)
        rounds, nsweep = em[stage], sweeps[stage]
        reach = 1 << 30 if stage == 0 else search
        nnd = np.zeros(ty.size, np.float64)
        for k in range(rounds):
            _patchmatch(cur, valid, ty, tx, nny, nnx, nnd, r, nsweep, seed + 1000 * lev + k, reach)
            sigma2 = max(float(np.percentile(nnd, 75)), 1e-3)
            _vote(cur, ho, ty, tx, nny, nnx, nnd, r, sigma2, sharp and lev == 0 and k == rounds - 1)
        if lev == 0:
            break
        # up one level: the field doubled, the hole's colours upsampled
        fine_ho = holes[lev - 1]
        fh, fw = fine_ho.shape
        up = cv2.resize(cur, (fw, fh), interpolation=cv2.INTER_LINEAR)
        nxt = imgs[lev - 1].copy()
        nxt[fine_ho] = up[fine_ho]
        field_y = np.full(ho.shape, -1, np.int64)
        field_x = np.full(ho.shape, -1, np.int64)
        field_y[ty, tx] = nny
        field_x[ty, tx] = nnx
        fty, ftx = _targets(fine_ho, r)
        cy = np.minimum(fty // 2, ho.shape[0] - 1)
        cx = np.minimum(ftx // 2, ho.shape[1] - 1)
        py, px = field_y[cy, cx], field_x[cy, cx]
        ok = py >= 0
        nny = np.where(ok, 2 * py + fty % 2, -1)
        nnx = np.where(ok, 2 * px + ftx % 2, -1)
        nny = np.where((nny >= 0) & (nny < fh), nny, -1)
        nnx = np.where((nnx >= 0) & (nnx < fw), nnx, -1)
        nny[nnx < 0] = -1
        ty, tx, cur = fty, ftx, nxt
    out = np.asarray(image).copy()
    out[hole] = np.clip(cur[hole] + 0.5, 0, 255).astype(np.uint8)
    return out


__all__ = ["patch_fill"]
