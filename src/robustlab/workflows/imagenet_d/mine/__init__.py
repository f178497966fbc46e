"""Hard-image mining: keep the images several surrogate classifiers all get wrong.

:mod:`robustlab.workflows.imagenet_d.mine.core` evaluates the surrogates (stored runs), applies the k-of-n rule
and writes the hard subset and its database record; :mod:`robustlab.workflows.imagenet_d.mine.analysis`
measures the paper's two claims (more surrogates -> harder set; transfer to a held-out
model) from the stored predictions.
"""

from robustlab.workflows.imagenet_d.mine.core import (
    MiningResult,
    candidate_table,
    mine,
)
from robustlab.workflows.imagenet_d.mine.request import (
    DEFAULT_SURROGATES,
    MineExecution,
    MineInputs,
    MineRule,
)

__all__ = [
    "mine",
    "MineRule",
    "MineInputs",
    "MineExecution",
    "MiningResult",
    "candidate_table",
    "DEFAULT_SURROGATES",
]
