"""The model of an evaluation: its defences and inference setting parsed and checked before
any work (by :class:`~robustlab.workflows.evaluate.request.ModelSpec`), applied to the
loaded model (:func:`~robustlab.workflows.evaluate.record.load`), and the warning for a
checkpoint evaluated behind another pixel defence than it was trained behind.
"""

from __future__ import annotations

import logging
from pathlib import Path

from robustlab.errors import InputError

log = logging.getLogger(__name__)


def parse_defences(model, preprocess, tta) -> dict:
    """The defence objects named by ``preprocess`` / ``tta``, checked before any work."""
    from robustlab.defences import DefendedModel, get_preprocess, get_tta

    pixels, views = get_preprocess(preprocess), get_tta(tta)
    if isinstance(model, DefendedModel) and (pixels is not None or views is not None):
        raise InputError(
            "the model is already defended; pass the plain model with "
            "preprocess=/tta=, or the defended model alone"
        )
    return {"preprocess": pixels, "tta": views}


def parse_inference(precision, compile):
    """The :class:`~robustlab.models.inference.Inference` asked for, or None when neither
    argument was given (a loaded model then keeps its own)."""
    from robustlab.models.inference import get_inference

    if precision is None and not compile:
        return None
    return get_inference(precision, compile)


def set_inference(model, inference) -> None:
    """Give ``model`` its precision and compile setting (None: leave it as it is)."""
    if inference is None:
        return
    if not hasattr(model, "set_inference"):
        if inference.default:
            return
        raise InputError(
            f"{getattr(model, 'spec', type(model).__name__)} cannot take a precision or "
            "compile setting: it is not a robustlab Model",
            hint="leave precision and compile out",
        )
    model.set_inference(inference)


def defended(model, defences: dict):
    """(model behind its defences, the defence record or None)."""
    from robustlab.defences import defend

    model = defend(model, **defences)
    return model, getattr(model, "defence", None)


def note_trained_preprocess(weights, defence: dict | None) -> str | None:
    """Warn, in one line, when a checkpoint of ``robustlab train`` was fine-tuned behind
    another pixel defence than the one it is evaluated behind (a CLAHE-trained model
    evaluated on plain images, or the reverse): both are valid runs, but rarely the one
    meant. Reads the training record written beside the checkpoint; returns the line."""
    import json

    if not weights:
        return None
    path = Path(weights).expanduser().with_suffix(".json")
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or "base_model" not in record or "preprocess" not in record:
        return None
    from robustlab.defences import defence_label
    from robustlab.records.identity import canonical_json

    trained = record.get("preprocess")
    used = (defence or {}).get("preprocess")
    if canonical_json(trained) == canonical_json(used):
        return None
    name = defence_label({"preprocess": trained})
    used_name = defence_label({"preprocess": used})
    line = (
        f"{weights} was fine-tuned on {name or 'plain'} images (its training record "
        f"{path.name}) but is evaluated "
        f"{'with --preprocess ' + used_name if used_name else 'without --preprocess'}"
        f"; {'pass --preprocess ' + name if name else 'leave --preprocess out'} to measure it "
        "as it was trained"
    )
    log.warning(line)
    return line
