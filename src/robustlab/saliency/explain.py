"""One batch of model inputs explained: the prediction, the class explained, the map and
its foreground numbers.

Why here and not in the workflow: this is the computation a saliency run stores, and the
workflow (:mod:`robustlab.workflows.saliency`) only decides which cells go in, batches
them and stores what comes back; keeping the numbers in this package keeps one home for
saliency.
"""

from __future__ import annotations

from typing import Any

from robustlab.errors import InputError
from robustlab.saliency.maps import thumbnail


def target_columns(model, pred_cols, labels, target: str):
    """Output columns of the network to explain, per image: the predicted class or the
    label (a label space that maps a class to several outputs has no one column)."""
    import torch

    if target == "predicted":
        cols = torch.as_tensor(pred_cols).long()
    else:
        if model.head == "mapping":
            raise InputError(
                f"--target label needs one output per class; label space "
                f"{model.label_space.name!r} maps a class to several ImageNet classes",
                hint="use --target predicted",
            )
        cols = torch.as_tensor(labels).long()
    if model._columns is not None:  # subset head: a label-space index -> network column
        cols = model._columns.cpu()[cols]
    return cols


def explain_batch(model, attributor, target: str, inputs, masks, labels) -> list[dict[str, Any]]:
    """Per image of a batch: ``pred``, ``target`` (the network column explained),
    ``correct``, the foreground numbers of :func:`robustlab.saliency.metrics.foreground_metrics`
    and ``map`` (the stored thumbnail).

    Args:
        model: A loaded torch :class:`robustlab.models.base.Model`.
        attributor: The method's :class:`robustlab.saliency.attribution.Attributor`.
        target: ``"predicted"`` or ``"label"`` (:data:`robustlab.saliency.methods.TARGETS`).
        inputs: uint8 N x 3 x H x W model inputs (before normalisation).
        masks: N x H x W bool object masks on the model's input pixels.
        labels: The N labels in the model's label space.
    """
    from robustlab.saliency.metrics import foreground_metrics

    _, ids = model.predict_topk(inputs, k=1)
    top1, _ = model.correct(ids, labels)
    xf = model.preprocessing.normalize(inputs.to(model.input_device()))
    maps = attributor(xf, target_columns(model, ids[:, 0], labels, target))
    nums = foreground_metrics(maps, masks)
    return [
        {
            "pred": int(ids[j, 0]),
            "target": int(target_columns(model, ids[j : j + 1, 0], [labels[j]], target)[0]),
            "correct": bool(top1[j]),
            **{k: float(v[j]) for k, v in nums.items()},
            "map": thumbnail(maps[j]),
        }
        for j in range(len(labels))
    ]


__all__ = ["explain_batch", "target_columns"]
