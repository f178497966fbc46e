"""The report's first lines: one per benchmark with its top-1, interval and image count,
and which runs were measured on images drawn by random-weight checkpoints.

A reader who stops after the first screen should still leave with the right numbers and
their uncertainty: on six photos an interval spans 50 points, and a run on images drawn by
``robustlab data tiny-checkpoints`` measures noise. Both facts used to live sections
further down (or only on the terminal); here they are said first, from the numbers
:mod:`robustlab.workflows.report.gather` already computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from robustlab.store.schema import HOLDOUT_SUITE
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.html import is_missing
from robustlab.workflows.report.render import render
from robustlab.workflows.report.runs import RunView

if TYPE_CHECKING:
    from markupsafe import Markup

# How the report names each benchmark (the suite names are the CLI's).
BENCHMARKS = {
    "imagenet-c": "ImageNet-C",
    "ximagenet12": "XIMAGENET-12",
    "imagenet9": "ImageNet-9",
    "imagenet-e": "ImageNet-E",
    "imagenet-d": "ImageNet-D",
    HOLDOUT_SUITE: "Surface variation",
}

# The words a flagged run carries in every table it appears in (and the note that says why).
RANDOM_MARK = "\u26a0 random weights"
RANDOM_NOTE = (
    f"{RANDOM_MARK}: the run's images were drawn by a diffusion checkpoint with random "
    "weights (robustlab data tiny-checkpoints): they are noise, so its accuracy measures "
    "nothing about the model"
)

CLEAN_DEFINED = (
    "clean top-1: share of the unshifted images whose first prediction is the label, "
    "the images shown as the run's protocol frames them"
)
SHIFTED_DEFINED = (
    "shifted top-1: share of all shifted predictions (every shifted cell, i.e. shift x "
    "level, pooled) whose first prediction is the label"
)


def benchmark_key(record: dict) -> str:
    """The benchmark a run belongs to: its suite, ``imagenet-d`` for a run on ImageNet-D's
    label space (those runs read a folder and store no suite), else ``clean only``."""
    suite = record.get("suite")
    if not is_missing(suite) and suite:
        return str(suite)
    if record.get("label_space") == "imagenet-d":
        return "imagenet-d"
    return "clean only"


def benchmark_title(record: dict) -> str:
    """``ImageNet-C v1``: the benchmark's name and, when stored, the suite's version."""
    key = benchmark_key(record)
    version = record.get("suite_version")
    tail = "" if is_missing(version) or not version else f" v{version}"
    return BENCHMARKS.get(key, key) + tail


def random_weight_runs(runs: list[RunView]) -> dict[str, str]:
    """run id -> the random-weight checkpoint that drew its images, for the runs whose data
    root is a ``robustlab synth`` folder made by one (its manifest names the checkpoint,
    and the checkpoint carries the tiny-checkpoints marker). A folder that is gone since
    cannot be checked, and is not flagged."""
    from robustlab.shifts.generative.tiny import drawn_by_random

    found = {}
    for r in runs:
        root = r.record.get("data_root")
        ckpt = drawn_by_random(root) if root and not is_missing(root) else None
        if ckpt:
            found[r.run_id] = ckpt
    return found


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _interval(entry: dict, key: str, confidence: float) -> str:
    lo, hi = entry.get(f"{key}_lo"), entry.get(f"{key}_hi")
    if is_missing(lo) or is_missing(hi):
        return ""
    return f" ({100 * confidence:.0f} % CI {100 * lo:.1f}\u2013{100 * hi:.1f})"


def _run_part(d: ReportData, r: RunView, images: dict[str, int]) -> str:
    """One run's numbers: clean and shifted top-1 with intervals and counts."""
    entry = d.pooled.get(r.run_id, {})
    parts = []
    if not is_missing(entry.get("clean")):
        parts.append(
            f"clean top-1 {_pct(entry['clean'])}{_interval(entry, 'clean', d.confidence)} "
            f"on {int(entry['clean_n'])} images"
        )
    if not is_missing(entry.get("shifted")):
        n_cells = int(
            (d.cells[d.cells["run_full"] == r.run_id]["shift"] != "clean").sum()
            if not d.cells.empty
            else 0
        )
        parts.append(
            f"shifted top-1 {_pct(entry['shifted'])}"
            f"{_interval(entry, 'shifted', d.confidence)} over {n_cells} cells, "
            f"{int(entry['shifted_n'])} predictions"
        )
    n = images.get(r.run_id)
    head = f"{r.label}: " + ("; ".join(parts) if parts else "no accuracy stored")
    return head + (f" ({n} distinct images)" if n else "")


def headline(d: ReportData, flagged: dict[str, str]) -> Markup:
    """HTML: one line per benchmark (its runs' numbers), then what the numbers mean."""
    images = {}
    if not d.summary.empty and "images" in d.summary:
        images = {
            str(k): int(v)
            for k, v in zip(d.summary["run_full"], d.summary["images"])
            if not is_missing(v)
        }
    groups: dict[str, list[dict]] = {}
    for r in d.runs:
        groups.setdefault(benchmark_title(r.record), []).append(
            {"text": _run_part(d, r, images), "flagged": r.run_id in flagged}
        )
    notes = [CLEAN_DEFINED, SHIFTED_DEFINED]
    if d.n_resamples:
        notes.append(
            f"CI: {100 * d.confidence:.0f} % percentile bootstrap interval over images "
            f"({d.n_resamples} resamples); with few images it is wide"
        )
    if flagged:
        notes.append(RANDOM_NOTE)
    return render(
        "headline.html", lines=list(groups.items()), mark=RANDOM_MARK, note="; ".join(notes)
    )


__all__ = [
    "BENCHMARKS",
    "RANDOM_MARK",
    "RANDOM_NOTE",
    "benchmark_key",
    "benchmark_title",
    "headline",
    "random_weight_runs",
]
