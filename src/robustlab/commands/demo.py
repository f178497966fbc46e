"""``robustlab demo``: the whole pipeline on the embedded demo set (see robustlab.workflows.demo)."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run the whole pipeline on the embedded demo photos")
    p.add_argument(
        "--out", default="robustlab-demo", help="output folder (default: ./robustlab-demo)"
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from robustlab.workflows.demo import run_demo

    return run_demo(args.out)
