"""Reference outputs of the OFFICIAL small-image ImageNet-C generators, stored as test fixtures.

The official code ships four generators besides ``make_imagenet_c.py`` (hendrycks/robustness,
``ImageNet-C/create_c/``): ``make_cifar_c.py`` (32x32), ``make_tinyimagenet_c.py`` and
``make_imagenet_64_c.py`` (64x64; the two files' corruption code is the same) and
``make_imagenet_c_inception.py`` (299x299). This script runs their corruption functions on
a few real photos and writes what they produce to ``tests/fixtures/presets_reference/``,
which ``tests/test_presets_fidelity.py`` compares robustlab's presets with.

How the official code is run (never a project dependency): the ``.py`` files are taken with
``git show`` from a local mirror of the repository (``--mirror``, default
``/work/.mirror/hendrycks+robustness/repo``) into a temporary folder, with the frost
photographs of the same folder. The scripts cannot be imported (their module level loads a
data set and writes to the authors' disks), so the text between their
``Distortion Helpers`` and ``End Distortions`` markers (every corruption and its helpers,
unchanged) is executed on its own, with the two edits that ``setup_reference_env.sh``
applies to the PyPI copy of ``make_imagenet_c.py`` (scikit-image >= 0.19 renamed
``multichannel=True`` to ``channel_axis=-1``; numpy dropped ``np.float_``). The 299 px
script's own ``resized_center_crop`` (with its ``center_crop`` and ``resize``) prepares
its photos; it is executed from the file too.

Run it with the reference environment's Python (numpy 1.26, scikit-image 0.20, scipy
1.11, OpenCV 3.4, Wand with ImageMagick 6 Q16: ``bash benchmarks/setup_reference_env.sh``)::

    benchmarks/.refenv/bin/python benchmarks/presets_reference.py

Photos: the first ones of ``tests/fixtures/shared-mini/imagenet-samples`` (always in the
repository), prepared as each script prepares its input: the 32 px preset squashes the
photo to 32x32 with Pillow's bilinear filter (make_cifar_c.py takes CIFAR's 32x32 arrays
as they are; a photo has to be brought to that size first), the 64 px scripts'
``transforms.Resize((64, 64))`` is Pillow's bilinear resize of both sides, and the 299 px
script's ``resized_center_crop`` is run as written. Seeds: ``np.random.seed(1000 * i + 10
* c + s)`` before each call (i the photo, c the corruption's place in the canonical order,
s the severity), as in ``imagenet_c_reference.npz``. Each output is ``np.uint8(...)`` of
the function's result, as the scripts store it.

What is stored per preset, ``<preset>.npz``: ``clean`` (the prepared photos); for the 32
px preset every output (``<corruption>_<severity>``, small); for all of them the SHA-256
of every output's bytes (``digests``, JSON) and, for impulse noise (scikit-image draws it
from a generator no seed reaches), the fraction of values each output changed
(``impulse``, JSON). ``meta`` (JSON) names the photos, the script and the versions.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PHOTOS = ROOT / "tests" / "fixtures" / "shared-mini" / "imagenet-samples"
OUT = ROOT / "tests" / "fixtures" / "presets_reference"
FOLDER = "ImageNet-C/create_c"
FROST = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg", "frost6.jpg")
# The canonical order of the 19 corruptions (seed rule's c).
NAMES = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "defocus_blur",
    "glass_blur",
    "motion_blur",
    "zoom_blur",
    "snow",
    "frost",
    "fog",
    "brightness",
    "contrast",
    "elastic_transform",
    "pixelate",
    "jpeg_compression",
    "speckle_noise",
    "gaussian_blur",
    "spatter",
    "saturate",
)
# preset -> (script, side, photos, keep every output in the npz)
PRESETS = {
    "cifar-c": ("make_cifar_c.py", 32, 2, True),
    "tiny-imagenet-c": ("make_tinyimagenet_c.py", 64, 2, False),
    "imagenet-64-c": ("make_imagenet_64_c.py", 64, 2, False),
    "imagenet-c-299": ("make_imagenet_c_inception.py", 299, 1, False),
}


def _show(mirror: Path, name: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(mirror), "show", f"HEAD:{FOLDER}/{name}"],
        check=True,
        capture_output=True,
    ).stdout


def _corruptions(text: str) -> dict:
    """The script's corruption functions: its distortion section executed on its own."""
    start = text.index("# /////////////// Distortion Helpers ///////////////")
    end = text.index("# /////////////// End Distortions ///////////////")
    section = text[start:end]
    section = section.replace("multichannel=True", "channel_axis=-1")
    section = section.replace("np.float_", "np.float64")
    scope: dict = {"np": np, "Image": Image}
    exec(compile(section, "<official corruptions>", "exec"), scope)  # noqa: S102
    return scope


def _frame_functions(text: str) -> dict:
    """The 299 px script's ``resize``, ``center_crop`` and ``resized_center_crop``."""
    tree = ast.parse(text)
    wanted = {"resize", "center_crop", "resized_center_crop"}
    code = "\n\n".join(
        ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name in wanted
    )
    import numbers

    scope: dict = {"Image": Image, "numbers": numbers}
    exec(compile(code, "<official frame>", "exec"), scope)  # noqa: S102
    return scope


def _photos(n: int) -> list[tuple[str, Image.Image]]:
    files = sorted(p for p in PHOTOS.iterdir() if p.suffix == ".JPEG")[:n]
    return [(p.name, Image.open(p).convert("RGB")) for p in files]


def _prepare(preset: str, img: Image.Image, side: int, frame: dict) -> Image.Image:
    if preset == "imagenet-c-299":
        return frame["resized_center_crop"](img)
    return img.resize((side, side), Image.BILINEAR)


def _versions() -> dict:
    import cv2
    import scipy
    import skimage
    import wand.version

    return {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-image": skimage.__version__,
        "opencv": cv2.__version__,
        "pillow": Image.__version__,
        "imagemagick": wand.version.MAGICK_VERSION,
    }


def make(preset: str, mirror: Path, work: Path, out: Path) -> None:
    script, side, n_photos, keep = PRESETS[preset]
    text = _show(mirror, script).decode()
    fns = _corruptions(text)
    frame = _frame_functions(text) if preset == "imagenet-c-299" else {}
    photos = _photos(n_photos)
    clean = [np.asarray(_prepare(preset, img, side, frame)) for _, img in photos]
    arrays: dict[str, np.ndarray] = {"clean": np.stack(clean)}
    digests: dict[str, list[str]] = {}
    impulse: dict[str, list[float]] = {}
    cwd = os.getcwd()
    os.chdir(work)  # the scripts read './frost1.png' ...
    try:
        for c, name in enumerate(NAMES):
            for s in range(1, 6):
                outs = []
                for i, x in enumerate(clean):
                    np.random.seed(1000 * i + 10 * c + s)
                    y = np.uint8(fns[name](Image.fromarray(x), s))
                    assert y.shape == x.shape, (preset, name, s, y.shape)
                    outs.append(y)
                key = f"{name}_{s}"
                digests[key] = [hashlib.sha256(y.tobytes()).hexdigest() for y in outs]
                if name == "impulse_noise":
                    impulse[key] = [float((y != x).mean()) for x, y in zip(clean, outs)]
                if keep:
                    arrays[key] = np.stack(outs)
            print(f"{preset}: {name}", flush=True)
    finally:
        os.chdir(cwd)
    meta = {
        "preset": preset,
        "script": f"hendrycks/robustness {FOLDER}/{script}",
        "photos": [name for name, _ in photos],
        "names": list(NAMES),
        "seed_rule": "np.random.seed(1000 * i + 10 * c + s)",
        "versions": _versions(),
    }
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out / f"{preset}.npz",
        meta=json.dumps(meta),
        digests=json.dumps(digests),
        impulse=json.dumps(impulse),
        **arrays,
    )
    print(f"wrote {out / f'{preset}.npz'}")


def main() -> int:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mirror", type=Path, default=Path("/work/.mirror/hendrycks+robustness/repo"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in FROST:
            (work / name).write_bytes(_show(args.mirror, name))
        for preset in args.preset or list(PRESETS):
            make(preset, args.mirror, work, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
