"""The report's regression fits: OLS of per-cell accuracy (XIMAGENET-12's analysis) and the
per-image logistic model clustered by image, over the runs counted once each."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.report.runs import RunView

# The regression's Class factor is left out above this many classes (dense design matrix).
MAX_REGRESSION_CLASSES = 200
# The per-image logistic model is skipped above this many design-matrix entries (memory).
MAX_LOGIT_ENTRIES = 20_000_000


# The prediction columns the per-image logistic model reads.
LOGIT_COLUMNS = ["run_id", "sample_id", "shift", "level", "label", "class_name", "correct"]


@dataclass(frozen=True)
class FitData:
    """What the fits need, in the compact form the database gives for any number of runs.

    Attributes:
        classes: Counts per run, shift (levels pooled), label and class name: ``run_id``,
            ``shift``, ``label``, ``class_name``, ``n``, ``n_correct``
            (``Store.cell_and_class_counts``).
        cellsets: Run id -> the (shift, level) cells it stored.
        images: Distinct images over some runs together.
        rows: The prediction rows (:data:`LOGIT_COLUMNS`) of some runs, ordered by run,
            shift, level and image; asked for only when the per-image model is small
            enough to fit (:data:`MAX_LOGIT_ENTRIES`).
    """

    classes: pd.DataFrame
    cellsets: dict[str, frozenset]
    images: Callable[[list[str]], int]
    rows: Callable[[list[str]], pd.DataFrame]

    @classmethod
    def from_store(
        cls, store, counts: pd.DataFrame, classes: pd.DataFrame, images: dict[str, Any]
    ) -> FitData:
        """From the database: ``counts`` and ``classes`` are
        ``Store.cell_and_class_counts`` of the runs, ``images`` run id -> its image ids
        (``Store.image_counts(run).ids``)."""
        return cls(
            classes,
            _cellsets(counts),
            lambda ids: len(set().union(*(images[i] for i in ids))),
            lambda ids: store.predictions(ids, columns=LOGIT_COLUMNS),
        )

    @classmethod
    def from_predictions(cls, preds: pd.DataFrame) -> FitData:
        """From prediction rows in memory (``run_id``, ``sample_id``, ``shift``,
        ``level``, ``label``, ``class_name``, ``correct``)."""
        preds = preds.assign(level=preds["level"].astype(str))
        keys = ["run_id", "shift", "label", "class_name"]
        classes = (
            preds.assign(correct=preds["correct"].astype(bool))
            .groupby(keys, sort=True, dropna=False)["correct"]
            .agg(n="size", n_correct="sum")
            .reset_index()
        )
        return cls(
            classes,
            _cellsets(preds[["run_id", "shift", "level"]].drop_duplicates()),
            lambda ids: int(preds.loc[preds["run_id"].isin(ids), "sample_id"].nunique()),
            lambda ids: preds[preds["run_id"].isin(ids)].sort_values(
                ["run_id", "shift", "level", "sample_id"], kind="stable"
            ),
        )


def _cellsets(cells: pd.DataFrame) -> dict[str, frozenset]:
    return {
        str(rid): frozenset(zip(g["shift"], g["level"].astype(str)))
        for rid, g in cells.groupby("run_id")
    }


def _distinct_runs(
    cellsets: dict[str, frozenset], runs: list[RunView], notes: list[str]
) -> list[str]:
    """Run ids with duplicates removed: the same model (spec, weights) on the same data
    (content fingerprint, label space, seed) over the same cells is one measurement, whether
    it ran on the fly or from a generated folder; counting it twice would double its cells
    and shrink every p-value."""
    seen: dict[tuple, str] = {}
    keep = []
    for r in runs:
        rec = r.record
        key = (
            rec.get("model_spec"),
            rec.get("weights_hash"),
            rec.get("data_fingerprint"),
            rec.get("label_space"),
            rec.get("seed"),
            cellsets.get(r.run_id),
        )
        if key in seen:
            notes.append(
                f"regression: run {r.short} repeats run {seen[key][:8]} (same model, "
                "data and cells) and is counted once"
            )
            continue
        seen[key] = r.run_id
        keep.append(r.run_id)
    return keep


def model_names(runs: list[RunView]) -> dict[str, str]:
    """run id -> the Model factor's level: the model the run measured (its spec with
    defence, fine-tuning and precision, :func:`robustlab.store.naming.model_label`), the
    same for every run of that checkpoint. A run is not a model: lite0 run on four suites is
    one model seen under four sets of shifts. Two checkpoints under one name (other weights)
    stay apart by their weights hash."""
    from robustlab.store.naming import model_label

    name = {r.run_id: model_label(r.record.get("model_spec"), r.record.get("config")) for r in runs}
    weights = {r.run_id: str(r.record.get("weights_hash") or "")[:8] for r in runs}
    hashes: dict[str, set[str]] = {}
    for rid, n in name.items():
        hashes.setdefault(n, set()).add(weights[rid])
    return {
        rid: f"{n} ({weights[rid]})" if len(hashes[n]) > 1 and weights[rid] else n
        for rid, n in name.items()
    }


def _readable_classes(preds: pd.DataFrame, runs: list[RunView]) -> pd.Series:
    """The Class factor's levels as the label space's readable names (``tench``, not
    ``n01440764``); a name two classes share keeps its key in brackets. ``preds``: rows or
    counts with ``run_id``, ``label`` and ``class_name``."""
    from robustlab.data.labels import get_label_space

    out = preds["class_name"].astype(object).copy()
    spaces = {r.run_id: r.record.get("label_space") for r in runs}
    for rid, g in preds.groupby("run_id"):
        try:
            space = get_label_space(spaces.get(rid) or "imagenet1k")
        except Exception:  # noqa: BLE001 - an unknown space keeps its raw keys
            continue
        names = np.asarray(space.classes, dtype=object)
        counts = pd.Series(names).value_counts()
        shared = set(counts[counts > 1].index)
        lab = pd.to_numeric(g["label"], errors="coerce")
        ok = (lab.notna() & (lab >= 0) & (lab < len(names))).to_numpy()
        picked = names[lab[ok].astype(int).to_numpy()]
        keys = g["class_name"].astype(str).to_numpy()[ok]
        out.loc[g.index[ok]] = [f"{n} ({k})" if n in shared else n for n, k in zip(picked, keys)]
    return out


def _regression(data: FitData, runs: list[RunView], notes: list[str]):
    """OLS of per-cell accuracy on Model, Shift and Class (XIMAGENET-12's analysis), and the
    per-image logistic model with standard errors clustered by image.

    Cells are (model, shift, class) with the shift's levels pooled, a model being a
    checkpoint (:func:`model_names`: its runs on several suites pool into one level);
    ``clean`` is the Shift reference and the first run's model the Model reference. Factors with one level are left out.
    The OLS needs only counts; the logistic model reads the prediction rows, and only
    when they are few enough to fit. Returns (OLS result or None, logistic result or None).
    """
    from robustlab.metrics.regression import logit_correctness, regress_accuracy

    if not (data.classes["shift"] != CLEAN_SHIFT).any():
        return None, None
    keep = _distinct_runs(data.cellsets, runs, notes)
    labels = model_names(runs)

    def named(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(
            model=frame["run_id"].map(labels), class_name=_readable_classes(frame, runs)
        )

    counts = named(data.classes[data.classes["run_id"].isin(keep)])
    factors = {"Model": "model", "Shift": "shift", "Class": "class_name"}
    reference = {
        "Model": next(labels[r.run_id] for r in runs if r.run_id in keep),
        "Shift": CLEAN_SHIFT,
    }
    n_classes = counts["class_name"].nunique()
    if n_classes > MAX_REGRESSION_CLASSES:
        notes.append(
            f"regression: Class factor left out ({n_classes} classes; at most "
            f"{MAX_REGRESSION_CLASSES} are fitted as dummies)"
        )
        factors.pop("Class")
    for name in list(factors):
        if counts[factors[name]].nunique() < 2:
            factors.pop(name)
            reference.pop(name, None)
    if "Shift" not in factors:
        return None, None
    by = list(factors.values())
    summed = counts.groupby(by, sort=True, observed=True)[["n_correct", "n"]].sum()
    cells = summed.assign(accuracy=summed["n_correct"] / summed["n"])[["accuracy", "n"]]
    cells = cells.reset_index()
    # The independent observations behind both fits: the report withholds p-values when
    # they are no more than the terms (robustlab.workflows.report.analysis.withheld_inference).
    n_images = int(data.images(keep))
    ols = logit = None
    try:
        ols = regress_accuracy(cells, factors, reference=reference)
        ols.table.attrs["n_images"] = n_images
    except ValueError as exc:
        notes.append(f"no regression table: {exc}")
    n_rows = int(counts["n"].sum())
    terms = 1 + sum(counts[c].nunique() - 1 for c in factors.values())
    if n_rows * terms > MAX_LOGIT_ENTRIES:
        notes.append(
            f"per-image logistic model left out: {n_rows:,} predictions x {terms} "
            f"terms is over {MAX_LOGIT_ENTRIES:,} design entries (fit "
            "robustlab.metrics.regression.logit_correctness on a sample)"
        )
    else:
        try:
            logit = logit_correctness(named(data.rows(keep)), factors, reference=reference)
        except ValueError as exc:
            notes.append(f"no per-image logistic model: {exc}")
        else:
            logit.table.attrs["n_images"] = n_images
            if logit.table.attrs.get("separated"):
                notes.append(separation_note(logit.table.attrs.get("constant_levels", [])))
    return ols, logit


def separation_note(levels: list[str]) -> str:
    """The report's note for a logistic fit with perfect separation (``levels``: the
    factor levels always right or always wrong)."""
    why = (
        f"{len(levels)} level(s) always right or always wrong: {', '.join(levels)}"
        if levels
        else "a combination of levels predicts correctness exactly"
    )
    return (
        f"per-image logistic model: perfect separation ({why}); its estimates and "
        "intervals are not meaningful"
    )
