"""Regenerate docs/review-screenshot.png: the review page on the demo photos.

The six demo photos (shipped inside scikit-image and matplotlib) are the set, labelled in
the ``demo`` label space; the bundled EfficientNet-Lite0/1/2 give the surrogate guesses
(their real top-1 ImageNet predictions). One annotator has reviewed two photos; the page
shows the next one, in headless Chromium.

    python docs/make_review_screenshot.py [--out docs/review-screenshot.png]
"""

from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SURROGATES = ("lite0", "lite1", "lite2")


def predictions(data: Path, out: Path) -> None:
    """Each surrogate's top-1 ImageNet wnid per photo, as `robustlab mine` would list them."""
    import torch

    from robustlab.data.images import load_image
    from robustlab.data.labels import get_label_space
    from robustlab.data.sources import discover

    wnids = get_label_space("imagenet1k").wnids
    samples = discover(data)
    from robustlab.models import load_model

    guesses = {s.id: {} for s in samples}
    for spec in SURROGATES:
        model = load_model(spec, device="cpu")
        batch = torch.stack([model.transform(load_image(s.path)[0]) for s in samples])
        top1 = model.predict(batch).argmax(dim=1).tolist()
        for s, j in zip(samples, top1):
            guesses[s.id][spec] = wnids[j]
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "class", *SURROGATES])
        for s in samples:
            w.writerow([s.id, s.class_name, *(guesses[s.id][m] for m in SURROGATES)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "review-screenshot.png"))
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from robustlab.workflows.demo import materialise
    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.server import ReviewServer
    from robustlab.store.reviews import ReviewStore

    with tempfile.TemporaryDirectory() as tmp:
        data, _ = materialise(Path(tmp) / "demo")
        preds = Path(tmp) / "mined.csv"
        predictions(data, preds)
        review_set = load_review_set(data, predictions=preds, label_space="demo")
        store = ReviewStore(Path(tmp) / "review.duckdb")
        with ReviewServer(review_set, store, annotator="alice") as server:
            server.start()
            for item, decision in zip(review_set.items[:2], ("accept", "not_single")):
                store.record(review_set.name, item.id, "alice", decision, label=item.label)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1366, "height": 820})
                page.goto(server.url(), wait_until="load")
                page.wait_for_function(
                    "() => document.body.dataset.ready === '1' && "
                    "document.getElementById('image').complete"
                )
                page.screenshot(path=args.out)
                browser.close()
    print(f"{args.out}: review page with {len(review_set)} demo photos")


if __name__ == "__main__":
    main()
