"""``robustlab review --data DIR [--predictions CSV] --db FILE``: people verify images.

Serves a local web page (127.0.0.1, a random access token in the printed URL) where one or
more named annotators accept, reject, flag ("not a single object") or relabel each image;
every decision is an event in the results database. ``--export OUT.csv`` applies the
agreement rule (k agreeing votes) and writes the final set instead of serving.
"""

from __future__ import annotations

from robustlab.commands._args import add_db, add_k

import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "review",
        help="verify images by hand in a local web app; export the agreed set",
        description="Serve a local web page for people to verify a set of images (accept, "
        "reject, not a single object, relabel; keyboard shortcuts, undo, several "
        "named annotators), storing every decision in the results database. "
        "With --export, write the images kept by the agreement rule instead.",
    )
    p.add_argument(
        "--data",
        required=True,
        metavar="DIR",
        help="labelled image folder: <class>/<file> (or <subset>/<class>/<file>, "
        "or a flat folder with labels.csv)",
    )
    p.add_argument(
        "--predictions",
        metavar="CSV",
        default=None,
        help="CSV with a 'file' column and one column per surrogate guess, shown "
        "beside each image (e.g. the CSV `robustlab mine` writes)",
    )
    add_db(p)
    p.add_argument(
        "--annotator",
        metavar="NAME",
        default=None,
        help="annotator name to put in the printed URL (each person can set theirs in the page)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default: 127.0.0.1, this machine only)",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port (default: 0, a free one)")
    p.add_argument(
        "--label-space",
        default=None,
        metavar="NAME",
        help="label space of the class folders and of relabel choices (default: a "
        "built-in space whose folder names match, else the folder names)",
    )
    p.add_argument(
        "--set",
        dest="set_name",
        default=None,
        metavar="NAME",
        help="name the set's decisions are stored under (default: the data folder's "
        "absolute path; give the same name after moving the folder)",
    )
    p.add_argument(
        "--export",
        metavar="OUT.csv",
        default=None,
        help="do not serve: write the images the agreement rule keeps (file, final "
        "class, votes) and print the agreement statistics",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --export: replace OUT.csv even when it is not a CSV file (never an input)",
    )
    add_k(p, voters="annotators agree on a class", default=2)
    p.add_argument(
        "--wait",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for a database another process is writing (default: 10)",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.errors import InputError, RobustlabError

    try:
        if args.k < 1:
            raise InputError(f"-k/--agree must be at least 1, not {args.k}")
        if not 0 <= args.port <= 65535:
            raise InputError(f"--port must be 0..65535, not {args.port}")
        return _export(args) if args.export else _serve(args)
    except RobustlabError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"robustlab review: error: {exc}{hint}", file=sys.stderr)
        return exc.exit_code


def _load(args):
    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.store.reviews import ReviewStore

    review_set = load_review_set(
        args.data, predictions=args.predictions, label_space=args.label_space, name=args.set_name
    )
    for note in review_set.notes:
        print(f"note: {note}", file=sys.stderr)
    return review_set, ReviewStore(args.db, timeout=args.wait)


def _export(args) -> int:
    from robustlab.workflows.imagenet_d.review import final_set, write_csv

    review_set, store = _load(args)
    final = final_set(review_set, store, k=args.k)
    path = write_csv(final, args.export, force=args.force)
    for note in final.notes:
        print(f"note: {note}", file=sys.stderr)
    if final.reasons:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(final.reasons.items()))
        print(f"not kept: {why}", file=sys.stderr)
    print(final.summary(), file=sys.stderr)
    print(f"final set written to {path}", file=sys.stderr)
    return 0


def _serve(args) -> int:
    from robustlab.workflows.imagenet_d.review.server import ReviewServer
    from robustlab.store.reviews import check_annotator

    annotator = check_annotator(args.annotator) if args.annotator else None
    review_set, store = _load(args)
    server = ReviewServer(review_set, store, host=args.host, port=args.port, annotator=annotator)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: listening on {args.host}: anyone who can reach this machine and has "
            "the URL can review",
            file=sys.stderr,
        )
    print(
        f"reviewing {len(review_set)} images ({review_set.label_space} label space) into "
        f"{store.path}; stop with Ctrl-C",
        file=sys.stderr,
    )
    print(f"open {server.url()}", flush=True)
    try:
        server.serve_forever()  # returns on Ctrl-C (Werkzeug catches the KeyboardInterrupt)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
    print("robustlab review: stopped; every decision is saved", file=sys.stderr)
    return 0
