"""Argument types shared by several subcommands."""

from __future__ import annotations

import argparse
import os


def max_workers() -> int:
    """The most ``--workers`` any command starts: 4 per CPU, at least 64.

    Why a ceiling: each worker is a process that imports torch (hundreds of MB), and the
    data loaders start them all at once, so ``--workers 100000000`` (a typo, a pasted
    number) would fork until the machine stops answering instead of failing in one line.
    """
    return max(64, 4 * (os.cpu_count() or 1))


def workers(text: str) -> int:
    """``--workers``: a count of worker processes, 0 to :func:`max_workers`; 0 means
    everything runs in the main process, in every command."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {n}")
    if n > max_workers():
        raise argparse.ArgumentTypeError(
            f"must be at most {max_workers()} (4 per CPU of this machine, at least 64), got {n}"
        )
    return n


class CommaList(argparse.Action):
    """A flag that both repeats and takes comma lists, the same in every command:
    ``--shift fog,contrast --shift frost`` and ``--shift fog --shift contrast --shift
    frost`` give ``["fog", "contrast", "frost"]``.

    Args:
        convert: Applied to each item (argparse's ``type`` would see the whole list).
    """

    def __init__(self, option_strings, dest, convert=None, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.convert = convert

    def __call__(self, parser, namespace, values, option_string=None):
        items = [v.strip() for v in str(values).split(",") if v.strip()]
        if not items:  # "--shifts ," must not mean "not given", i.e. everything
            from robustlab.errors import InputError

            what = self.dest.removesuffix("s")
            err = InputError(
                f"{option_string} {values!r} names no {what}",
                hint=f"leave {option_string} out for all, or name some",
            )
            err.prog = parser.prog  # the CLI reports it as this command's error
            raise err
        if self.convert is not None:
            items = [self.convert(v) for v in items]
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *items])


def level(text: str):
    """A level: an integer severity (``3``) or a named level (``default``)."""
    return int(text) if text.lstrip("-").isdigit() else text


def add_cell_filters(p, *, shifts: str = "shifts of the suite", levels: str = "levels") -> None:
    """``--shift`` and ``--level`` (with their aliases) that pick cells, alike everywhere.

    Args:
        shifts, levels: What the flags choose among, for their help ("only these ...").
    """
    p.add_argument(
        "--shift",
        "--shifts",
        action=CommaList,
        dest="shifts",
        help=f"only these {shifts} (repeatable, or comma-separated)",
    )
    p.add_argument(
        "--level",
        "--levels",
        "--severity",
        "--severities",
        action=CommaList,
        dest="levels",
        convert=level,
        help=f"only these {levels} (repeatable, or comma-separated)",
    )


def add_no_progress(p) -> None:
    """``--no-progress`` (alias ``--quiet``) in every command that draws a progress bar."""
    p.add_argument(
        "--no-progress",
        "--quiet",
        dest="no_progress",
        action="store_true",
        help="no progress output (bars on a terminal, periodic lines otherwise)",
    )


def add_backend(p, *, workers: bool = True) -> None:
    """``--backend local|ray`` and ``--address`` in every command that can run on Ray
    (``workers``: whether the command's ``--workers`` sizes a Ray instance started here)."""
    p.add_argument(
        "--backend",
        choices=["local", "ray"],
        default="local",
        help="where the work runs: worker processes on this machine, or a Ray "
        "cluster (pip install 'robustlab[ray]'); same results, same run, so "
        "a run started on one resumes on the other (default: local)",
    )
    p.add_argument(
        "--address",
        default=None,
        help="with --backend ray: the cluster's HOST:PORT that `ray start --head` "
        "printed (default: start a Ray instance on this machine, with "
        + ("--workers CPUs)" if workers else "all its CPUs)"),
    )


def add_defence_args(p, *, tta: bool = True) -> None:
    """``--preprocess`` (and ``--tta``): test-time defences, checked when the command runs
    so a bad name is one line that lists the choices."""
    p.add_argument(
        "--preprocess",
        default=None,
        metavar="NAME[:KEY=VALUE,...]",
        help="pixel defence applied to every image before the model: clahe "
        "(contrast-limited equalisation of lightness) or nlmeans (non-local "
        "means, strength from each image's noise estimate); parameters as in "
        "clahe:clip_limit=3,tile_grid=4x4 (default: none)",
    )
    if tta:
        p.add_argument(
            "--tta",
            default=None,
            metavar="NAME[:KEY=VALUE,...]",
            help="test-time augmentation: ten-crop (four corners and centre, and "
            "their mirror images, softmax averaged; ten-crop:scale=0.875) "
            "(default: none)",
        )


def add_inference_args(p) -> None:
    """``--precision`` and ``--compile`` in every command whose models predict through the
    evaluation engine (:mod:`robustlab.models.inference`)."""
    from robustlab.models.inference import PRECISIONS

    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="numeric precision of the forward pass: fp32 (default, comparable with "
        "published numbers), or bf16/fp16 under torch.autocast (softmax in fp32; torch "
        "models only; a run of its own, labelled @bf16)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run the forward pass through torch.compile (compiled before any work; "
        "needs a C compiler; a run of its own, labelled @compiled)",
    )
