"""``robustlab.workflows.evaluate``: :func:`robustlab.evaluate` measures a model on clean images and
on every cell of a suite.

This is the Python face of ``robustlab evaluate``. Everything a user can get wrong is
checked before the database is touched (unknown model or suite, missing weights, empty
folder, a label outside the label space), so a run that fails to start writes nothing.

The data flow: :class:`EvaluateRequest` (four frozen specs, validated once:
:mod:`.request`) → :func:`make_plan` (a :class:`~robustlab.execution.plan.RunPlan`: the folder's
planner returns a frozen :class:`~.record.PlannedRun`, data and no callback: :mod:`.plan`
for source and generated folders, :mod:`.archive` for the ImageNet-E archive,
:mod:`.published` for the published layouts, :mod:`.mined` and :mod:`.exported`; one
:func:`~.record.build_plan` loads the model and makes the record for all) → :func:`execute`
(:mod:`.execute`, the local or the Ray executor) → an :class:`EvaluateResult` (:mod:`.result`).

Example:
    >>> import robustlab
    >>> run = robustlab.evaluate("lite0", "photos/", suite="imagenet-c",
    ...                          shifts=["gaussian_noise"], levels=[1, 3])  # doctest: +SKIP
    >>> run.table[["shift", "level", "n", "top1"]]  # top1: a fraction in [0, 1]  # doctest: +SKIP
    >>> run.run_id, run.resumed, run.throughput  # doctest: +SKIP
"""

from __future__ import annotations

from robustlab.workflows.evaluate.execute import execute, run_request
from robustlab.workflows.evaluate.result import EvaluateResult, run_table
from robustlab.workflows.evaluate.plan import make_plan
from robustlab.workflows.evaluate.request import (
    PARTS,
    CellSpec,
    DataSpec,
    EvaluateRequest,
    ExecutionSpec,
    ModelSpec,
    keywords,
)

__all__ = [
    "CellSpec",
    "DataSpec",
    "EvaluateRequest",
    "EvaluateResult",
    "ExecutionSpec",
    "ModelSpec",
    "evaluate",
    "execute",
    "keywords",
    "make_plan",
    "run_request",
    "run_table",
]


def evaluate(model, data, **options) -> EvaluateResult:
    """Evaluate ``model`` on the clean images in ``data`` and on every cell of ``suite``.

    Shifts are applied on the fly with :mod:`robustlab.pipeline` (nothing is written to
    disk), giving the same pixels, hence the same predictions, as reading back a folder
    made by ``robustlab generate`` with the same seed. Predictions are streamed to the
    DuckDB file ``db``; rerunning the same call resumes where an interrupted one stopped.

    Args:
        model: A model spec (``"lite0"``, ``"timm:resnet50"``, ...) or a loaded Model.
        data: Folder of source images (ImageFolder tree, or flat plus labels CSV), a
            folder written by ``robustlab generate``, the ImageNet-E archive or another
            published set as downloaded (:class:`DataSpec`).
        **options: Each keyword is a field of the spec that owns it (documented there),
            all checked before any work:

            {options}

    Returns:
        An :class:`EvaluateResult`: ``table``, a DataFrame with one row per cell of this
        run (model, suite, shift, level, n, top1, top5, error, as fractions in [0, 1];
        ``robustlab evaluate`` and ``robustlab results`` print them as percentages, in
        columns headed ``top1 %``; ``results --format csv/json`` keep the fractions), and
        ``run_id``, ``db``, ``skipped``, ``n_written``, ``resumed``, ``stages``,
        ``throughput`` (this call's predictions, wall and predict seconds, rate and the
        share of the wall time the model was busy, see
        :func:`robustlab.execution.progress.throughput_line`) and ``protocol``.

    Raises:
        TypeError: an unknown keyword (the message names the closest one).
        InputError: a value or folder no run could use (one line, with a hint).
    """
    return run_request(EvaluateRequest.build(model, data, **options))


def _options_doc() -> str:
    """The keywords of :func:`evaluate` by the spec that owns them, for its docstring."""
    owners: dict[str, list[str]] = {}
    for key, (part, _name) in keywords().items():
        if key not in ("model", "data"):
            owners.setdefault(part or "request", []).append(key)
    specs = {part: spec.__name__ for part, spec in PARTS.items()}
    specs["request"] = EvaluateRequest.__name__
    return "\n            ".join(
        f"- :class:`{specs[part]}`: {', '.join(keys)}" for part, keys in owners.items()
    )


if evaluate.__doc__:  # absent under python -OO
    evaluate.__doc__ = evaluate.__doc__.replace("{options}", _options_doc())
