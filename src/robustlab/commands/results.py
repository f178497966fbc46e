"""``robustlab results``: per-cell accuracy, CE / mCE rows, a per-run summary, Parquet export."""

from __future__ import annotations

from robustlab.commands._args import add_bootstrap, add_db, add_reference, add_runs

import sys


def add_parser(sub) -> None:
    p = sub.add_parser("results", help="show stored results (per cell, CE, mCE) or export them")
    add_db(p)
    p.add_argument(
        "--format",
        default="table",
        choices=["table", "csv", "json", "markdown"],
        help="output format (default: table). table and markdown print top1, error, CE and "
        "the other rates as percentages, in columns marked %%; csv and json keep them as "
        "fractions in [0, 1], as the Python API returns them",
    )
    p.add_argument("--model", action="append", help="only this model spec (repeatable)")
    p.add_argument("--suite", action="append", help="only this suite (repeatable)")
    add_runs(p)
    p.add_argument(
        "--baseline",
        default=None,
        help="CE baseline: 'alexnet' (bundled errors; full ImageNet val only) or a "
        "model spec evaluated on the same images (default: alexnet when valid)",
    )
    p.add_argument(
        "--export",
        metavar="DIR",
        default=None,
        help="write runs.parquet and predictions.parquet into DIR instead of a table",
    )
    p.add_argument("--output", "-o", default=None, help="write the table to this file")
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --output (or --export's .parquet files) even when it is not a file "
        "of that format (never an input)",
    )
    p.add_argument(
        "--segmentation",
        action="store_true",
        help="show segmentation runs (mIoU, pixel accuracy per cell) instead; shown "
        "anyway when the selected runs are all segmentation runs",
    )
    p.add_argument(
        "--summary",
        action="store_true",
        help="one row per run: images, clean and mean shifted top-1, mCE and relative "
        "mCE (with the baseline used), S_robust / partial S, BG-gap, and what tells runs "
        "apart: seed, protocol, path, precision, defence",
    )
    p.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        default=None,
        help="two runs (ids or prefixes) cell by cell: top-1 of each on their shared "
        "images, B - A and its paired bootstrap interval",
    )
    add_reference(p)
    add_bootstrap(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.commands._tables import format_table
    from robustlab.workflows.keywords import specs_from_args
    from robustlab.workflows.results import ResultsRequest, run_results

    if args.reference:  # the published rows only: no request, maybe no database
        from robustlab.store import Store

        return _emit(format_table(_reference(Store(args.db), args), args.format), [], args)
    request = specs_from_args("results", args, {"request": ResultsRequest})
    res = run_results(request["request"])
    if res.view == "export":
        for p in res.paths:
            print(p)
        return 0
    if res.view == "segmentation":
        from robustlab.commands.segment import format_segmentation

        return _emit(format_segmentation(res.table, args.format), res.notes, args)
    return _emit(format_table(res.table, args.format), res.notes, args)


def _reference(store, args):
    """The published rows of the selected runs' benchmarks (``--suite``'s, or all of
    them, without a database)."""
    from robustlab.metrics.reference import reference_rows

    if not store.exists():
        return reference_rows(args.suite)
    from robustlab.store.queries import select_runs

    runs = select_runs(store, run_ids=args.runs, models=args.model, suites=args.suite)
    # A run without a suite (ImageNet-D's, read from its folder) has None or, once pandas
    # has a float in the column, NaN there: both are "no suite", neither sorts with a name.
    keys = {
        "imagenet-d" if not isinstance(s, str) and space == "imagenet-d" else s
        for s, space in zip(runs["suite"], runs["label_space"])
    }
    return reference_rows(sorted(k for k in keys if isinstance(k, str) and k))


def _emit(text: str, notes, args) -> int:
    """Write the table to ``--output`` (or stdout) and the notes to stderr."""
    if args.output:
        from robustlab.commands._outputs import TABLE_KINDS
        from robustlab.files.safety import write_output

        kind = TABLE_KINDS.get(args.format, "table")
        write_output(args.output, text, kind=kind, flag="--output", force=args.force)
    else:
        sys.stdout.write(text)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
