"""Argument types shared by several subcommands."""

from __future__ import annotations

import argparse
import os

from robustlab.settings import DTYPES, EDIT_FILL_BACKENDS, VARIABLES, flag


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


def count(text: str) -> int:
    """A count of things to take (``--limit``, ``--per-pair``, ``--steps``, ...): a whole
    number, 1 or more. Zero is refused here, in the flag's own words: ``--limit 0`` used to
    reach the work and fail later with a message about something else (no images with
    masks)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
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


def add_cell_filters(p, *, corruptions: bool = False) -> None:
    """``--shift`` and ``--level`` (with their aliases) that pick cells, alike everywhere:
    both read by the one selection grammar, :meth:`robustlab.suites.Suite.select`.

    Args:
        corruptions: Also take ``--corruptions`` (generate's first spelling).
    """
    p.add_argument(
        "--shift",
        "--shifts",
        *(["--corruptions"] if corruptions else []),
        action=CommaList,
        dest="shifts",
        help="only these shifts: names, families (blur), tags, globs (*_noise) or "
        "common/extra/all (repeatable, or comma-separated; default: all, or the cells a "
        "generated --data folder holds)",
    )
    p.add_argument(
        "--level",
        "--levels",
        "--severity",
        "--severities",
        action=CommaList,
        dest="levels",
        convert=level,
        help="only these levels or ranges, e.g. 1,3,5 or 1-3 (repeatable, or "
        "comma-separated; default: all, or the cells a generated --data folder holds)",
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


def add_backend(p) -> None:
    """``--backend local|ray`` and ``--address`` in every command that can run on Ray."""
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
        "printed (default: start a Ray instance on this machine, with --workers CPUs "
        "where the command takes --workers, else all its CPUs)",
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


# ----------------------------------------------------------------------------- vocabulary
# One definition of each flag that several commands take: the same name means the same
# thing, with the same default, everywhere. tests/test_cli_drift.py walks every subparser
# and fails when a flag drifts (its allow-list names the few flags whose meaning is the
# command's own, with the reason).

# robustlab.models.inference.PRECISIONS (spelled here, like DEFAULT_DB below, so that
# --help imports no model code; a test checks that they agree).
PRECISIONS = ("fp32", "bf16", "fp16")

# The results database every command reads or writes (robustlab.store.DEFAULT_DB, spelled
# here so that --help imports no store code; a test checks that the two agree).
DEFAULT_DB = "robustlab.duckdb"
# Bootstrap resamples of every interval the CLI prints or reports (the metrics functions'
# default too), so `results --compare` and `report` give one run the same intervals.
RESAMPLES = 2000


class Deprecated(argparse.Action):
    """An old spelling kept working: stores like the flag it stands for (``dest``) and
    prints one ``warning:`` line naming the new spelling. Hidden from ``--help``."""

    def __init__(self, option_strings, dest, new: str = "", type=None, **kwargs):
        kwargs.setdefault("help", argparse.SUPPRESS)
        super().__init__(option_strings, dest, type=type, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        import sys

        print(
            f"{parser.prog}: warning: {option_string} is deprecated here, use {self.new}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def add_db(p) -> None:
    """``--db``: the results database."""
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default: ./{DEFAULT_DB})")


def seed(text: str) -> int:
    """A seed flag's value (``--seed``, ``--split-seed``, ``--bootstrap-seed``): a whole
    number in the one range of :func:`robustlab.seeding.seed_problem`, the message the
    Python API gives too (2**70 used to pass here and fail as an internal error where the
    database stores it)."""
    from robustlab.seeding import SEED_RANGE, seed_problem

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {SEED_RANGE}, got {text!r}") from None
    problem = seed_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def add_seed(p) -> None:
    """``--seed``: the global seed of the seed rule, the one seed a run is keyed by."""
    p.add_argument(
        "--seed",
        type=seed,
        default=0,
        help="global seed of the seed rule: every random draw of the run derives from it "
        "(default: 0)",
    )


def add_bootstrap(p, *, legacy_seed: bool = True) -> None:
    """``--bootstrap-seed`` and ``--resamples``: the bootstrap of confidence intervals
    (:func:`check_resamples` checks the count, as one error line).

    ``--seed`` there used to mean the bootstrap seed; it still does in these commands,
    with a warning (``--seed`` is the global seed everywhere else)."""
    p.add_argument(
        "--bootstrap-seed",
        type=seed,
        default=0,
        help="seed of the bootstrap confidence intervals (default: 0)",
    )
    if legacy_seed:  # not where --seed is the command's global seed (card)
        p.add_argument(
            "--seed", action=Deprecated, dest="bootstrap_seed", type=seed, new="--bootstrap-seed"
        )
    p.add_argument(
        "--resamples",
        type=int,
        default=RESAMPLES,
        help=f"bootstrap resamples per confidence interval (default: {RESAMPLES})",
    )


def add_reference(p) -> None:
    """``--reference``: the published numbers beside a user's own (results, report)."""
    p.add_argument(
        "--reference",
        action="store_true",
        help="show the published numbers (the papers' tables and official repositories, "
        "a source and what it was measured on per value) of the selected runs' benchmarks",
    )


def add_workers(p) -> None:
    """``--workers``: worker processes, one default everywhere
    (:func:`robustlab.execution.lifeline.default_workers`: the cores the main process leaves
    free)."""
    p.add_argument(
        "--workers",
        type=workers,
        default=None,
        help="worker processes that read and shift images (default: CPU cores - 1, or "
        "none for a model on the CPU, whose forward pass uses every core; "
        "0: all in the main process)",
    )


def add_device(p) -> None:
    """``--device``: where models run."""
    p.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)"
    )


def add_labels(p) -> None:
    """``--labels`` (alias ``--labels-csv``): the labels CSV of a flat folder."""
    p.add_argument(
        "--labels",
        "--labels-csv",
        dest="labels_csv",
        default=None,
        help="labels CSV for a flat folder (default: DATA/labels.csv)",
    )


def add_into_existing(p) -> None:
    """``--into-existing``: fill an output folder that already holds other files (refused
    by default, :func:`robustlab.files.safety.check_out_folder`: the output would mix with them)."""
    p.add_argument(
        "--into-existing",
        action="store_true",
        help="write into an --out folder that is not empty and was not made by this "
        "command (refused otherwise: its files would mix with the output)",
    )


def add_unlabelled(p) -> None:
    """``--unlabelled``: accept images without labels (refused by default: nothing could
    score them)."""
    p.add_argument(
        "--unlabelled",
        action="store_true",
        help="accept a folder whose images have no labels (no class folders, no labels CSV); "
        "refused otherwise, since evaluate cannot score them",
    )


def add_masks(p, *, required: bool = False) -> None:
    """``--masks``: the foreground masks of the images."""
    p.add_argument(
        "--masks",
        required=required,
        default=None,
        help="folder of foreground masks parallel to --data",
    )


def add_bboxes(p) -> None:
    """``--bboxes``: object boxes of the images."""
    p.add_argument(
        "--bboxes", default=None, help="CSV of object boxes: file,x0,y0,x1,y1 in source pixels"
    )


def add_k(p, *, voters: str, default: int | None) -> None:
    """``-k`` (``--k``, ``--agree``): keep an image when at least K voters agree."""
    p.add_argument(
        "-k",
        "--k",
        "--agree",
        dest="k",
        type=int,
        default=default,
        help=f"the agreement threshold: at least K {voters}",
    )


def add_runs(p) -> None:
    """``--run``: only these stored runs (ids or prefixes; repeatable, several per flag)."""
    p.add_argument(
        "--run",
        nargs="+",
        action="extend",
        dest="runs",
        metavar="ID",
        help="only these run ids or id prefixes (repeatable; default: every run)",
    )


def check_resamples(args) -> None:
    """``--resamples`` must be at least 1 (an InputError line, not argparse's usage)."""
    if args.resamples < 1:
        from robustlab.errors import InputError

        raise InputError(f"--resamples must be at least 1, got {args.resamples}")


# ------------------------------------------------------------------ data, model, batches
# The flags below are the same in the commands that score a model against masks (saliency,
# segment) and the ones that run a classifier (evaluate, mine); what differs by command is
# passed in (a default, what a batch or the limit counts), so the sentence stays one.


def add_image_data(p) -> None:
    """``--data``: source images, as class folders or a flat folder plus labels CSV (the
    commands that read only source images; evaluate, train and mine say what else they
    read)."""
    p.add_argument(
        "--data", required=True, help="image folder (class folders, or flat + labels CSV)"
    )


def add_mask_suite(p) -> None:
    """``--suite`` of the commands that need an object mask per cell (saliency, segment):
    a suite of background scenarios."""
    p.add_argument(
        "--suite",
        default="ximagenet12",
        help="suite of mask scenarios: ximagenet12, imagenet9 or a YAML file "
        "(default: ximagenet12)",
    )


def add_weights(p, *, required: bool = False) -> None:
    """``--weights``: one local weights file for the model (never a download)."""
    p.add_argument("--weights", required=required, default=None, help="weights file for the model")


def add_label_space(p, *, default: str) -> None:
    """``--label-space``; ``default`` says what the command falls back to."""
    p.add_argument("--label-space", default=None, help=f"label space (default: {default})")


def add_batch_size(p, *, default: int | None = None, what: str = "images per forward pass") -> None:
    """``--batch-size``: ``what`` one model call takes (None: the model's own)."""
    tail = f" (default: {default})" if default is not None else ""
    p.add_argument("--batch-size", type=int, default=default, help=what + tail)


def add_limit(p, *, what: str = "images") -> None:
    """``--limit``: only the first N of what the command reads, sorted by id."""
    p.add_argument("--limit", type=count, default=None, help=f"only the first N {what}")


# One line of help per tool setting; the default is the environment variable of the same
# setting (robustlab.settings.VARIABLES), read when the run is planned.
_TOOL_HELP = {
    "inpainter": (
        "ai_bg's diffusers inpainting checkpoint folder (also the diffusers hole fill's)",
        "none: ai_bg is skipped",
    ),
    "inpainter_device": ("device of the inpainter: cpu, cuda, cuda:1", "cuda when available"),
    "inpainter_dtype": ("compute dtype of the inpainter", "float16 on a GPU, else float32"),
    "bg_diffusion": (
        "bg_complexity's guided-diffusion .pt file or diffusers UNet2DModel folder",
        "none: bg_complexity is skipped",
    ),
    "bg_diffusion_device": ("device of the background diffusion model", "cuda when available"),
    "bg_diffusion_dtype": (
        "compute dtype of the background diffusion model",
        "float16 on a GPU, else float32",
    ),
    "bg_adv_model": (
        "model spec of bg_complexity_adv's classifier (e.g. torchvision:resnet50)",
        "none: bg_complexity_adv is skipped",
    ),
    "edit_fill": ("hole fill of the ImageNet-E attribute edits", "patch"),
}
_TOOL_METAVAR = {
    "inpainter": "FOLDER",
    "inpainter_device": "DEVICE",
    "bg_diffusion": "CHECKPOINT",
    "bg_diffusion_device": "DEVICE",
    "bg_adv_model": "MODEL",
}


def add_tools(p) -> None:
    """The optional tools' settings (:class:`robustlab.settings.ToolSettings`), one flag per
    field: they decide pixels, so the run record and a generated folder's manifest describe
    them. Each left out is its ``ROBUSTLAB_*`` environment variable."""
    g = p.add_argument_group(
        "optional tools",
        "settings of the tools some shifts use (they decide pixels and are "
        "recorded with the run); each defaults to its ROBUSTLAB_* environment variable",
    )
    choices = {
        "inpainter_dtype": DTYPES,
        "bg_diffusion_dtype": DTYPES,
        "edit_fill": EDIT_FILL_BACKENDS,
    }
    for name, var in VARIABLES.items():
        g.add_argument(
            flag(name),
            default=None,
            choices=choices.get(name),
            metavar=_TOOL_METAVAR.get(name),
            help=f"{_TOOL_HELP[name][0]} (default: ${var}, else {_TOOL_HELP[name][1]})",
        )
