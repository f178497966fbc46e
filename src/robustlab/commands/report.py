"""``robustlab report [--db FILE] [--run ID ...] [--baseline SPEC] --out report.html``."""

from __future__ import annotations

from robustlab.commands._args import (
    check_resamples,
    add_runs,
    add_bootstrap,
    add_db,
    add_no_progress,
    add_reference,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help="write a self-contained HTML report of stored results",
        description="Write one HTML file (plots and images embedded; opens from disk with no "
        "server or network) with the runs' summary, ImageNet-C and scenario "
        "tables, plots, an example image grid and a leaderboard.",
    )
    add_db(p)
    add_runs(p)
    p.add_argument("--out", required=True, help="output HTML file, e.g. report.html")
    p.add_argument(
        "--baseline",
        default=None,
        help="CE baseline: 'alexnet' (full ImageNet val only) or a model spec evaluated "
        "on the same images (default: alexnet when valid, else no mCE)",
    )
    p.add_argument(
        "--no-grid",
        action="store_true",
        help="leave out the example image grid (it re-renders images from the data root)",
    )
    p.add_argument(
        "--grid-sample",
        default=None,
        metavar="ID",
        help="sample id to show in the image grid (default: chosen automatically)",
    )
    add_bootstrap(p)
    add_reference(p)
    p.add_argument("--title", default=None, help="page title")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even when it is not an HTML page (never an input)",
    )
    add_no_progress(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from robustlab.workflows.report import ReportRequest, build_report

    check_resamples(args)

    result = build_report(
        ReportRequest(
            db=args.db,
            out=args.out,
            run_ids=tuple(args.runs) if args.runs is not None else None,
            baseline=args.baseline,
            grid=not args.no_grid,
            grid_sample=args.grid_sample,
            seed=args.bootstrap_seed,
            n_resamples=args.resamples,
            title=args.title,
            progress=not args.no_progress,
            force=args.force,
            reference=args.reference,
        )
    )
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"report written to {result.path} ({len(result.tables)} tables, "
        f"{len(result.figures)} plots, {result.grids} image grid(s))",
        file=sys.stderr,
    )
    return 0
