"""The parts every evaluation plan shares, whatever its folder: the base of the run
identity, the stored descriptions of the model, its preprocessing and the protocol, the
fingerprint of files that are the pixels; :class:`PlannedRun`, what every planner returns
(what will be read, labelled and computed, and the facts its identity is made of), and
:func:`build_plan`, the one place a :class:`~robustlab.execution.plan.RunPlan` is put together
from it and the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass
import typing
from typing import TYPE_CHECKING, Any

from robustlab.execution.plan import RunPlan

if TYPE_CHECKING:
    from robustlab.cells import Cell
    from robustlab.data.labels import LabelSpace
    from robustlab.execution.tasks import CellImages
    from robustlab.store import RunRecord
    from robustlab.suites import Protocol, Suite
    from robustlab.workflows.evaluate.request import ModelSpec


class RecordInputs(typing.Protocol):
    """What a planner knows of a run's record before the model is loaded: each layout has
    its own (a frozen dataclass of its folder's facts), and turns itself, with the plan's
    data and the loaded model behind its defences, into the stored record."""

    def record(self, run: PlannedRun, model: Any, defence: dict | None) -> RunRecord: ...


@dataclass(frozen=True)
class PlannedRun:
    """What a planner decides, before the model is loaded: the data of a run, not a
    callback. :func:`build_plan` turns it, with the loaded model, into the
    :class:`~robustlab.execution.plan.RunPlan`.

    Attributes:
        samples: What is read: the images, sorted by id.
        images: Where each cell's pixels come from (its ``protocol`` is the run's).
        space: The label space the samples are labelled in.
        labels: Label index per sample, in ``space``.
        cells: What is computed: its cells, the clean one first where
            the run has one.
        suite: The suite of a run on source images, a generated folder or an export;
            None for the published layouts, the archive and a mined subset.
        identity: The folder's facts its record is made of (:class:`RecordInputs`).
    """

    samples: Any
    images: CellImages
    space: LabelSpace
    labels: list[int]
    cells: list[Cell]
    identity: RecordInputs
    suite: Suite | None = None

    @property
    def protocol(self) -> Protocol:
        return self.images.protocol


def build_plan(planned: PlannedRun, spec: ModelSpec, *, device: str | None) -> RunPlan:
    """The plan of a run whose samples, labels, cells and images are decided: the model is
    loaded (only now, so a label error fails before a model load) and the run's record
    made from ``planned.identity``. The protocol is the images' own."""
    model, defence = load(spec, planned.space, device=device)
    return RunPlan(
        model=model,
        samples=planned.samples,
        labels=planned.labels,
        cells=planned.cells,
        protocol=planned.protocol,
        suite=planned.suite,
        record=planned.identity.record(planned, model, defence),
        images=planned.images,
        label_space=planned.space,
    )


def load(spec: ModelSpec, space, *, device: str | None) -> tuple[Any, dict | None]:
    """(the model of ``spec`` behind its defences, the defence record or None), loaded for
    ``space`` on ``device`` (a loaded model keeps its own; it gets the inference setting
    asked for)."""
    from robustlab.workflows.evaluate.model import defended, set_inference

    model = spec.spec
    if isinstance(model, str):
        from robustlab.models import load_model

        model = load_model(
            model,
            weights=spec.weights,
            device=device,
            label_space=space,
            batch_size=spec.batch_size,
        )
    set_inference(model, spec.inference)
    return defended(model, spec.defences)


def base_identity(
    model, *, suite, suite_version, fingerprint, space, seed, preprocessing, source
) -> dict[str, Any]:
    """The keys every evaluation run's identity starts with, in their stored order; each
    planner adds its own after them."""
    from robustlab.version import __version__

    return {
        "model_spec": model.spec,
        "weights_hash": model.weights_hash,
        "suite": suite,
        "suite_version": suite_version,
        "robustlab": __version__,
        "data_fingerprint": fingerprint,
        "label_space": space.name,
        "seed": seed,
        "preprocessing": preprocessing,
        "source": source,
    }


def label_space(name_or_space):
    """A label space from its name, or the object as it is."""
    from robustlab.data.labels import get_label_space

    return get_label_space(name_or_space) if isinstance(name_or_space, str) else name_or_space


def preprocessing_record(pre) -> dict:
    """The model's preprocessing in the run identity: its ``describe()`` (which leaves
    fields added later out at their defaults), else its fields."""
    from robustlab.records.identity import fields_of

    return pre.describe() if hasattr(pre, "describe") else fields_of(pre)


def protocol_record(protocol, override) -> dict:
    """``runs.config["protocol"]``: the protocol's name, one-line label, whether the user
    overrode the benchmark's own, and its fields (the identity has them too)."""
    return {
        "name": protocol.name,
        "label": protocol.label(),
        "override": None if override is None else str(override),
        **protocol.describe(),
    }


def describe_model(model) -> dict[str, Any]:
    """The model's stored description (its spec alone when it cannot describe itself)."""
    try:
        return model.describe()
    except Exception:  # a description is nice to have, never a reason to fail
        return {"spec": model.spec}


def files_fingerprint(samples, labels, paths) -> str:
    """Fingerprint of a layout whose files are the pixels: per sample its id, class, label
    and the content hash of each of its files (``paths``: one row of files per sample)."""
    from robustlab.records.content_hash import hash_files
    from robustlab.records.identity import data_fingerprint

    digests = iter(hash_files([p for row in paths for p in row]))
    return data_fingerprint(
        (s.id, s.class_name, lab, *(next(digests) for _ in row))
        for s, lab, row in zip(samples, labels, paths)
    )
