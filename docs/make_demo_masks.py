"""Make the demo set's foreground masks once (the checked-in PNGs under data/assets/demo/masks).

Each photo's mask is the project's own automatic masker, GrabCut seeded by the box in
``photos.csv`` (chosen by hand around the object of the photo's class: outside the box is
sure background, inside probable foreground), run at up to 512 px on the longer side.
Where the box alone gave a poor mask, ``cam_class`` names the ImageNet class whose lite0
class-activation map seeds GrabCut inside the box instead, and ``fill_holes`` fills the
holes the cut leaves inside the object (a white shirt inside a dark uniform).
The script also writes overlays (mask boundary in red, box in green) for inspecting the
masks by eye before checking them in; the demo never runs this script.

    python docs/make_demo_masks.py [--overlays DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np

PARAMS = {"max_side": 512, "iterations": 8, "seed": 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--overlays", default=None, help="write overlay PNGs for inspection here")
    ap.add_argument("--dry-run", action="store_true", help="do not overwrite the checked-in masks")
    args = ap.parse_args()

    from scipy import ndimage

    from robustlab.data.images import load_image
    from robustlab.workflows.demo import demo_photos
    from robustlab.masks import MaskerParams, class_activation_map, grabcut_mask, save_mask

    params = MaskerParams(**PARAMS)
    model = None
    for photo in demo_photos():
        rgb, _ = load_image(photo.source)
        cam = None
        if photo.cam_class is not None:
            if model is None:
                from robustlab.models import load_model

                model = load_model("lite0")
            cam, _ = class_activation_map(model, rgb, photo.cam_class)
        mask = grabcut_mask(rgb, bbox=photo.bbox, cam=cam, params=params)
        if photo.fill_holes:
            mask = ndimage.binary_fill_holes(mask)
        frac = float(mask.mean())
        print(f"{photo.id}: {rgb.shape[1]}x{rgb.shape[0]}, foreground {100 * frac:.1f}%")
        if not args.dry_run:
            save_mask(photo.mask, mask)
        if args.overlays:
            out = Path(args.overlays) / (Path(photo.id).stem + ".png")
            out.parent.mkdir(parents=True, exist_ok=True)
            vis = (rgb * np.where(mask[..., None], 1.0, 0.35)).astype(np.uint8)
            contours, _ = cv2.findContours(
                mask.astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE
            )
            cv2.drawContours(vis, contours, -1, (255, 0, 0), 2)
            x0, y0, x1, y1 = photo.bbox
            cv2.rectangle(vis, (x0, y0), (x1 - 1, y1 - 1), (0, 255, 0), 1)
            cv2.imwrite(str(out), cv2.cvtColor(vis, cv2.COLOR_RGB2BGR))


if __name__ == "__main__":
    main()
