"""Published numbers to show beside a user's own, each with its source and what it was
measured on.

The table is package data (``reference_values.csv``, one value per row, in the paper's own
unit) plus AlexNet's per-corruption ImageNet-C errors, which live once in
``alexnet_imagenet_c.csv`` (the mCE normaliser) and are read from there. ``measured_on``
names the measurement: a number is only comparable with another measured on the same
thing, so every row says what it is (the 50,000-image ImageNet-C of the paper and
RobustBench's fixed 5,000-image subset are two measurements of the same model and differ:
76.7 against 76.38 mCE for ResNet-50).
"""

from __future__ import annotations

import csv
from functools import lru_cache
from importlib import resources

import pandas as pd

from robustlab.metrics.mce import alexnet_table
from robustlab.store.schema import CLEAN_SHIFT

_CSV = "reference_values.csv"
COLUMNS = ["benchmark", "model", "metric", "value", "measured_on", "source"]
ALEXNET_SOURCE = "google-research/augmix imagenet.py ALEXNET_ERR (alexnet_imagenet_c.csv)"
# The extra corruptions' AlexNet errors come from the paper's appendix, not from AugMix.
ALEXNET_EXTRA_SOURCE = "seed 004 Appendix C (alexnet_imagenet_c.csv)"
_EXTRA = frozenset({"speckle_noise", "gaussian_blur", "spatter", "saturate"})
# What each ``measured_on`` code means, in the words the card and the tables print.
MEASURED_ON = {
    "imagenet-val-50k": "ImageNet val, all 50,000 images",
    "imagenet-c-50k": "ImageNet-C, all 50,000 val images x 15 corruptions x 5 severities",
    "imagenet-c-extra-50k": "ImageNet-C's extra corruptions, all 50,000 val images x 5 severities",
    "robustbench-5k": "RobustBench's fixed 5,000-image subset of ImageNet-C (15 x 5)",
    "imagenet9-test": "ImageNet-9 test set of the backgrounds challenge (weights' version drifts)",
    "ximagenet12-ex1-ex2": "XIMAGENET-12, EX1 and EX2 (models fine-tuned per scenario)",
    "ximagenet12-ex1": "XIMAGENET-12, EX1 (ImageNet-trained model, no fine-tuning)",
    "imagenet-e-release": "the released ImageNet-E set (diffusion edits)",
}


@lru_cache(maxsize=1)
def reference_table() -> pd.DataFrame:
    """Every published value (columns :data:`COLUMNS`; ``value`` a float)."""
    text = resources.files("robustlab.metrics").joinpath(_CSV).read_text(encoding="utf-8")
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    table = pd.DataFrame(rows, columns=COLUMNS)
    alex = [
        {
            "benchmark": "imagenet-c",
            "model": "AlexNet",
            "metric": f"error:{r.corruption}",
            "value": round(100 * float(r.mean), 4),
            "measured_on": "imagenet-c-extra-50k" if r.corruption in _EXTRA else "imagenet-c-50k",
            "source": ALEXNET_EXTRA_SOURCE if r.corruption in _EXTRA else ALEXNET_SOURCE,
        }
        for r in alexnet_table().itertuples(index=False)
        if r.corruption != CLEAN_SHIFT
    ]
    table = pd.concat([table, pd.DataFrame(alex, columns=COLUMNS)], ignore_index=True)
    table["value"] = table["value"].astype(float)
    return table


def reference_rows(benchmarks=None, models=None) -> pd.DataFrame:
    """The published rows of these benchmarks (suite names: ``imagenet-c``, ``imagenet9``,
    ``ximagenet12``, ``imagenet-e``) and models (None: all), with ``measured_on`` spelt
    out (:data:`MEASURED_ON`)."""
    t = reference_table()
    if benchmarks is not None:
        t = t[t["benchmark"].isin(list(benchmarks))]
    if models is not None:
        t = t[t["model"].isin(list(models))]
    return t.assign(measured_on=t["measured_on"].map(MEASURED_ON)).reset_index(drop=True)


def reference_value(benchmark: str, model: str, metric: str) -> float | None:
    """One published value, or None when the table has none."""
    t = reference_table()
    hit = t[(t["benchmark"] == benchmark) & (t["model"] == model) & (t["metric"] == metric)]
    return None if hit.empty else float(hit.iloc[0]["value"])
