"""Reference outputs of the OFFICIAL ImageNet-E editing code, stored as test fixtures.

Runs the official functions of alibaba/easyrobust's ``benchmarks/imagenet-e/ImageNet-Editing``
(``resize_obj.py``: ``get_bbox_and_rate``, ``rescale``, ``rescale_maximum``;
``editing_diffusion/utils/change_place.py``: ``find_bbox``, ``change_place``; the
``Image.rotate`` of ``optimization/image_editor.py``) on a handful of real photos and
masks, and writes what they produce to ``tests/fixtures/imagenet_e_reference/``:

- ``<case>__frame_mask.png``: the 256x256 mask the official code was given;
- ``<case>__<edit>.png``: the official object layer (RGB; zeros where the official paste
  mask is zero) and ``<case>__<edit>__mask.png``: the official 8-bit mask (the pixels the
  editor pastes are those > 0);
- ``reference.json``: per case the source and a SHA-256 of the 256x256 frame the official
  code was fed, per edit the official numbers (rate, box, whether the original was copied,
  the position draw, the angle).

``tests/test_imagenet_e_reference.py`` feeds robustlab the same frame, mask and draw and
checks its edits against these files.

How the official code is run (never a project dependency): the three official ``.py``
files are extracted with ``git show`` from a local mirror of the repository
(``--mirror``, default ``/work/.mirror/alibaba+easyrobust/repo``) into a temporary folder
and imported there by a subprocess of this Python (their image operations need only
OpenCV, numpy, Pillow and, for ``change_place``, torch tensors; the unused ``imutils``
import is stubbed). The official ``__main__`` blocks cannot be imported, so the driver
below repeats their call sequence: ``resize_obj.py``'s main (``rescale_maximum`` first;
``rescale`` when the target is below the maximum rate; the original copied when the
result is None or anything raises), and the editor's position path (``find_bbox`` on the
rescaled mask, ``change_place`` with ``invert_mask`` as ``run.sh`` passes it). Images go
in as ``cv2.imread`` would give them (BGR; masks as 3-channel 8-bit images); the tensors
for ``change_place`` hold 0..255 instead of [-1, 1] so that the copied pixels come back
exactly (it only copies and selects). The position draw is the official stdlib
``random.randint``, seeded per case here and recorded.

Frames: the official dataset scripts squash a photo to 256x256 with Pillow's LANCZOS and
its mask with NEAREST; the same is done here. Photos: four demo photos with the project's
checked-in masks (always available) and one ``../shared/data/imagenet-samples`` photo
with a fixed ellipse mask (the shared data has no masks). Sizes 0.10/0.08/0.05 everywhere,
plus a target that takes the official "zoom to the maximum" branch and one that is
unreachable; position (base rate 0.05) everywhere, and at full size for the rocket; direction on the two thin objects (small files).

Usage::

    python benchmarks/imagenet_e_reference.py [--mirror DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
MIRROR = Path("/work/.mirror/alibaba+easyrobust/repo")
OFFICIAL = "benchmarks/imagenet-e/ImageNet-Editing"
FILES = {
    "resize_obj.py": f"{OFFICIAL}/resize_obj.py",
    "change_place.py": f"{OFFICIAL}/editing_diffusion/utils/change_place.py",
}
SHARED = ROOT.parent / "shared" / "data" / "imagenet-samples"
OUT = ROOT / "tests" / "fixtures" / "imagenet_e_reference"
FRAME = 256
DEMO_CASES = ("cat/chelsea.png", "espresso/coffee.png", "rocket/rocket.jpg", "tripod/camera.png")
SHARED_CASES = ("n01440764_tench.JPEG",)
SIZES = (0.10, 0.08, 0.05)
# Extra targets: the rocket at 0.9 takes the "zoom to the maximum" branch, the tripod at
# 0.3 is unreachable (the official code copies the original).
EXTRA_SIZES = {"rocket": (0.9,), "tripod": (0.3,)}
POSITION_BASE = 0.05
ANGLES = (45, -130)
DIRECTION_CASES = ("rocket", "tripod")  # thin objects: small files
# (centre x, centre y, half axis x, half axis y) of the fixed mask, in frame fractions.
ELLIPSE = (0.45, 0.55, 0.22, 0.30)


def ellipse_mask(size: int = FRAME) -> np.ndarray:
    """The fixed 0/255 ellipse mask of the shared-data cases (pixel centres inside)."""
    cx, cy, ax, ay = (v * size for v in ELLIPSE)
    yy, xx = np.mgrid[:size, :size] + 0.5
    return ((((xx - cx) / ax) ** 2 + ((yy - cy) / ay) ** 2 <= 1.0) * 255).astype(np.uint8)


def squash(path: Path, mask: bool) -> np.ndarray:
    """A photo (RGB, LANCZOS) or a mask (first band, NEAREST) squashed to FRAMExFRAME."""
    with Image.open(path) as im:
        im = im.convert("RGB")
        if mask:
            return np.asarray(im.resize((FRAME, FRAME), Image.Resampling.NEAREST))[..., 0].copy()
        return np.asarray(im.resize((FRAME, FRAME), Image.Resampling.LANCZOS)).copy()


def sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# Runs inside the temporary folder holding the official files.
DRIVER = r'''
import json, random, sys, types
sys.modules.setdefault("imutils", types.ModuleType("imutils"))  # imported, never used
sys.argv = [sys.argv[0]]
import contextlib, io
import cv2, numpy as np, torch
from PIL import Image
import resize_obj as R
import change_place as C

jobs = json.load(open("jobs.json"))
out = {}

def official_size(img, mask, scale):
    """resize_obj.py's __main__, minus the file copies: (image, mask_obj) or None (copied)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # rescale prints every rate
            a, b, c = R.rescale_maximum(img.copy(), mask.copy(), scale=scale)
            bbox, max_rate = R.get_bbox_and_rate(c)
            how = "maximum"
            if scale < max_rate:
                a, b, c = R.rescale(img.copy(), mask.copy(), scale=scale)
                how = "iterate"
        if a is None:
            return None, "None"
        return (a, c), how
    except Exception as exc:  # the official main copies the original on any error
        return None, type(exc).__name__

for job in jobs:
    case = job["case"]
    img = cv2.imread(job["frame"])          # BGR, as resize_obj.py reads it
    mask = cv2.imread(job["mask"])          # 3-channel 8-bit
    res = {}
    for scale in job["sizes"]:
        got, how = official_size(img, mask, scale)
        key = f"size_{scale:.2f}"
        if got is None:
            res[key] = {"copied": True, "why": how}
            continue
        a, c = got
        bbox, rate = R.get_bbox_and_rate(c)
        a = a.copy()
        a[c[:, :, 0] == 0] = 0  # only the pasted pixels are compared: keep the files small
        cv2.imwrite(f"{key}__{case}.png", a)
        cv2.imwrite(f"{key}__{case}__mask.png", c[:, :, 0])
        res[key] = {"copied": False, "how": how, "rate": float(rate), "box": list(map(int, bbox))}
    for pos in job["positions"]:
        base = pos["base"]
        if base is None:
            a, c = img, mask
        else:
            got, _ = official_size(img, mask, base)
            a, c = got if got is not None else (img, mask)
        # The editor: mask read as RGB, find_bbox on it (stdlib random draw), binarised > 0.5,
        # inverted (run.sh passes --invert_mask), change_place moves the box.
        mask_rgb = c[:, :, ::-1].copy()
        random.seed(pos["seed"])
        bbox = C.find_bbox(mask_rgb)
        binar = ((mask_rgb > 0.5) * 255).astype(np.uint8)
        inv = torch.from_numpy((255 - binar[:, :, 0]).astype(np.float32) / 255.0)[None, None]
        rgb = torch.from_numpy(a[:, :, ::-1].astype(np.float32).transpose(2, 0, 1).copy())[None]
        moved, inv_new = C.change_place(rgb, inv, bbox, True)
        new_mask = ((1 - inv_new[0, 0]) > 0.5).numpy()
        layer = moved[0].numpy().transpose(1, 2, 0).round().astype(np.uint8)
        layer[~new_mask] = 0
        key = pos["key"]
        Image.fromarray(layer).save(f"{key}__{case}.png")
        Image.fromarray((new_mask * 255).astype(np.uint8)).save(f"{key}__{case}__mask.png")
        res[key] = {"base_rate": base, "shrunk": base is not None and got is not None,
                    "box": [int(bbox[0]), int(bbox[1]), int(bbox[4]), int(bbox[5])],
                    "new_x": int(bbox[2]), "new_y": int(bbox[3]), "seed": pos["seed"]}
    for angle in job["angles"]:
        # image_editor.py: Image.open(...).convert("RGB").rotate(angle) (image and mask),
        # the mask binarised at > 0.5.
        rot = np.asarray(Image.open(job["frame"]).convert("RGB").rotate(angle))
        rm = np.asarray(Image.open(job["mask"]).convert("RGB").rotate(angle))[:, :, 0] > 0.5
        layer = rot.copy()
        layer[~rm] = 0
        key = f"direction_{angle}"
        Image.fromarray(layer).save(f"{key}__{case}.png")
        Image.fromarray((rm * 255).astype(np.uint8)).save(f"{key}__{case}__mask.png")
        res[key] = {"angle": angle}
    out[case] = res
json.dump(out, open("official.json", "w"))
'''


def cases() -> list[dict]:
    """Input frames: (name, source, 256x256 RGB, 256x256 0/255 mask)."""
    from robustlab.workflows.demo import demo_photos

    photos = {p.id: p for p in demo_photos()}
    out = []
    for pid in DEMO_CASES:
        p = photos[pid]
        name = pid.split("/")[0]
        out.append(
            {
                "case": name,
                "source": f"demo:{pid}",
                "mask_kind": "project",
                "rgb": squash(Path(p.source), mask=False),
                "mask": squash(Path(p.mask), mask=True),
            }
        )
    for fname in SHARED_CASES:
        path = SHARED / fname
        if not path.is_file():
            print(f"skipping {fname}: {SHARED} is not there", file=sys.stderr)
            continue
        out.append(
            {
                "case": fname.split("_", 1)[1].split(".")[0],
                "source": f"shared:imagenet-samples/{fname}",
                "mask_kind": "ellipse",
                "rgb": squash(path, mask=False),
                "mask": ellipse_mask(),
            }
        )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", type=Path, default=MIRROR, help="git dir of easyrobust")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    todo = cases()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        commit = subprocess.run(
            ["git", "-C", str(args.mirror), "rev-parse", "HEAD"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        for name, path in FILES.items():
            src = subprocess.run(
                ["git", "-C", str(args.mirror), "show", f"HEAD:{path}"],
                check=True,
                capture_output=True,
            ).stdout
            (t / name).write_bytes(src)
        jobs = []
        for c in todo:
            frame, mask = t / f"{c['case']}_frame.png", t / f"{c['case']}_mask.png"
            Image.fromarray(c["rgb"]).save(frame)
            Image.fromarray(c["mask"]).save(mask)
            positions = [{"key": "position_base0.05", "base": POSITION_BASE, "seed": 0}]
            if c["case"] == "rocket":  # a thin object: a small file
                positions.append({"key": "position_full", "base": None, "seed": 1})
            jobs.append(
                {
                    "case": c["case"],
                    "frame": str(frame),
                    "mask": str(mask),
                    "sizes": [*SIZES, *EXTRA_SIZES.get(c["case"], ())],
                    "positions": positions,
                    "angles": list(ANGLES) if c["case"] in DIRECTION_CASES else [],
                }
            )
        (t / "jobs.json").write_text(json.dumps(jobs))
        (t / "driver.py").write_text(DRIVER)
        subprocess.run([sys.executable, "driver.py"], cwd=t, check=True)
        official = json.loads((t / "official.json").read_text())
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.png"):
            old.unlink()
        record = {
            "official": {"repository": "alibaba/easyrobust", "commit": commit, "files": FILES},
            "frame": {"size": FRAME, "image": "PIL LANCZOS", "mask": "PIL NEAREST"},
            "ellipse": ELLIPSE,
            "cases": {},
        }
        for c in todo:
            name = c["case"]
            Image.fromarray(c["mask"]).save(args.out / f"{name}__frame_mask.png", optimize=True)
            for f in t.glob(f"*__{name}*.png"):
                key, _, rest = f.name.partition("__")
                tail = rest[len(name) :]  # "" or "__mask" + ".png"
                target = args.out / f"{name}__{key}{tail}"
                with Image.open(f) as im:  # RGB on disk (cv2.imwrite stored its BGR as RGB)
                    im.save(target, optimize=True)
            record["cases"][name] = {
                "source": c["source"],
                "mask": c["mask_kind"],
                "frame_sha256": sha256(c["rgb"]),
                "edits": official[name],
            }
        (args.out / "reference.json").write_text(
            json.dumps(record, indent=1, sort_keys=True) + "\n"
        )
    total = sum(f.stat().st_size for f in args.out.iterdir())
    print(f"wrote {len(list(args.out.iterdir()))} files, {total / 1024:.0f} KiB, to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
