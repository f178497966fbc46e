"""The report's per-benchmark tables, each shaped like its paper's: ImageNet-C's errors and
CE, XIMAGENET-12's scenarios and robustness score, ImageNet-9's BG-gap, ImageNet-E's
attribute edits, ImageNet-D's subsets and ICONS-50's hold-out protocols."""

from __future__ import annotations

import re

from robustlab.metrics.regression import significance_stars
from robustlab.store import CLEAN_SHIFT
from robustlab.workflows.report import plots
from robustlab.workflows.report.columns import col, column, model_run
from robustlab.workflows.report.benchmark_data import EDIT_ATTRIBUTES
from robustlab.workflows.report.gather import ReportData, family
from robustlab.workflows.report.runs import RunView
from robustlab.workflows.report.html import Column, Table, note
from robustlab.workflows.report.render import render
from robustlab.workflows.report.page import Page

# Marks gather's note on why a run has no CE/mCE (shown once, under the corruption tables).
MCE_NOTE = "CE/mCE"


def _slug(text: str) -> str:
    """A table id fragment: letters, digits and dashes only."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-") or "x"


def _title(name: str) -> str:
    """A shift or scenario name as a column header."""
    return name.replace("_", " ")


# ---------------------------------------------------------------------------- ImageNet-C
def corruption_tables(p: Page, d: ReportData) -> None:
    """ImageNet-C Table 1: error per corruption, then CE and relative CE where a baseline
    allows them, and why not where it does not."""
    corr = list(dict.fromkeys(d.corruption_error["shift"]))
    if not corr:
        return
    p.section(
        "corruptions",
        "Corruptions (ImageNet-C)",
        "Like ImageNet-C Table 1: per corruption, the top-1 error averaged over the "
        "stored severities; CE divides the summed errors by the baseline's (lower is better).",
    )
    clean = d.cells[d.cells["shift"] == CLEAN_SHIFT].set_index("run_full")["error"]
    # 15 corruption columns are wide: the Run column goes when every label already names
    # its run ("lite0 [9b862906]", one model evaluated several times).
    who = model_run(not all(f"[{r.short}]" in r.label for r in d.runs))
    fam = {s: family(s) for s in corr}
    _error_table(p, d, corr, fam, clean, who)
    ce_runs = [r for r in d.runs if r.run_id in d.mce]
    if ce_runs:
        _ce_tables(p, d, ce_runs, corr, fam, clean, who)
    _missing_mce(p, d)


def _error_table(p: Page, d: ReportData, corr, fam, clean, who: list[Column]) -> None:
    rows = []
    for r in d.runs:
        g = d.corruption_error[d.corruption_error["run_full"] == r.run_id].set_index("shift")[
            "mean_error"
        ]
        if g.empty:
            continue
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "clean": clean.get(r.run_id),
                **{f"e:{s}": g.get(s) for s in corr},
            }
        )
    cols = [*who, col("clean_error")]
    cols += [column("error", f"e:{s}", _title(s), note=fam[s]) for s in corr]
    p.table(
        Table(
            "corruption-errors",
            cols,
            rows,
            caption="Top-1 error (%) per corruption, mean over the stored severities",
        )
    )


def _ce_tables(
    p: Page, d: ReportData, ce_runs: list[RunView], corr, fam, clean, who: list[Column]
) -> None:
    rows = []
    for r in ce_runs:
        g = d.ce[d.ce["run_full"] == r.run_id].set_index("shift")
        m = d.mce[r.run_id]
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "baseline": m["baseline"],
                "clean": clean.get(r.run_id),
                "mce": m["mce"],
                "rel": m["relative_mce"],
                **{f"ce:{s}": g["ce"].get(s) for s in corr},
                **{f"rce:{s}": g["relative_ce"].get(s) for s in corr},
            }
        )
    cols = [
        *who,
        col("baseline"),
        col("clean_error"),
        col("mce", tip="mean CE over the corruptions"),
        col("rel_mce", key="rel", tip="mean relative CE"),
    ]
    cols += [column("ce", f"ce:{s}", _title(s), note=f"{fam[s]} CE") for s in corr]
    p.table(
        Table(
            "ce-table", cols, rows, caption="Corruption Error (CE, %) and mCE against the baseline"
        )
    )
    cols = [*who, col("rel_mce", key="rel")]
    cols += [column("ce", f"rce:{s}", _title(s), note=f"{fam[s]} rel. CE") for s in corr]
    p.table(
        Table(
            "relative-ce-table",
            cols,
            rows,
            caption="Relative CE (%): degradation from clean, relative to the baseline's",
        )
    )


def _missing_mce(p: Page, d: ReportData) -> None:
    """Why the runs with corruption errors but no mCE have none."""
    missing = [
        r
        for r in d.runs
        if r.run_id not in d.mce
        and not d.corruption_error[d.corruption_error["run_full"] == r.run_id].empty
    ]
    if not missing:
        return
    # The reason is said here, once (the Notes section leaves it out: see MCE_NOTE).
    why = [n for n in d.notes if MCE_NOTE in n] or [
        "mCE needs a baseline measured on the same images: pass a model evaluated on "
        "these images with --baseline MODEL"
    ]
    p.add(render("no_mce.html", models=", ".join(r.label for r in missing), notes=why))


# ---------------------------------------------------------------------------- scenarios
def scenario_tables(p: Page, d: ReportData) -> None:
    """XIMAGENET-12 Table 1 per suite, the robustness score, and ImageNet-9's BG-gap."""
    if not d.scenarios:
        return
    p.section(
        "scenarios",
        "Background scenarios",
        "Like XIMAGENET-12 Table 1: top-1 accuracy of the original-trained model on each "
        "scenario (EX1). One table per suite, so no row is half empty.",
    )
    by_suite: dict[str, list] = {}
    for r in d.runs:
        if r.run_id in d.scenarios:
            by_suite.setdefault(r.record.get("suite") or "clean", []).append(r)
    for suite, runs in by_suite.items():
        _scenario_table(p, d, suite, runs)
    _robustness_table(p, d)
    _bg_gap_table(p, d)


def _scenario_table(p: Page, d: ReportData, suite: str, runs: list[RunView]) -> None:
    names = list(dict.fromkeys(k for r in runs for k in d.scenarios[r.run_id][1]))
    rows = []
    for r in runs:
        mu, acc = d.scenarios[r.run_id]
        rows.append(
            {"label": r.label, "run": r.short, "mu": mu, **{f"s:{k}": acc.get(k) for k in names}}
        )
    cols = [*model_run(), column("accuracy", "mu", "Original %")]
    cols += [column("accuracy", f"s:{k}", _title(k)) for k in names]
    p.table(
        Table(
            f"scenarios-{_slug(suite)}",
            cols,
            rows,
            caption=f"{suite}: scenario top-1 accuracy (%)",
        )
    )


ROBUSTNESS_COLUMNS = [
    *model_run(),
    column("accuracy", "mu", "mu %"),
    column("count", "n", "Scenarios"),
    column("score", "s2c", "sigma2 cross"),
    column("score", "s2i", "sigma2 inner"),
    column("score", "partial", "S partial", tip="1 - sigma2_cross (EX1 only)"),
    col("s_robust", key="full", tip="needs EX2 (inner) accuracies too"),
]


def _robustness_table(p: Page, d: ReportData) -> None:
    rows = []
    for r in d.runs:
        rs = d.robustness.get(r.run_id)
        if rs is None:
            continue
        rows.append(
            {
                "label": r.label,
                "run": r.short,
                "mu": rs.mu,
                "s2c": rs.sigma2_cross,
                "s2i": rs.sigma2_inner,
                "partial": rs.s_partial,
                "full": rs.s_robust,
                "n": len(rs.scenarios),
            }
        )
    if rows:
        p.table(
            Table(
                "robustness",
                ROBUSTNESS_COLUMNS,
                rows,
                caption="XIMAGENET-12 robustness score S_robust = 1 - (sigma2_cross + sigma2_inner)",
            )
        )


BG_GAP_COLUMNS = [
    col("model"),
    col("images", title="Paired images"),
    column("accuracy", "same", "mixed_same %"),
    column("accuracy", "rand", "mixed_rand %"),
    col("bg_gap", key="gap"),
]


def _bg_gap_table(p: Page, d: ReportData) -> None:
    if d.bg_gap.empty:
        return
    labels = d.labels
    rows = [
        {
            "label": labels.get(g.run_id, g.run_id),
            "n": g.n,
            "same": g.acc_same,
            "rand": g.acc_rand,
            "gap": g.bg_gap,
        }
        for g in d.bg_gap.itertuples()
    ]
    p.table(
        Table(
            "bg-gap",
            BG_GAP_COLUMNS,
            rows,
            caption="ImageNet-9 BG-gap = acc(mixed_same) - acc(mixed_rand), paired images",
        )
    )


# ---------------------------------------------------------------------------- ICONS-50
SURFACE_COLUMNS = [
    *model_run(),
    column("text", "protocol", "Protocol"),
    column("text", "held", "Held out"),
    col("seed"),
    column("count", "n_train", "Train images"),
    column("count", "n_seen", "In-dist. n"),
    column("accuracy", "seen", "In-dist. %"),
    column("count", "n_held", "Held-out n"),
    column("accuracy", "heldacc", "Held-out %"),
    column("drop", "gap", "Drop %", tip="in-distribution minus held-out top-1"),
]


def surface_variation(p: Page, d: ReportData) -> None:
    """ICONS-50's protocols (``robustlab holdout``): held-out style, subtypes, versions."""
    t = d.surface
    if t.empty:
        return
    p.section(
        "surface-variation",
        "Surface variation (hold-out protocols)",
        "A network trained from scratch with a style, some subtypes or one version of "
        "each icon held out (ImageNet-C paper, ICONS-50). In-distribution: a seeded share "
        "of the training pool kept aside; held-out: what was held out, scored on the "
        "broad class. The paper's shape: versions stay high, a held-out style drops.",
    )
    labels = d.labels
    rows = [
        {
            "label": labels.get(r.run_id, r.model),
            "run": r.run_id[:8],
            "protocol": r.protocol,
            "held": r.held_out,
            "seed": r.seed,
            "n_train": r.n_train,
            "n_seen": r.n_seen,
            "seen": r.seen_top1,
            "n_held": r.n_held,
            "heldacc": r.held_top1,
            "gap": r.seen_top1 - r.held_top1,
        }
        for r in t.itertuples()
    ]
    p.table(
        Table(
            "surface-variation",
            SURFACE_COLUMNS,
            rows,
            caption="Top-1 accuracy (%) under each hold-out protocol",
        )
    )


# ---------------------------------------------------------------------------- ImageNet-D
def imagenet_d(p: Page, d: ReportData) -> None:
    """ImageNet-D: top-1 per subset for every run on its label space (the paper's table)."""
    t = d.imagenet_d
    if t.empty:
        return
    p.section(
        "imagenet-d",
        "ImageNet-D subsets",
        "Top-1 accuracy (%) per subset for runs on the imagenet-d label space; a "
        "prediction is right when its top-1 ImageNet class is one of the class's ids.",
    )
    order = [s for s in ("background", "texture", "material", "all") if s in set(t["subset"])]
    rows = []
    for r in d.runs:
        g = t[t["run_full"] == r.run_id]
        if g.empty:
            continue
        row = {"label": r.label, "run": r.short}
        for e in g.itertuples():
            row[e.subset] = e.top1
            row[f"n:{e.subset}"] = e.n
        rows.append(row)
    cols = model_run()
    cols += [column("accuracy", s, f"{s} %") for s in order]
    cols += [column("count", f"n:{s}", f"n {s}") for s in order]
    p.table(Table("imagenet-d-subsets", cols, rows, caption="Top-1 accuracy per ImageNet-D subset"))


# ---------------------------------------------------------------------------- ImageNet-E
def edit_tables(p: Page, d: ReportData) -> None:
    """ImageNet-E: accuracy and drop per attribute level, and accuracy vs the measured value."""
    if d.edits.empty:
        return
    p.section(
        "attribute-edits",
        "Attribute edits (ImageNet-E)",
        "Like ImageNet-E Table 1: top-1 accuracy on each edited attribute level and its "
        "drop from the clean accuracy of the same run (points; higher drop = more "
        "sensitive to that attribute). The drop is paired: clean accuracy over the same "
        "images as the level, so a level that skipped images is not compared with a "
        "different image set. Every image (clean and edited, the published archive and "
        "robustlab's own folders alike) is seen through ImageNet-E's rule unless the run "
        "says otherwise in its protocol column: shorter side 256, centre crop 224, then "
        "the model's resize.",
    )
    _unpaired_note(p, d)
    _edit_level_tables(p, d)
    if not d.edit_curves.empty:
        p.figure(
            "fig-edit-attributes",
            plots.attribute_curves(d.edit_curves, d.labels, EDIT_ATTRIBUTES),
            "Top-1 accuracy of edited images against what the edit achieved (object pixel "
            "rate; mean |FFT| complexity of the edited image), pooled over the edits, "
            "in quantile bins.",
            "line plots of accuracy against measured object rate and image complexity",
        )
    _edit_effects_table(p, d)


def _unpaired_note(p: Page, d: ReportData) -> None:
    unpaired = d.edits[d.edits["n"] < d.edits["n_clean"]]
    if unpaired.empty:
        return
    p.add(
        note(
            "Levels with fewer images than clean (drop over their own images): "
            + "; ".join(
                f"{e.label} {e.shift} {e.level}: {e.n} of {e.n_clean} "
                f"(clean on all {100 * e.clean:.1f}%, on these {100 * e.clean_paired:.1f}%)"
                for e in unpaired.itertuples()
            )
        )
    )


def _edit_level_tables(p: Page, d: ReportData) -> None:
    keys = list(dict.fromkeys(zip(d.edits["shift"], d.edits["level"])))
    rows = []
    for r in d.runs:
        g = d.edits[d.edits["run_full"] == r.run_id]
        if g.empty:
            continue
        row = {"label": r.label, "run": r.short, "clean": float(g["clean"].iloc[0])}
        for e in g.itertuples():
            row[f"a:{e.shift}:{e.level}"] = e.top1
            row[f"d:{e.shift}:{e.level}"] = e.drop
        rows.append(row)
    cols = [*model_run(), col("clean_top1", key="clean", title="Clean %")]
    cols += [column("accuracy", f"a:{s}:{lv}", f"{_title(s)} {lv}") for s, lv in keys]
    p.table(Table("edit-accuracy", cols, rows, caption="Top-1 accuracy (%) per attribute level"))
    cols = model_run()
    cols += [column("drop", f"d:{s}:{lv}", f"{_title(s)} {lv}") for s, lv in keys]
    p.table(
        Table(
            "edit-drop",
            cols,
            rows,
            caption="Drop from clean top-1 (percentage points) per attribute level",
        )
    )


EDIT_EFFECT_COLUMNS = [
    *model_run(),
    column("text", "edit", "Edit"),
    column("text", "attribute", "Measured attribute"),
    column("text", "n", "Rows"),
    column("text", "coef", "Log-odds per unit"),
    column("text", "se", "SE, clustered by image"),
    column("text", "p", "p (clustered)"),
]


def _edit_effects_table(p: Page, d: ReportData) -> None:
    fits = d.edit_effects[d.edit_effects["note"] == ""] if not d.edit_effects.empty else None
    if fits is None or fits.empty:
        return
    labels = {r.run_id: (r.label, r.short) for r in d.runs}
    rows = [
        {
            "label": labels.get(f.run_id, (f.run_id, f.run_id))[0],
            "run": labels.get(f.run_id, (f.run_id, f.run_id))[1],
            "edit": f.shift,
            "attribute": f.attribute,
            "n": f"{f.n} ({f.n_images} images)",
            "coef": f"{f.coef:+.3g}",
            "se": f"{f.se_cluster:.3g} (naive {f.se_naive:.3g})",
            "p": f"{f.p_cluster:.3g} {significance_stars(f.p_cluster)}",
        }
        for f in fits.itertuples()
    ]
    p.table(
        Table(
            "edit-effects",
            EDIT_EFFECT_COLUMNS,
            rows,
            caption="Logistic regression of top-1 correctness on what each edit "
            "achieved; an image's rows are correlated, so read the clustered "
            "standard errors (the naive ones are shown for comparison)",
        )
    )
