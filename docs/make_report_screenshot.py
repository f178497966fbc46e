"""Regenerate docs/report-screenshot.png: a real report of lite0 vs lite1 on a few photos.

Evaluates both bundled models on N photos from ../shared/data/imagenet-samples under a few
ImageNet-C corruptions (lite1 is the CE baseline), writes the report, opens it in headless
Chromium and saves a screenshot of the top of the page (and, with --full, the whole page).

    python docs/make_report_screenshot.py [--photos 8] [--out docs/report-screenshot.png]
"""

from __future__ import annotations

import argparse
import csv
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "shared" / "data" / "imagenet-samples"
CORRUPTIONS = [
    "gaussian_noise",
    "impulse_noise",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", type=int, default=8)
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 3, 5])
    ap.add_argument("--out", default=str(HERE / "report-screenshot.png"))
    ap.add_argument("--html", default=None, help="also keep the report HTML here")
    ap.add_argument("--full", action="store_true", help="screenshot the whole page")
    args = ap.parse_args()

    import robustlab
    from robustlab.workflows.report import build_report
    from robustlab.shifts.corruptions import list_corruptions

    have = set(list_corruptions("all"))
    shifts = [c for c in CORRUPTIONS if c in have]
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "photos"
        data.mkdir()
        with open(SAMPLES / "labels.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))[: args.photos]
        for r in rows:
            shutil.copy(SAMPLES / r["file"], data / r["file"])
        with open(data / "labels.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        db = Path(tmp) / "results.duckdb"
        for spec in ("lite0", "lite1"):
            robustlab.evaluate(
                spec,
                data,
                suite="imagenet-c",
                shifts=shifts,
                levels=args.levels,
                db=db,
                progress=False,
            )
        html = Path(args.html) if args.html else Path(tmp) / "report.html"
        result = build_report(db, html, baseline="lite1", title="robustlab report: lite0 vs lite1")
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1366, "height": 1000})
            page.goto(html.resolve().as_uri(), wait_until="load")
            page.screenshot(path=args.out, full_page=args.full)
            browser.close()
    print(f"{args.out}: {len(result.tables)} tables, {len(result.figures)} plots")


if __name__ == "__main__":
    main()
