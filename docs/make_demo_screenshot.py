"""Regenerate docs/demo-screenshot.png: the top of the report that ``robustlab demo`` writes.

Runs the demo into a folder (resuming when it is already there), opens its report in
headless Chromium and saves the first screen.

    python docs/make_demo_screenshot.py [--demo-out DIR] [--out docs/demo-screenshot.png]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo-out", default="robustlab-demo", help="demo folder (run or resumed)")
    ap.add_argument("--out", default=str(HERE / "demo-screenshot.png"))
    ap.add_argument("--height", type=int, default=1100, help="screenshot height in CSS pixels")
    args = ap.parse_args()

    from playwright.sync_api import sync_playwright

    from robustlab.workflows.demo import REPORT_NAME, run_demo

    run_demo(args.demo_out)
    report = Path(args.demo_out).resolve() / REPORT_NAME
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": args.height})
        page.goto(report.as_uri())
        page.wait_for_load_state("load")
        page.screenshot(path=args.out)
        browser.close()
    print(args.out)


if __name__ == "__main__":
    main()
