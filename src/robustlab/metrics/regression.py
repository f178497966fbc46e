"""Regression analysis of accuracy on categorical factors (XIMAGENET-12's Model/Scenario/Class).

Accuracy is regressed on dummy-coded factors with statsmodels OLS. Treatment coding: each
factor has a reference level (chosen by the user, e.g. ``Scenario = "original"``), and a
level's estimate is its difference in accuracy from the reference, holding the other
factors fixed. The design matrix is built here, not by a formula parser, so level names
with spaces or quotes are safe and term names are readable (``Scenario[blur_bg]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# (upper bound on p, stars), checked in order; p >= 0.05 is "ns".
STAR_LEVELS = ((0.0001, "****"), (0.001, "***"), (0.01, "**"), (0.05, "*"))


def significance_stars(p: float) -> str:
    """``****`` p < 0.0001, ``***`` < 0.001, ``**`` < 0.01, ``*`` < 0.05, else ``ns``."""
    if p is None or not np.isfinite(p):
        return "ns"
    for bound, stars in STAR_LEVELS:
        if p < bound:
            return stars
    return "ns"


def cell_accuracy(
    predictions: pd.DataFrame, by: Sequence[str], correct: str = "correct"
) -> pd.DataFrame:
    """Mean of ``correct`` per cell of ``by`` (e.g. model, shift, class_name), with ``n``."""
    missing = [c for c in [*by, correct] if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions table lacks column(s) {', '.join(missing)}")
    g = predictions.groupby(list(by), sort=True, observed=True)[correct]
    return g.agg(accuracy="mean", n="size").reset_index()


@dataclass
class RegressionResult:
    """The coefficient table plus the fitted statsmodels results.

    Attributes:
        table: One row per term: ``term``, ``factor``, ``level``, ``estimate``,
            ``std_error``, ``ci_low``, ``ci_high``, ``t``, ``p``, ``stars``.
        fit: ``statsmodels`` RegressionResults (residuals, fitted values, R^2, ...).
        reference: Factor -> reference level used.
    """

    table: pd.DataFrame
    fit: Any
    reference: dict[str, str]

    def plots(self, out_dir: str | Path, prefix: str = "regression") -> dict[str, Path]:
        """Write residuals-vs-fitted and normal QQ plots as PNG; returns their paths."""
        return regression_plots(self.fit, out_dir, prefix)


def _levels(series: pd.Series) -> list[str]:
    return sorted(series.astype(str).unique())


def design_matrix(
    data: pd.DataFrame, factors: Mapping[str, str], reference: Mapping[str, str] | None = None
) -> tuple[pd.DataFrame, dict[str, str]]:
    """Intercept plus treatment-coded dummies; returns (X, factor -> reference level).

    Args:
        factors: Display name -> column, e.g. ``{"Model": "model", "Scenario": "shift"}``.
        reference: Display name -> reference level; default the first level in sorted
            order (as patsy does).
    """
    reference = dict(reference or {})
    unknown = set(reference) - set(factors)
    if unknown:
        raise ValueError(
            f"reference given for unknown factor(s) {sorted(unknown)}; factors: {list(factors)}"
        )
    cols = {"Intercept": np.ones(len(data))}
    used = {}
    for name, col in factors.items():
        if col not in data.columns:
            raise ValueError(f"data lacks column {col!r} for factor {name}")
        values = data[col].astype(str)
        levels = _levels(values)
        if len(levels) < 2:
            raise ValueError(f"factor {name} has a single level {levels!r}; drop it from the model")
        ref = str(reference.get(name, levels[0]))
        if ref not in levels:
            raise ValueError(
                f"reference {ref!r} is not a level of {name}; levels: {', '.join(levels)}"
            )
        used[name] = ref
        for lv in levels:
            if lv != ref:
                cols[f"{name}[{lv}]"] = (values == lv).to_numpy(dtype=float)
    return pd.DataFrame(cols, index=data.index), used


def _require_identifiable(X: pd.DataFrame) -> None:
    """ValueError when the design is rank-deficient (confounded factors)."""
    if np.linalg.matrix_rank(X.to_numpy()) < X.shape[1]:
        raise ValueError(
            "factors are confounded (some level combinations never vary independently); "
            "the coefficients are not identifiable"
        )


def _term_parts(term: str) -> tuple[str, str]:
    """``"Shift[fog]"`` -> ``("Shift", "fog")``; the intercept has neither."""
    if term == "Intercept":
        return "", ""
    factor, _, level = term[:-1].partition("[")
    return factor, level


def regress_accuracy(
    data: pd.DataFrame,
    factors: Mapping[str, str] | Sequence[str],
    *,
    response: str = "accuracy",
    reference: Mapping[str, str] | None = None,
    alpha: float = 0.05,
) -> RegressionResult:
    """OLS of ``response`` on categorical factors with treatment coding.

    Args:
        data: One row per observation: per-cell accuracies (see :func:`cell_accuracy`) or
            per-prediction 0/1 ``correct`` values (a linear probability model).
        factors: Column names, or display name -> column (``{"Model": "model",
            "Scenario": "shift", "Class": "class_name"}``).
        response: The numeric column to explain.
        reference: Display name -> reference level.
        alpha: 1 - confidence of the intervals (0.05: 95 % CI).

    Raises:
        ValueError: missing columns, a one-level factor, an unknown reference level, too few
            rows for the number of terms, or confounded factors (rank-deficient design).
    """
    import statsmodels.api as sm

    if not isinstance(factors, Mapping):
        factors = {c: c for c in factors}
    if response not in data.columns:
        raise ValueError(f"data lacks response column {response!r}")
    y = pd.to_numeric(data[response], errors="coerce").astype(float)
    if y.isna().any():
        raise ValueError(
            f"response {response!r} has {int(y.isna().sum())} missing or non-numeric values"
        )
    X, used = design_matrix(data, factors, reference)
    if len(X) <= X.shape[1]:
        raise ValueError(f"{len(X)} rows cannot fit {X.shape[1]} terms; need more observations")
    _require_identifiable(X)
    fit = sm.OLS(y.to_numpy(), X).fit()
    ci = fit.conf_int(alpha)
    rows = []
    for term in X.columns:
        factor, level = _term_parts(term)
        p = float(fit.pvalues[term])
        rows.append(
            {
                "term": term,
                "factor": factor,
                "level": level,
                "estimate": float(fit.params[term]),
                "std_error": float(fit.bse[term]),
                "ci_low": float(ci.loc[term, 0]),
                "ci_high": float(ci.loc[term, 1]),
                "t": float(fit.tvalues[term]),
                "p": p,
                "stars": significance_stars(p),
            }
        )
    return RegressionResult(pd.DataFrame(rows), fit, used)


def logit_correctness(
    data: pd.DataFrame,
    factors: Mapping[str, str] | Sequence[str],
    *,
    response: str = "correct",
    cluster: str = "sample_id",
    reference: Mapping[str, str] | None = None,
    alpha: float = 0.05,
) -> RegressionResult:
    """Per-prediction logistic regression of correctness, standard errors clustered by image.

    The per-cell OLS (:func:`regress_accuracy`) is the XIMAGENET-12 paper's analysis; this is
    the per-image one done right. Every image contributes one row per cell, and those rows
    are correlated (an easy photo is right under most shifts), so treating them as
    independent makes p-values far too small; the cluster-robust covariance counts images,
    not rows. An estimate is a log-odds ratio against the reference level.

    The model is fitted once. The clustered covariance is the sandwich of that fit
    (statsmodels' ``cov_cluster``, CRV1 with the small-sample factor
    ``G/(G-1) * (N-1)/(N-K)``), and its inference is normal-based: exactly what statsmodels'
    ``fit(cov_type="cluster")`` reports, without fitting a second time.

    Returns:
        A :class:`RegressionResult` whose table has ``estimate`` (log-odds), ``odds_ratio``,
        ``std_error`` (clustered), ``std_error_naive``, ``ci_low``/``ci_high`` (log-odds,
        clustered), ``z``, ``p`` (clustered), ``p_naive`` and ``stars``. Its ``fit`` is the
        one statsmodels fit (its own ``bse``/``pvalues`` are the naive ones).

    Raises:
        ValueError: as :func:`regress_accuracy`; also a response that is all 0 or all 1.
    """
    if not isinstance(factors, Mapping):
        factors = {c: c for c in factors}
    for col in (response, cluster):
        if col not in data.columns:
            raise ValueError(f"data lacks column {col!r}")
    y = data[response].astype(float).to_numpy()
    if y.min() == y.max():
        raise ValueError("every prediction is right (or every one wrong): nothing to explain")
    X, used = design_matrix(data, factors, reference)
    _require_identifiable(X)
    fit, separated, cov = _fit_clustered(y, X, pd.factorize(data[cluster])[0])
    table = _logit_table(X, fit, cov, alpha)
    # False when the optimiser stopped early: typically a level that is always right (or
    # wrong), whose estimate then runs off towards infinity; the report says so.
    table.attrs["converged"] = bool(fit.mle_retvals.get("converged", True))
    # statsmodels saw perfect separation (some predictions fitted exactly): the
    # coefficients are not identified. The levels that are always right or always wrong
    # are the usual cause; they are named so that the report can say which.
    table.attrs["separated"] = separated
    table.attrs["constant_levels"] = constant_levels(data, factors, y) if separated else []
    return RegressionResult(table, fit, used)


def _fit_clustered(y: np.ndarray, X: pd.DataFrame, groups: np.ndarray) -> tuple[Any, bool, Any]:
    """Fit the logistic model once and take its cluster-robust (CRV1) covariance by image:
    ``(fit, separated, cov)``. Any failure of the fit becomes one ``ValueError`` line, which
    the report prints instead of the table."""
    import statsmodels.api as sm
    from statsmodels.stats.sandwich_covariance import cov_cluster

    try:
        fit, separated = fit_logit_quietly(sm.Logit(y, X), maxiter=200)
        cov = cov_cluster(fit, groups, use_correction=True)
    except Exception as exc:  # noqa: BLE001 - a singular Hessian etc.: one line for the report
        raise ValueError(
            f"the logistic model cannot be fitted: {type(exc).__name__}: {exc}"
        ) from None
    return fit, separated, cov


def _logit_table(X: pd.DataFrame, fit, cov, alpha: float) -> pd.DataFrame:
    """One row per term: the log-odds estimate with its clustered error, normal-based
    interval, z and p (what ``fit(cov_type="cluster")`` would report), next to the naive
    error and p of the fit itself, so that the report can show how much clustering
    matters."""
    from scipy import stats

    params = np.asarray(fit.params, dtype=float)
    with np.errstate(invalid="ignore"):
        # A fit that did not converge can leave a negative variance: its error is NaN
        # (as statsmodels reports it), and the table's ``converged`` flag says why.
        se = np.sqrt(np.diag(cov))
    z = params / se
    p_clustered = 2 * stats.norm.sf(np.abs(z))
    half = stats.norm.ppf(1 - alpha / 2) * se
    rows = []
    for k, term in enumerate(X.columns):
        factor, level = _term_parts(term)
        pv = float(p_clustered[k])
        rows.append(
            {
                "term": term,
                "factor": factor,
                "level": level,
                "estimate": float(params[k]),
                "odds_ratio": float(np.exp(params[k])),
                "std_error": float(se[k]),
                "std_error_naive": float(fit.bse[term]),
                "ci_low": float(params[k] - half[k]),
                "ci_high": float(params[k] + half[k]),
                "z": float(z[k]),
                "p": pv,
                "p_naive": float(fit.pvalues[term]),
                "stars": significance_stars(pv),
            }
        )
    return pd.DataFrame(rows)


def fit_logit_quietly(model, **kwargs) -> tuple[Any, bool]:
    """``model.fit(disp=0, **kwargs)`` and whether statsmodels detected perfect separation.

    statsmodels reports separation and non-convergence as warnings on the console, where a
    user sees a raw library message without the context; the callers report both in their
    results instead (a flag, a note). Other warnings pass through unchanged.

    Returns:
        (fit, separated): ``separated`` is True when statsmodels warned of perfect
        separation or prediction, so the estimates and their errors are not meaningful.
    """
    import warnings

    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("always", PerfectSeparationWarning)
        fit = model.fit(disp=0, **kwargs)
    separated = False
    for w in caught:
        if issubclass(w.category, PerfectSeparationWarning):
            separated = True
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return fit, separated


def constant_levels(data: pd.DataFrame, factors: Mapping[str, str], y: np.ndarray) -> list[str]:
    """``"Factor[level]"`` of every factor level whose responses are all equal (all right
    or all wrong): the levels that separate the data perfectly."""
    out = []
    for name, col in factors.items():
        values = data[col].astype(str).to_numpy()
        for lv in _levels(data[col]):
            ys = y[values == lv]
            if ys.min() == ys.max():
                out.append(f"{name}[{lv}]")
    return out


def regression_plots(fit, out_dir: str | Path, prefix: str = "regression") -> dict[str, Path]:
    """Residuals vs fitted values and a normal QQ plot of the residuals, as PNG files.

    Uses matplotlib's Agg canvas directly (no pyplot), so it works headless and leaves the
    user's backend alone.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from scipy import stats

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    resid = np.asarray(fit.resid, float)
    fitted = np.asarray(fit.fittedvalues, float)
    paths = {}

    fig = Figure(figsize=(5, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.scatter(fitted, resid, s=10, alpha=0.7)
    ax.axhline(0, color="grey", lw=1)
    ax.set_xlabel("fitted accuracy")
    ax.set_ylabel("residual")
    ax.set_title("Residuals vs fitted")
    fig.tight_layout()
    paths["residuals"] = out_dir / f"{prefix}_residuals.png"
    fig.savefig(paths["residuals"])

    fig = Figure(figsize=(5, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    (theo, ordered), (slope, intercept, _) = stats.probplot(resid, dist="norm")
    ax.scatter(theo, ordered, s=10, alpha=0.7)
    ax.plot(theo, slope * np.asarray(theo) + intercept, color="grey", lw=1)
    ax.set_xlabel("theoretical normal quantile")
    ax.set_ylabel("residual quantile")
    ax.set_title("Normal QQ plot of residuals")
    fig.tight_layout()
    paths["qq"] = out_dir / f"{prefix}_qq.png"
    fig.savefig(paths["qq"])
    return paths
