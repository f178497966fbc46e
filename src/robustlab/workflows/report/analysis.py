"""The report's regression section: which factors move accuracy, and how sure that is.

The OLS over per-cell accuracy is XIMAGENET-12's analysis; the logistic model over every
prediction clusters its errors by image. :func:`withheld_inference` decides when a fit has
too little evidence for standard errors, intervals and p-values to be shown at all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robustlab.workflows.report.columns import col, column
from robustlab.workflows.report.gather import ReportData
from robustlab.workflows.report.html import Table, note
from robustlab.workflows.report.page import Page

STARS = "signif.: **** p<0.0001, *** <0.001, ** <0.01, * <0.05, ns"

OLS_INFERENCE = [
    column("score", "std_error", "Std. error"),
    col("ci_low"),
    col("ci_high"),
    column("score", "t", "t"),
    column("score", "p", "p"),
    col("stars"),
]
LOGIT_INFERENCE = [
    column("score", "std_error", "SE (clustered)"),
    col("ci_low"),
    col("ci_high"),
    column("score", "p", "p (clustered)"),
    column("score", "p_naive", "p (naive)"),
    col("stars"),
]

WHICH_TO_READ = (
    "Which to read: the table above is the XIMAGENET-12 paper's analysis, one "
    "observation per (model, shift, class) cell, so its p-values count cells. "
    "The table below models every prediction (right or wrong) with a logistic "
    "regression and clusters the standard errors by image, because one photo's "
    "predictions under many shifts are not independent; read it for per-image "
    "effects. Its naive p-values, which treat every prediction as independent, "
    "are shown for comparison: they are far too small."
)


def withheld_inference(result) -> str:
    """Why a fit's standard errors, intervals and p-values are not shown ('' when they are).

    A fit that did not converge has estimates running off towards infinity; a fit with no
    more independent observations than terms has no residual information left to estimate
    an error from. The independent observations are the images: a per-cell table of 6
    photos under 40 shifts has 240 rows but only 6 photos' worth of evidence (and the
    clustered errors of the logistic model are estimated from 6 clusters). p-values and
    stars printed for such a fit look like findings and are not.
    """
    table = result.table
    terms = len(table)
    if not table.attrs.get("converged", True):
        return (
            "the fit did not converge (a level is always right or always wrong, so its "
            "estimate runs off towards infinity): no standard errors, intervals or p-values"
        )
    n_images = table.attrs.get("n_images")
    n_obs = int(result.fit.nobs)
    if n_obs <= terms or (n_images is not None and n_images <= terms):
        have = (
            f"{n_images} images" if n_images is not None and n_images <= terms else f"{n_obs} rows"
        )
        return (
            f"{terms} terms fitted on {have}: fewer independent observations than terms, so "
            "no standard errors, intervals or p-values (the estimates only describe these "
            "images); evaluate more images for inference"
        )
    return ""


def r_squared_text(fit) -> str:
    """``R^2 = 0.873``, or why there is none: with every cell at the same value the
    total sum of squares is 0 and statsmodels would divide by it (a NaN and a warning)."""
    if not np.ptp(np.asarray(fit.model.endog, dtype=float)) > 0:
        return "R^2 undefined (every cell has the same value)"
    return f"R^2 = {fit.rsquared:.3f}"


def regression(p: Page, d: ReportData, tmp: Path) -> None:
    """The OLS table, the logistic table when there is one, and the OLS's diagnostics."""
    reg = d.regression
    if reg is None:
        return
    p.section(
        "regression",
        "Regression analysis",
        "OLS of per-cell accuracy (model x shift x class, levels pooled) on categorical "
        "factors with treatment coding; an estimate is the difference in accuracy from the "
        "reference level ("
        + ", ".join(f"{k} = {v}" for k, v in reg.reference.items())
        + "), holding the other factors fixed.",
    )
    if p.flagged:
        from robustlab.workflows.report.headline import RANDOM_MARK

        names = ", ".join(d.labels[rid] for rid in p.flagged if rid in d.labels)
        p.add(
            note(
                f"{RANDOM_MARK}: the fits below include {names}, whose images were drawn by "
                "a random-weight checkpoint (noise); read the terms with that in mind."
            )
        )
    withheld = withheld_inference(reg)
    p.table(
        Table(
            "regression",
            [col("term"), column("score", "estimate", "Estimate")]
            + ([] if withheld else OLS_INFERENCE),
            reg.table.to_dict("records"),
            caption=f"{r_squared_text(reg.fit)}, {int(reg.fit.nobs)} cells; " + (withheld or STARS),
        )
    )
    if d.logit is not None:
        p.add(note(WHICH_TO_READ))
        _logit_table(p, d.logit)
    _diagnostics(p, reg, tmp)


def _logit_table(p: Page, logit) -> None:
    withheld = withheld_inference(logit)
    p.table(
        Table(
            "regression-logit",
            [
                col("term"),
                column("score", "estimate", "Log-odds"),
                column("score", "odds_ratio", "Odds ratio"),
            ]
            + ([] if withheld else LOGIT_INFERENCE),
            logit.table.to_dict("records"),
            caption=f"Logistic model of top-1 correctness, {int(logit.fit.nobs)} predictions"
            + (f"; {withheld}" if withheld else f", standard errors clustered by image; {STARS}")
            + ("; perfect separation, see the notes" if logit.table.attrs.get("separated") else ""),
        )
    )


def _diagnostics(p: Page, reg, tmp: Path) -> None:
    """Residuals against fitted values and the residuals' QQ plot, side by side."""
    paths = reg.plots(tmp, "regression")
    p.plots(
        [
            (
                "fig-regression-residuals",
                paths["residuals"].read_bytes(),
                "Regression residuals vs fitted values",
                "scatter of residuals against fitted accuracy",
            ),
            (
                "fig-regression-qq",
                paths["qq"].read_bytes(),
                "Normal QQ plot of the regression residuals",
                "QQ plot of residual quantiles against normal quantiles",
            ),
        ]
    )
