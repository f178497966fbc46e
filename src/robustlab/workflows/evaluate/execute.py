"""Running an evaluation: :func:`run_request` plans a request and executes the plan into its
database (the body of :func:`robustlab.evaluate`), :func:`execute` runs any plan with the
local or the Ray executor, :func:`run_table` reads a stored run's per-cell results back
(the table of the :class:`~robustlab.workflows.evaluate.result.EvaluateResult`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from robustlab.cells import as_cells, level_key
from robustlab.errors import InputError
from robustlab.execution.plan import RunPlan
from robustlab.store import Store
from robustlab.workflows.evaluate.result import EvaluateResult
from robustlab.workflows.evaluate.resume import check_same_resources, note_earlier_runs

if TYPE_CHECKING:
    from robustlab.workflows.evaluate.request import EvaluateRequest, ExecutionSpec


def run_request(request: EvaluateRequest) -> EvaluateResult:
    """Plan ``request`` and execute it into its database; what :func:`robustlab.evaluate`
    returns (see there)."""
    from robustlab.workflows.evaluate.plan import make_plan

    ex, spec = request.execution, request.model
    session: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if ex.backend == "ray":
        from robustlab.execution.ray.placement import plan_placement
        from robustlab.execution.ray.session import ray_session

        # Connected, and the cluster's resources checked, before the images are hashed and
        # the model loaded: a cluster that cannot run the job says so at once.
        session = ray_session(ex.address, int(ex.workers) if ex.workers else None)
    with session as resources:
        if resources is not None:
            shift_device = None if ex.shift_settings is None else ex.shift_settings.device
            plan_placement(resources, spec.device, shift_device=shift_device)
        plan = make_plan(request)
        if ex.shift_settings is not None:
            check_device_view(plan.protocol)
        if spec.compile and ex.backend != "ray":  # compiled now: a failure writes nothing
            plan.model.warm_up()
        store = Store(request.db)
        summary = execute(plan, store, ex, batch_size=spec.batch_size, device=spec.device)
    store_generated_attributes(store, plan)
    if plan.record.config.get("source") == "exported":
        from robustlab.workflows.evaluate.exported import store_exported_attributes

        store_exported_attributes(store, plan)
    protocol = (plan.record.config.get("protocol") or {}).get("label")
    return EvaluateResult.of_run(store, summary, protocol)


def run_options(execution: ExecutionSpec, model, *, batch_size=None, device=None):
    """How a plan is executed (:class:`robustlab.execution.runner.RunOptions`: every execution
    field of that name, so a new one passes through), with evaluate's defaults: the
    model's batch size, one worker per core the model leaves free
    (:func:`~robustlab.execution.lifeline.default_workers`; none on Ray: its actors), progress on.
    Never part of the run identity."""
    import dataclasses

    from robustlab.execution.lifeline import default_workers
    from robustlab.execution.runner import RunOptions

    names = {f.name for f in dataclasses.fields(RunOptions)}
    values = {
        f.name: getattr(execution, f.name)
        for f in dataclasses.fields(execution)
        if f.init and f.name in names
    }
    if execution.workers is not None:
        workers = int(execution.workers)
    else:  # the default, decided only when it is needed
        workers = 0 if execution.backend == "ray" else default_workers(model.input_device())
    values.update(
        batch_size=int(batch_size or getattr(model, "batch_size", None) or 32),
        workers=workers,
        progress=True if execution.progress is None else bool(execution.progress),
        shift_device=execution.shift_settings,
        device=device,
    )
    return RunOptions(**values)


def execute(
    plan: RunPlan,
    store: Store,
    execution: ExecutionSpec,
    *,
    batch_size: int | None = None,
    device: str | None = None,
):
    """Run ``plan`` into ``store`` as ``execution`` says (the local or the Ray executor,
    which consume the same plan; ``batch_size`` and ``device``: the model spec's) and
    return the runner's summary. Refuses a resume with another configured tool first, and says when an earlier
    run over the same folder had other inputs."""
    from robustlab.execution.runner import Runner
    from robustlab.shifts.kernels import ensure_compiled_for

    options = run_options(execution, plan.model, batch_size=batch_size, device=device)
    check_same_resources(store, plan.record)
    note_earlier_runs(store, plan.record)
    if getattr(plan.images, "generated_root", None) is None:  # shifts computed here
        ensure_compiled_for({s for s, _ in plan.cells}, progress=options.progress)
    return Runner(
        plan.model,
        plan.samples,
        plan.labels,
        plan.cells,
        plan.images,
        store,
        plan.record,
        options,
    ).run()


def check_device_view(protocol) -> None:
    """The batched shift path resizes for the model itself (the model's resize only)."""
    from robustlab.suites import VIEW_FIELDS, Protocol

    if any(getattr(protocol, k) != getattr(Protocol(), k) for k in VIEW_FIELDS):
        raise InputError(
            f"--shift-device applies the model's resize only; protocol {protocol.label()} "
            "needs the exact path",
            hint="leave out --shift-device",
        )


def store_generated_attributes(store: Store, plan: RunPlan) -> None:
    """Copy a generated folder's ``attributes.csv`` rows of this run's cells into the store.

    On the fly the runner stores what each edit reports as it goes; a generated folder
    measured its edits when it was written, so their record is read from there.
    """
    root = plan.record.config.get("generated_root")
    if not root:
        return
    from robustlab.workflows.generate import ATTRIBUTES_CSV, read_attributes_csv

    cells = {c.stored for c in as_cells(plan.cells)}
    ids = {s.id for s in plan.samples}
    rows = [
        {k: v for k, v in r.items() if k != "file"}
        for r in read_attributes_csv(Path(root) / ATTRIBUTES_CSV)
        if (r.get("shift"), level_key(r.get("level"))) in cells and r.get("sample_id") in ids
    ]
    store.write_attributes(plan.record.run_id, rows)
