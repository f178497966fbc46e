"""The parts every evaluation plan shares, whatever its folder: the base of the run
identity, the stored descriptions of the model, its preprocessing and the protocol, the
fingerprint of files that are the pixels, and :func:`build_plan`, the one place a
:class:`~robustlab.run.plan.RunPlan` is put together from its parts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from robustlab.run.plan import RunPlan

if TYPE_CHECKING:
    from robustlab.store import RunRecord
    from robustlab.workflows.evaluate.request import ModelSpec


def build_plan(
    spec: ModelSpec,
    *,
    device: str | None,
    space,
    samples,
    labels: list[int],
    cells: list[tuple[str, Any]],
    images,
    record: Callable[[Any, dict | None], RunRecord],
    suite=None,
) -> RunPlan:
    """The plan of a run whose samples, labels, cells and images are decided: the model is
    loaded (only now, so a label error fails before a model load) and ``record(model,
    defence)`` gives the run's record. The protocol is the images' own."""
    model, defence = load(spec, space, device=device)
    return RunPlan(
        model=model,
        samples=samples,
        labels=labels,
        cells=cells,
        protocol=images.protocol,
        suite=suite,
        record=record(model, defence),
        images=images,
        label_space=space,
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
    from robustlab.run.identity import fields_of

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
    from robustlab.run.content_hash import hash_files
    from robustlab.run.identity import data_fingerprint

    digests = iter(hash_files([p for row in paths for p in row]))
    return data_fingerprint(
        (s.id, s.class_name, lab, *(next(digests) for _ in row))
        for s, lab, row in zip(samples, labels, paths)
    )
