"""``robustlab card``: one model's robustness profile across the four benchmarks, beside
the published numbers, in the formats the ecosystem reads.

:func:`card` plans the benchmarks its inputs allow (:mod:`.plan`: ImageNet-C always,
XIMAGENET-12 / ImageNet-9 / the weights-free ImageNet-E edits with masks, ImageNet-D with
a set; the rest skipped with the reason), runs each as an ``evaluate`` run
(:mod:`.execute`: same identity = resumed, so a second card computes nothing), computes
each benchmark's own metric with a bootstrap interval (:mod:`.benchmarks`,
:mod:`.numbers`) and writes ``card.md``, ``card.json``, ``model-index.yaml``, the per-cell
CSVs (:mod:`.write`) and the report with its card section.
"""

from __future__ import annotations

from robustlab.workflows.card.request import CardRequest
from robustlab.workflows.card.result import CardResult

__all__ = ["CardRequest", "CardResult", "card"]


def card(model: str, data, out, **options) -> CardResult:
    """Run every benchmark ``data`` (and the options) allow for ``model`` and write its card.

    Args:
        model: Model spec.
        data: Folder of labelled photos.
        out: The card's folder.
        **options: The other fields of :class:`CardRequest` (masks, auto_masks,
            imagenet_d, db, baseline, labels_csv, seed, bootstrap_seed, n_resamples,
            workers, device, progress, report).
    """
    from robustlab.workflows.card.build import build_card

    return build_card(CardRequest(model, data, out, **options))
