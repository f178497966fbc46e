"""Which stored runs a request means: selection by id prefix, model and suite, the
segmentation runs among them, and the baseline run of a CE comparison.

Store-level questions about the ``runs`` table, shared by the workflows that read results
(``results``, ``report``, ``train``); the tables they build from the runs live in
:mod:`robustlab.workflows.results`.
"""

from __future__ import annotations

import pandas as pd

from robustlab.errors import InputError
from robustlab.store.db import Store
from robustlab.store.schema import SEGMENTATION_TASK


def is_segmentation(runs: pd.DataFrame) -> pd.Series:
    """Which rows of a ``runs`` table are segmentation runs (``config["task"]``)."""
    return pd.Series(
        [isinstance(c, dict) and c.get("task") == SEGMENTATION_TASK for c in runs["config"]],
        index=runs.index,
        dtype=bool,
    )


def select_runs(store: Store, *, run_ids=None, models=None, suites=None) -> pd.DataFrame:
    """Runs filtered by id (or unique id prefix), model spec and suite."""
    runs = store.runs()
    if run_ids:
        keep = []
        for rid in run_ids:
            hits = runs[runs["run_id"].str.startswith(rid)]
            if hits.empty:
                raise InputError(f"no run {rid!r} in {store.path}")
            if len(hits) > 1:
                raise InputError(f"run id prefix {rid!r} is ambiguous in {store.path}")
            keep.append(hits.iloc[0]["run_id"])
        runs = runs[runs["run_id"].isin(keep)]
    if models:
        runs = runs[runs["model_spec"].isin(list(models))]
    if suites:
        runs = runs[runs["suite"].isin(list(suites))]
    return runs.reset_index(drop=True)


def find_baseline_run(store: Store, run: dict, spec: str) -> str:
    """The latest undefended run of model ``spec`` on the same images and suite as ``run``.

    A baseline is the plain model: runs behind a test-time defence (``--preprocess``,
    ``--tta``) share its spec but are never picked, so a defence is measured against the
    model without it.

    Raises:
        InputError: no such run in the database (the message says how to make one).
    """
    runs = store.runs()
    same = runs[
        (runs["model_spec"] == spec)
        & (runs["data_fingerprint"] == run["data_fingerprint"])
        & (runs["suite"].fillna("") == (run["suite"] or ""))
        & pd.Series(
            [not (isinstance(c, dict) and c.get("defence")) for c in runs["config"]],
            index=runs.index,
            dtype=bool,
        )
    ]
    if same.empty:
        raise InputError(
            f"no run of baseline {spec!r} on the same images and suite as {run['model_spec']!r} "
            f"({run['suite']}, {run['data_root']}) in {store.path}; run `robustlab evaluate "
            f"{spec} --data {run['data_root']} --suite {run['suite']}` first"
        )
    finished = same[same["status"] == "finished"]
    pick = finished if not finished.empty else same
    return str(pick.iloc[-1]["run_id"])
