"""Each benchmark's numbers for the card (:class:`~.numbers.Number` rows), from the
stored predictions of its run: ImageNet-C's mCE (or its stand-in), ImageNet-9's BG-gap,
XIMAGENET-12's robustness score, ImageNet-E's drop per attribute, ImageNet-D's accuracy
per subset."""

from __future__ import annotations

import numpy as np
import pandas as pd

from robustlab.cells import Cell
from robustlab.store import Store
from robustlab.store.schema import CLEAN_SHIFT as CLEAN
from robustlab.workflows.card.numbers import ImageCells, Number, normaliser

_COLS = ["sample_id", "shift", "level", "correct"]


class Context:
    """What every builder needs: the store, the bootstrap's generator and resamples."""

    def __init__(self, store: Store, rng: np.random.Generator, n_resamples: int) -> None:
        self.store, self.rng, self.n_resamples = store, rng, n_resamples

    def cells(self, run_id: str, table: pd.DataFrame | None = None) -> ImageCells:
        ic = ImageCells()
        self.add_run(ic, "", run_id, table)
        return ic

    def add_run(
        self, ic: ImageCells, prefix: str, run_id: str, table: pd.DataFrame | None = None
    ) -> None:
        """Add a run's cells to ``ic``, read one shift at a time (in the order one query
        sorted by shift would give them, so the images keep the same order): a full
        ImageNet-C run is 3.8 M rows, whose string columns alone took about 1 GB read
        at once. ``table``: the run's cell table when the caller has read it already."""
        if table is None:
            table = self.store.cell_table([run_id])
        shifts = sorted({str(s) for s in table["shift"]})
        for shift in shifts:
            ic.add(prefix, self.store.shift_outcomes(run_id, shift), _cell_key)

    def number(self, ic: ImageCells, bench: str, metric: str, label: str, names, stat, **kw):
        value, lo, hi = ic.estimate(list(names), stat, self.rng, self.n_resamples)
        scale = 1.0 if kw.get("unit") == "score" else 100.0
        return Number(
            bench,
            metric,
            label,
            None if value is None else scale * value,
            None if lo is None else scale * lo,
            None if hi is None else scale * hi,
            ic.n_images(list(names)),
            **kw,
        )


def _cell_key(rows: pd.DataFrame) -> pd.Series:
    """``shift/level`` per row (one shift per read: the levels' categories renamed)."""
    (shift,) = rows["shift"].cat.categories
    return rows["level"].cat.rename_categories(lambda level: f"{shift}/{level}")


def _mean(acc: np.ndarray) -> np.ndarray:
    return np.nanmean(acc, axis=1)


def accuracy(ctx: Context, ic: ImageCells, bench: str, name: str, metric: str, label: str, **kw):
    """Top-1 accuracy of one column, in percent."""
    return ctx.number(ic, bench, metric, label, [name], lambda a: a[:, 0], **kw)


# ---------------------------------------------------------------------------- ImageNet-C
def imagenet_c(ctx: Context, run_id: str, baseline_run: tuple[str, str] | None) -> list[Number]:
    """Clean and mean corruption accuracy, then mCE and relative mCE against AlexNet, or
    against the baseline run, or the unnormalised mean error (:func:`normaliser`)."""
    from robustlab.metrics.mce import alexnet_cells
    from robustlab.shifts.corruptions import list_corruptions

    bench = "imagenet-c"
    table = ctx.store.cell_table([run_id])
    mode, why = normaliser(
        table,
        ctx.store.run_stats(run_id)["n_classes"],
        baseline_run[0] if baseline_run else None,
    )
    ic = ctx.cells(run_id, table)
    corr = [c for c in list_corruptions("common") if any(k.startswith(f"{c}/") for k in ic.columns)]
    levels = {c: [k for k in ic.columns if k.startswith(f"{c}/")] for c in corr}
    clean = f"{CLEAN}/0"
    out = [
        accuracy(ctx, ic, bench, clean, "clean_acc", "clean top-1", headline=True),
        ctx.number(ic, bench, "clean_error", "clean top-1 error", [clean], lambda a: 1.0 - a[:, 0]),
    ]
    shifted = [k for c in corr for k in levels[c]]
    out.append(
        ctx.number(
            ic,
            bench,
            "corruptions_acc",
            f"mean top-1 over {len(shifted)} corruption cells",
            shifted,
            _mean,
            headline=True,
        )
    )
    if mode == "baseline" and baseline_run is not None:
        ctx.add_run(ic, "base:", baseline_run[1])
        base_cols = [f"base:{k}" for k in shifted]
        missing = [k for k in [*base_cols, f"base:{clean}"] if k not in ic.columns]
        if missing:
            mode, why = "none", f"{why}; the baseline run lacks {missing[0][5:]}"
    names = [clean, *shifted]
    pos = {k: i for i, k in enumerate(names)}
    if mode == "alexnet":
        ref = alexnet_cells()
        base = {Cell(s, lv).folder: e for s, lv, e in zip(ref["shift"], ref["level"], ref["error"])}
        out += _ce_numbers(ctx, ic, bench, names, pos, corr, levels, lambda a, k: base[k], why)
    elif mode == "baseline" and baseline_run is not None:
        names += [f"base:{k}" for k in names]
        pos = {k: i for i, k in enumerate(names)}
        out += _ce_numbers(
            ctx,
            ic,
            bench,
            names,
            pos,
            corr,
            levels,
            lambda a, k: 1.0 - a[:, pos[f"base:{k}"]],
            why,
            suffix=f" vs {baseline_run[0]}",
        )
    else:
        out.append(
            ctx.number(
                ic,
                bench,
                "mean_error",
                f"mean top-1 error over {len(corr)} corruptions (unnormalised CE)",
                shifted,
                lambda a: 1.0 - _mean(a),
                headline=True,
                note=why,
            )
        )
    for c in corr:
        out.append(
            ctx.number(
                ic,
                bench,
                f"error:{c}",
                f"{c}: mean top-1 error",
                levels[c],
                lambda a: 1.0 - _mean(a),
            )
        )
    return out


def _ce_numbers(ctx, ic, bench, names, pos, corr, levels, base_err, why, suffix=""):
    """mCE and relative mCE (headline) and CE per corruption against ``base_err(acc, cell)``
    (an R-vector or a constant: the baseline's error on that cell)."""
    clean = f"{CLEAN}/0"

    def ce(a, c, relative):
        e = sum(1.0 - a[:, pos[k]] for k in levels[c])
        b = sum(base_err(a, k) for k in levels[c])
        if relative:
            e = e - len(levels[c]) * (1.0 - a[:, pos[clean]])
            b = b - len(levels[c]) * base_err(a, clean)
        with np.errstate(invalid="ignore", divide="ignore"):  # a baseline never wrong: NaN
            return e / b

    def mean_ce(relative):
        return lambda a: np.mean([ce(a, c, relative) for c in corr], axis=0)

    n = len(corr)
    out = [
        ctx.number(
            ic,
            bench,
            "mce" if not suffix else "mce_vs_baseline",
            f"mCE over {n} corruptions{suffix}",
            names,
            mean_ce(False),
            headline=True,
            note=why,
        ),
        ctx.number(
            ic,
            bench,
            "relative_mce" if not suffix else "relative_mce_vs_baseline",
            f"relative mCE{suffix}",
            names,
            mean_ce(True),
            headline=True,
            note=why,
        ),
    ]
    # the published per-corruption CE is AlexNet's; another normaliser gets another key
    key = "ce" if not suffix else "ce_vs_baseline"
    for c in corr:
        out.append(
            ctx.number(
                ic, bench, f"{key}:{c}", f"{c}: CE{suffix}", names, lambda a, c=c: ce(a, c, False)
            )
        )
    return out


# ------------------------------------------------------------------- XIMAGENET-12, IN-9
def ximagenet12(ctx: Context, run_id: str) -> list[Number]:
    """The robustness score from EX1 (the stored predictions of an ImageNet model are C(i)
    of every scenario; EX2 needs a model trained per scenario), and the scenarios' top-1."""
    from robustlab.metrics.scenes import robustness_score

    bench, clean = "ximagenet12", f"{CLEAN}/0"
    ic = ctx.cells(run_id)
    scen = [k for k in ic.columns if k != clean]

    def score(a):
        return np.array(
            [
                robustness_score(row[0], dict(zip(scen, row[1:]))).s_partial
                if np.all(np.isfinite(row))
                else np.nan
                for row in a
            ]
        )

    out = [
        accuracy(ctx, ic, bench, clean, "clean_acc", "original top-1", headline=True),
        ctx.number(
            ic,
            bench,
            "robustness_score_ex1",
            f"robustness score, EX1 part (1 - sigma2_cross over {len(scen)} scenario cells)",
            [clean, *scen],
            score,
            unit="score",
            headline=True,
            note="EX1 only: the published S_robust also subtracts EX2's variance (models "
            "fine-tuned per scenario), so it is at most this number",
        ),
    ]
    for k in scen:
        name = k.split("/")[0] if k.endswith("/default") else k
        out.append(accuracy(ctx, ic, bench, k, f"acc:{name}", f"{name} top-1"))
    return out


def imagenet9(ctx: Context, run_id: str) -> list[Number]:
    """Top-1 per variant, and the BG-gap acc(mixed_same) - acc(mixed_rand) over the
    images predicted in both (paired)."""
    bench, clean = "imagenet9", f"{CLEAN}/0"
    ic = ctx.cells(run_id)
    out = [
        accuracy(
            ctx,
            ic,
            bench,
            clean,
            "original_acc",
            "original top-1",
            headline=True,
            note="the photos of ImageNet-9's 370 classes, scored on its 9 superclasses",
        )
    ]
    same, rand = "mixed_same/default", "mixed_rand/default"
    if same in ic.columns and rand in ic.columns:
        ic.pair("pair:same", same, rand)
        ic.pair("pair:rand", rand, same)
    if "pair:same" in ic.columns and len(ic.columns["pair:same"][0]):
        out.append(
            ctx.number(
                ic,
                bench,
                "bg_gap",
                "BG-gap (mixed_same - mixed_rand, paired images)",
                ["pair:same", "pair:rand"],
                lambda a: a[:, 0] - a[:, 1],
                unit="points",
                headline=True,
            )
        )
    else:
        out.append(
            Number(
                bench,
                "bg_gap",
                "BG-gap (mixed_same - mixed_rand, paired images)",
                None,
                None,
                None,
                0,
                "points",
                True,
                "no image has both mixed_same and mixed_rand: mixed_same needs a second "
                "photo of the same class as a donor",
            )
        )
    for k in [k for k in ic.columns if "/" in k and k != clean]:
        name = k.split("/")[0]
        out.append(
            accuracy(
                ctx,
                ic,
                bench,
                k,
                f"{name}_acc",
                f"{name} top-1",
                headline=name in ("mixed_same", "mixed_rand"),
            )
        )
    return out


# ------------------------------------------------------------------- ImageNet-E, ImageNet-D
def imagenet_e(ctx: Context, run_id: str) -> list[Number]:
    """Mean drop per attribute: clean top-1 minus each level's top-1 on the same images
    (paired, as the report's edit tables), averaged over the attribute's levels."""
    bench, clean = "imagenet-e", f"{CLEAN}/0"
    ic = ctx.cells(run_id)
    cells = [k for k in list(ic.columns) if k != clean]
    out = [
        accuracy(ctx, ic, bench, clean, "clean_acc", "clean top-1 (256 px frame)", headline=True)
    ]
    by_attr: dict[str, list[str]] = {}
    for k in cells:
        by_attr.setdefault(k.split("/")[0], []).append(k)
    for attr, ks in by_attr.items():
        names = []
        for k in ks:
            ic.pair(f"clean|{k}", clean, k)
            names += [f"clean|{k}", k]
        out.append(
            ctx.number(
                ic,
                bench,
                f"drop:{attr}",
                f"{attr}: mean drop over {len(ks)} level(s)",
                names,
                lambda a: np.mean(a[:, 0::2] - a[:, 1::2], axis=1),
                unit="points",
                headline=True,
            )
        )
        for k in ks:
            out.append(accuracy(ctx, ic, bench, k, f"acc:{k}", f"{k} top-1"))
    return out


def imagenet_d(ctx: Context, run_id: str) -> list[Number]:
    """Top-1 per subset (the first folder of each image id) and over all images."""
    bench = "imagenet-d"
    rows = ctx.store.predictions([run_id], columns=_COLS)
    ic = ImageCells()
    ic.add("", rows, lambda r: r["sample_id"].astype(str).str.split("/").str[0])
    ic.add("", rows, lambda r: pd.Series("all", index=r.index))
    return [
        accuracy(ctx, ic, bench, k, f"acc:{k}", f"{k} top-1", headline=True) for k in ic.columns
    ]
