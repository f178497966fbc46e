"""The results database schema (docs/INTERFACES.md, "Store").

``runs`` holds one row per run identity: everything needed to say what produced the
numbers (model spec and weights hash, suite and version, preprocessing, seed, data
fingerprint, package versions). ``predictions`` holds one row per (run, sample, shift,
level): the label, the top-5 class ids and probabilities, and whether top-1 / top-5 was
correct. Metrics are computed from ``predictions``; nothing keeps running counters.

Segmentation runs (``config["task"] == "segmentation"``) have a ``runs`` row like any
other run but no predictions: their per-image results live in ``segmentation``, one row
per (run, sample, shift, level) holding the binary foreground pixel counts (tp, fp, fn,
tn). Counts, not scores, are stored because IoU and pixel accuracy of any grouping are
pure functions of summed counts (:mod:`robustlab.metrics.segmentation`). The table is
additive (CREATE TABLE IF NOT EXISTS), so older databases gain it on their next write
without a schema version change.

Saliency runs (``config["task"] == "saliency"``, ``robustlab saliency``) keep one row per
(run, sample, shift, level) in ``saliency``: the class explained, the model's top-1 and
whether it was right, the foreground numbers of :mod:`robustlab.saliency.metrics` and the
map itself at :data:`SALIENCY_MAP_SIDE` pixels a side (uint8, scaled to its maximum), so
the report can draw heat maps without the model. Additive like ``segmentation``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from robustlab.cells import Cell

SCHEMA_VERSION = 1

# Clean predictions are stored with this (shift, level); CLEAN_LEVEL is CLEAN_CELL.key.
CLEAN_SHIFT = "clean"
CLEAN_LEVEL = "0"
CLEAN_CELL = Cell(CLEAN_SHIFT, 0)

DDL = [
    """
    CREATE TABLE IF NOT EXISTS meta (
        key VARCHAR PRIMARY KEY,
        value VARCHAR
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS runs (
        run_id VARCHAR PRIMARY KEY,
        model_spec VARCHAR NOT NULL,
        weights_hash VARCHAR,
        suite VARCHAR,
        suite_version VARCHAR,
        data_root VARCHAR,
        data_fingerprint VARCHAR,
        label_space VARCHAR,
        preprocessing JSON,
        seed BIGINT,
        versions JSON,
        config JSON,
        started_at TIMESTAMP,
        finished_at TIMESTAMP,
        status VARCHAR,
        n_samples INTEGER,
        n_skipped INTEGER,
        skipped JSON
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS predictions (
        run_id VARCHAR NOT NULL,
        sample_id VARCHAR NOT NULL,
        shift VARCHAR NOT NULL,
        level VARCHAR NOT NULL,
        label INTEGER,
        class_name VARCHAR,
        top5_ids INTEGER[],
        top5_probs FLOAT[],
        correct BOOLEAN,
        correct5 BOOLEAN,
        PRIMARY KEY (run_id, sample_id, shift, level)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS segmentation (
        run_id VARCHAR NOT NULL,
        sample_id VARCHAR NOT NULL,
        shift VARCHAR NOT NULL,
        level VARCHAR NOT NULL,
        class_name VARCHAR,
        tp BIGINT NOT NULL,
        fp BIGINT NOT NULL,
        fn BIGINT NOT NULL,
        tn BIGINT NOT NULL,
        PRIMARY KEY (run_id, sample_id, shift, level)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS saliency (
        run_id VARCHAR NOT NULL,
        sample_id VARCHAR NOT NULL,
        shift VARCHAR NOT NULL,
        level VARCHAR NOT NULL,
        class_name VARCHAR,
        label INTEGER,
        target INTEGER,
        pred INTEGER,
        correct BOOLEAN,
        fg_share DOUBLE,
        fg_share_norm DOUBLE,
        pointing DOUBLE,
        mask_area DOUBLE,
        map BLOB,
        PRIMARY KEY (run_id, sample_id, shift, level)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS attributes (
        run_id VARCHAR NOT NULL,
        sample_id VARCHAR NOT NULL,
        shift VARCHAR NOT NULL,
        level VARCHAR NOT NULL,
        object_rate DOUBLE,
        rate_before DOUBLE,
        box_x INTEGER,
        box_y INTEGER,
        box_w INTEGER,
        box_h INTEGER,
        angle DOUBLE,
        hf_before DOUBLE,
        hf_after DOUBLE,
        fill VARCHAR,
        extra JSON,
        PRIMARY KEY (run_id, sample_id, shift, level)
    )
    """,
]

# ``robustlab holdout`` runs (surface variation): their suite, and the shift of the cell
# holding the held-out images (the seen images are the clean cell). Named here, below the
# workflows, so that a reader of stored runs (the report) needs no training code (torch).
HOLDOUT_SUITE = "surface-variation"
HOLDOUT_SHIFT = "holdout"
# ``runs.config["task"]`` of a saliency run.
SALIENCY_TASK = "saliency"
# Side of the stored saliency thumbnail (Grad-CAM of a CNN has 7 to 14 cells a side).
SALIENCY_MAP_SIDE = 32
SALIENCY_COLUMNS = (
    "run_id",
    "sample_id",
    "shift",
    "level",
    "class_name",
    "label",
    "target",
    "pred",
    "correct",
    "fg_share",
    "fg_share_norm",
    "pointing",
    "mask_area",
    "map",
)

# ``runs.config["task"]`` of a segmentation run (classification runs have no "task").
SEGMENTATION_TASK = "segmentation"

RUN_COLUMNS = (
    "run_id",
    "model_spec",
    "weights_hash",
    "suite",
    "suite_version",
    "data_root",
    "data_fingerprint",
    "label_space",
    "preprocessing",
    "seed",
    "versions",
    "config",
    "started_at",
    "finished_at",
    "status",
    "n_samples",
    "n_skipped",
    "skipped",
)
PREDICTION_COLUMNS = (
    "run_id",
    "sample_id",
    "shift",
    "level",
    "label",
    "class_name",
    "top5_ids",
    "top5_probs",
    "correct",
    "correct5",
)
SEGMENTATION_COLUMNS = (
    "run_id",
    "sample_id",
    "shift",
    "level",
    "class_name",
    "tp",
    "fp",
    "fn",
    "tn",
)
# What an attribute edit achieved per image (ImageNet-E): joined to ``predictions`` on the
# key so accuracy can be plotted against the measured attribute, not only the level. Keys
# an edit reports beyond these columns go to ``extra`` (JSON).
ATTRIBUTE_VALUE_COLUMNS = (
    "object_rate",
    "rate_before",
    "box_x",
    "box_y",
    "box_w",
    "box_h",
    "angle",
    "hf_before",
    "hf_after",
    "fill",
)
ATTRIBUTE_COLUMNS = ("run_id", "sample_id", "shift", "level", *ATTRIBUTE_VALUE_COLUMNS, "extra")
_JSON_COLUMNS = ("preprocessing", "versions", "config", "skipped")


@dataclass
class RunRecord:
    """One row of ``runs``; JSON columns are plain Python dicts/lists here."""

    run_id: str
    model_spec: str
    weights_hash: str | None = None
    suite: str | None = None
    suite_version: str | None = None
    data_root: str | None = None
    data_fingerprint: str | None = None
    label_space: str | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    versions: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    status: str = "running"
    n_samples: int = 0
    n_skipped: int = 0
    skipped: list[Any] = field(default_factory=list)

    def as_row(self) -> list[Any]:
        """Values in :data:`RUN_COLUMNS` order, JSON columns serialised.

        The seed is checked by the one seed rule here too, the last gate before its
        BIGINT column: a seed that reached a record by another road than a request's
        checks is one error line, not DuckDB's conversion error."""
        if self.seed is not None:
            from robustlab.seeding import check_seed

            check_seed(self.seed, "the run's seed")
        d = asdict(self)
        return [
            json.dumps(d[c], sort_keys=True, default=str) if c in _JSON_COLUMNS else d[c]
            for c in RUN_COLUMNS
        ]
