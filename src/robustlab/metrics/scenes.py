"""Background-scenario metrics: ImageNet-9's BG-gap and XIMAGENET-12's robustness score.

Both are pure functions over accuracies or over a predictions table (columns ``shift``,
``level``, ``sample_id``, ``correct`` and whatever the grouping names, e.g. ``run_id``).
Accuracies are fractions in [0, 1]: the robustness score squares differences, so percent
would silently give a different (negative) score, and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from robustlab.store.schema import CLEAN_SHIFT as CLEAN


def _require(df: pd.DataFrame, columns: Sequence[str]) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"predictions table lacks column(s) {', '.join(missing)}")


def _fraction(name: str, value) -> float:
    v = float(value)
    if not np.isfinite(v) or not 0.0 <= v <= 1.0:
        raise ValueError(
            f"{name} accuracy {value!r} is not a fraction in [0, 1] (give 0.9097, not 90.97)"
        )
    return v


# ------------------------------------------------------------------ BG-gap
def bg_gap(
    predictions: pd.DataFrame,
    *,
    by: Sequence[str] = ("run_id",),
    same: str = "mixed_same",
    rand: str = "mixed_rand",
    paired: bool = True,
) -> pd.DataFrame:
    """BG-gap = acc(mixed_same) - acc(mixed_rand), per group (e.g. per run).

    Args:
        predictions: Rows of the predictions table.
        by: Grouping columns (each group gets one gap).
        paired: Use only samples that have a prediction in both cells, so a sample skipped
            in one cell (e.g. no donor of its class) cannot move the gap by itself.

    Returns:
        DataFrame with the ``by`` columns, ``n``, ``acc_same``, ``acc_rand``, ``bg_gap``.

    Raises:
        ValueError: missing columns, or a group without predictions in one of the cells.
    """
    by = list(by)
    _require(predictions, [*by, "shift", "sample_id", "correct"])
    rows = []
    groups = predictions.groupby(by, sort=True) if by else [((), predictions)]
    for key, g in groups:
        a = g[g["shift"] == same].drop_duplicates("sample_id").set_index("sample_id")["correct"]
        b = g[g["shift"] == rand].drop_duplicates("sample_id").set_index("sample_id")["correct"]
        if paired:
            common = a.index.intersection(b.index)
            a, b = a.loc[common], b.loc[common]
        if len(a) == 0 or len(b) == 0:
            raise ValueError(
                f"group {key!r} has no {'paired ' if paired else ''}predictions "
                f"for {same} and {rand}"
            )
        key = key if isinstance(key, tuple) else (key,)
        acc_s, acc_r = float(a.mean()), float(b.mean())
        rows.append(
            {
                **dict(zip(by, key)),
                "n": int(min(len(a), len(b))),
                "acc_same": acc_s,
                "acc_rand": acc_r,
                "bg_gap": acc_s - acc_r,
            }
        )
    return pd.DataFrame(rows, columns=[*by, "n", "acc_same", "acc_rand", "bg_gap"])


# ------------------------------------------------------------------ robustness score
@dataclass(frozen=True)
class RobustnessScore:
    """XIMAGENET-12 robustness score and its parts.

    Attributes:
        mu: Accuracy trained and tested on the original images.
        sigma2_cross: sum_i (C(i) - mu)^2 / n over scenarios with an EX1 (cross) accuracy.
        sigma2_inner: The same over EX2 (inner) accuracies C'(i); None without any.
        s_robust: 1 - (sigma2_cross + sigma2_inner); None unless both protocols cover
            every scenario (a partial sum would overstate robustness).
        s_partial: 1 - (sum of the variances that exist): what can be said so far.
        complete: Both protocols present for every scenario.
        scenarios: The scenario set (n = its length).
        missing_cross / missing_inner: Scenarios without a C(i) / C'(i).
    """

    mu: float
    sigma2_cross: float | None
    sigma2_inner: float | None
    s_robust: float | None
    s_partial: float
    complete: bool
    scenarios: tuple[str, ...]
    missing_cross: tuple[str, ...]
    missing_inner: tuple[str, ...]

    def describe(self) -> dict:
        return asdict(self)


def robustness_score(
    mu: float,
    cross: Mapping[str, float],
    inner: Mapping[str, float] | None = None,
    scenarios: Sequence[str] | None = None,
) -> RobustnessScore:
    """S_robust = 1 - (sigma2_cross + sigma2_inner), with partial-score handling.

    A variance is the mean of squared deviations over the scenarios that have an accuracy
    (n = how many have one), so a missing scenario is reported, not counted as zero. The
    full score exists only when both protocols cover every scenario; otherwise
    ``s_robust`` is None and ``s_partial`` says what the available parts give.

    Args:
        mu: Accuracy on the original images (fraction).
        cross: Scenario -> EX1 accuracy C(i) (train on original, test on scenario).
        inner: Scenario -> EX2 accuracy C'(i) (train and test on scenario), if any.
        scenarios: The full scenario set; default the union of the keys given.

    Example:
        >>> r = robustness_score(0.9, {"a": 0.8, "b": 0.7}, {"a": 0.85, "b": 0.9})
        >>> round(r.sigma2_cross, 4), round(r.sigma2_inner, 5), round(r.s_robust, 5)
        (0.025, 0.00125, 0.97375)
    """
    mu = _fraction("mu", mu)
    inner = dict(inner or {})
    cross = dict(cross)
    names = tuple(scenarios) if scenarios is not None else tuple(dict.fromkeys([*cross, *inner]))
    if not names:
        raise ValueError("robustness score needs at least one scenario accuracy")
    extra = [k for k in [*cross, *inner] if k not in names]
    if extra:
        raise ValueError(
            f"accuracies given for scenario(s) outside the set: {', '.join(sorted(set(extra)))}"
        )

    def var(acc: dict) -> float | None:
        vals = [_fraction(k, acc[k]) for k in names if k in acc]
        return None if not vals else float(np.mean([(v - mu) ** 2 for v in vals]))

    s2c, s2i = var(cross), var(inner)
    miss_c = tuple(k for k in names if k not in cross)
    miss_i = tuple(k for k in names if k not in inner)
    complete = not miss_c and not miss_i
    s_partial = 1.0 - ((s2c or 0.0) + (s2i or 0.0))
    return RobustnessScore(
        mu, s2c, s2i, s_partial if complete else None, s_partial, complete, names, miss_c, miss_i
    )


def scenario_accuracies(
    predictions: pd.DataFrame, *, clean: str = CLEAN, scenarios: Sequence[str] | None = None
) -> tuple[float, dict[str, float]]:
    """(mu, {scenario: accuracy}) from one run's predictions (EX1: original-trained model).

    A scenario is a shift; a shift stored with several levels (``random_bg`` add/paste)
    gives one scenario per level, named ``shift:level``. Scenarios are listed in the order
    their shifts first appear, levels sorted.
    """
    _require(predictions, ["shift", "level", "correct"])
    cells = (
        predictions.assign(
            level=predictions["level"].astype(str), correct=predictions["correct"].astype(bool)
        )
        .groupby(["shift", "level"], sort=False)["correct"]
        .agg(n="size", n_correct="sum")
        .reset_index()
    )
    return cell_scenario_accuracies(cells, clean=clean, scenarios=scenarios)


def cell_scenario_accuracies(
    cells: pd.DataFrame, *, clean: str = CLEAN, scenarios: Sequence[str] | None = None
) -> tuple[float, dict[str, float]]:
    """:func:`scenario_accuracies` from one run's per-cell counts (``shift``, ``level``,
    ``n``, ``n_correct``; e.g. :meth:`robustlab.store.Store.cell_table`'s rows of the run):
    shifts in the order they first appear, levels sorted."""
    _require(cells, ["shift", "level", "n", "n_correct"])
    cl = cells[cells["shift"] == clean]
    if cl.empty:
        raise ValueError(f"no '{clean}' predictions: mu needs the original images")
    rest = cells[cells["shift"] != clean]
    if scenarios is not None:
        rest = rest[rest["shift"].isin(scenarios)]
    out: dict[str, float] = {}
    for shift, g in rest.groupby("shift", sort=False):
        g = g.assign(level=g["level"].astype(str)).sort_values("level", kind="stable")
        for rec in g.itertuples(index=False):
            name = shift if len(g) == 1 else f"{shift}:{rec.level}"
            out[name] = int(rec.n_correct) / int(rec.n)
    return int(cl["n_correct"].sum()) / int(cl["n"].sum()), out
