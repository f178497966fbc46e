"""Fine-tuning for the XIMAGENET-12 protocols: EX1 (train on original, test on each
scenario), EX2 (train and test within each scenario) and the robustness score.

>>> from robustlab.workflows.train import TrainConfig, run_protocol
>>> res = run_protocol("lite0", "data/", masks="masks/", protocol="both",
...                    config=TrainConfig(mode="linear", steps=50))      # doctest: +SKIP
>>> res.score.s_robust                                                 # doctest: +SKIP
"""

from robustlab.workflows.train.finetune import MODES, TrainConfig, TrainResult, finetune
from robustlab.workflows.train.protocols import (
    PROTOCOLS,
    ProtocolResult,
    evaluate_on_split,
    make_split,
    run_protocol,
    scenario_score,
    train_on_cells,
)
from robustlab.workflows.train.splits import Split, split_samples

__all__ = [
    "MODES",
    "PROTOCOLS",
    "TrainConfig",
    "TrainResult",
    "ProtocolResult",
    "Split",
    "finetune",
    "split_samples",
    "make_split",
    "train_on_cells",
    "evaluate_on_split",
    "run_protocol",
    "scenario_score",
]
