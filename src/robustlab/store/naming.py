"""How tables and reports name a run: its model label, from the stored run record alone.

Run naming is read by the store's queries, the metrics summary, the report and the
workflows, so it lives here, below all of them: a label is a function of the stored
``config`` (defence record, fine-tuning method record, inference settings, shift path) and
never imports the code that made the run.
"""

from __future__ import annotations

from robustlab.defences import defence_label


def record_label(method: dict | None) -> str | None:
    """Short name of a training method's record (``describe()``, also stored in a training
    record):
    ``stability(noise=0.05,weight=0.05)``, ``corruption-aug(holdout=blur)``, ``plain``."""
    if not method or not method.get("name"):
        return None
    name = str(method["name"])
    if name == "stability":
        return f"stability(noise={method.get('noise'):g},weight={method.get('weight'):g})"
    if name == "corruption-aug":
        return f"corruption-aug(holdout={'+'.join(method.get('holdout_families') or []) or 'none'})"
    return name


def shift_path_label(shift_path: dict | None) -> str:
    """A short name of how a run's shifted pixels were made: ``exact`` or ``torch:cuda``."""
    if not shift_path:
        return "exact"
    return f"torch:{shift_path.get('device')}"


def model_label(spec: str, config: dict | None) -> str:
    """How tables name a run's model: its spec, plus ``+defence`` for a defended run
    (``lite0 +clahe``), ``ft:method`` for a model fine-tuned with a training method
    (``lite0 ft:stability(noise=0.05,weight=0.05)``) and ``@bf16`` / ``@fp16`` /
    ``@compiled`` for a forward pass under autocast or ``torch.compile`` (``--precision``,
    ``--compile``), so such a row never reads as the plain fp32 model's."""
    config = config if isinstance(config, dict) else {}
    label = defence_label(config.get("defence"))
    out = f"{spec} +{label}" if label else str(spec)
    method = record_label((config.get("fine_tuned") or {}).get("method"))
    out = f"{out} ft:{method}" if method else out
    inference = (config.get("model") or {}).get("inference") or {}
    if inference.get("precision", "fp32") != "fp32":
        out += f" @{inference['precision']}"
    return f"{out} @compiled" if inference.get("compile") else out


__all__ = ["defence_label", "model_label", "record_label", "shift_path_label"]
