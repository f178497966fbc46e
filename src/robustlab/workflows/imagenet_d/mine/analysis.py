"""The two claims of ImageNet-D's mining, as numbers from a candidate table.

1. **More surrogates, harder set** (the "levels off after about 4" curve): with n of the
   available surrogates, the kept fraction (candidates all n get wrong) and a held-out
   model's accuracy on the kept set. Every n-subset of the surrogates is used and the
   numbers averaged, so the curve does not depend on an arbitrary model order.
2. **Transfer**: a held-out model's accuracy on the mined set against random subsets of
   the same candidates, of the same size. If shared failures of the surrogates are
   failures of the images (not of those models), the held-out model does worse on the
   mined set than on random draws; the share of random draws at or below the mined
   accuracy is a one-sided permutation p-value.

Inputs are boolean correctness matrices (candidates x models) from the stored
predictions (:func:`robustlab.workflows.imagenet_d.mine.core.candidate_table`); nothing here runs a model.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def surrogate_curve(
    correct: np.ndarray, heldout: np.ndarray | None, *, k_of_n: str = "all"
) -> list[dict]:
    """Kept fraction and held-out accuracy on the kept set for n = 1..M surrogates.

    Args:
        correct: Bool (N candidates, M surrogates): surrogate j right on candidate i.
        heldout: Bool (N,): the held-out model right on candidate i (None: kept fractions
            only, the accuracies are NaN).
        k_of_n: ``"all"`` (keep when all n are wrong) or ``"majority"`` (more than half).

    Returns:
        One dict per n: n, subsets (how many n-subsets were averaged), kept_fraction,
        kept (mean kept count), heldout_acc (mean over subsets with a non-empty kept set,
        NaN if none), heldout_acc_all (the held-out model on every candidate).
    """
    correct = np.asarray(correct, bool)
    no_heldout = heldout is None
    heldout = np.zeros(correct.shape[0], bool) if no_heldout else np.asarray(heldout, bool)
    if correct.ndim != 2 or correct.shape[0] != heldout.shape[0]:
        raise ValueError("correct must be (N, M) and heldout (N,)")
    m = correct.shape[1]
    rows = []
    for n in range(1, m + 1):
        fracs, accs, counts = [], [], []
        for subset in itertools.combinations(range(m), n):
            wrong = (~correct[:, list(subset)]).sum(axis=1)
            need = n if k_of_n == "all" else n // 2 + 1
            kept = wrong >= need
            fracs.append(kept.mean())
            counts.append(kept.sum())
            if kept.any() and not no_heldout:
                accs.append(heldout[kept].mean())
        rows.append(
            {
                "n": n,
                "subsets": len(fracs),
                "kept_fraction": float(np.mean(fracs)),
                "kept": float(np.mean(counts)),
                "heldout_acc": float(np.mean(accs)) if accs else float("nan"),
                "heldout_acc_all": float("nan") if no_heldout else float(heldout.mean()),
            }
        )
    return rows


def transfer(
    kept: np.ndarray,
    heldout: np.ndarray,
    *,
    draws: int = 2000,
    rng: np.random.Generator | int = 0,
    pool: np.ndarray | None = None,
) -> dict:
    """A held-out model's accuracy on the mined set vs random subsets of the same size.

    Args:
        kept: Bool (N,): candidate mined.
        heldout: Bool (N,): held-out model right.
        draws: Random subsets drawn (without replacement within a subset).
        rng: Generator or seed.
        pool: Bool (N,) candidates random subsets are drawn from (default all).

    Returns:
        dict with n_mined, mined_acc, random_mean, random_lo / random_hi (2.5 / 97.5
        percentiles), p_value (share of random subsets with accuracy <= the mined one,
        counting the mined set itself), draws.
    """
    kept = np.asarray(kept, bool)
    heldout = np.asarray(heldout, bool)
    pool_idx = np.flatnonzero(np.ones_like(kept) if pool is None else np.asarray(pool, bool))
    size = int(kept.sum())
    if size == 0 or size > len(pool_idx):
        raise ValueError(
            f"cannot compare a mined set of {size} with random subsets of {len(pool_idx)}"
        )
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    mined = float(heldout[kept].mean())
    accs = np.empty(draws)
    for d in range(draws):
        accs[d] = heldout[gen.choice(pool_idx, size=size, replace=False)].mean()
    return {
        "n_mined": size,
        "mined_acc": mined,
        "random_mean": float(accs.mean()),
        "random_lo": float(np.percentile(accs, 2.5)),
        "random_hi": float(np.percentile(accs, 97.5)),
        "p_value": float((1 + np.sum(accs <= mined)) / (draws + 1)),
        "draws": int(draws),
    }


def leave_one_out(
    correct: np.ndarray, names: Sequence[str], *, draws: int = 2000, seed: int = 0
) -> list[dict]:
    """Each model held out in turn, the others as surrogates ("all wrong"): transfer and curve.

    Returns:
        One dict per held-out model: heldout (name), surrogates (names), curve
        (:func:`surrogate_curve` rows) and transfer (:func:`transfer`, None when the mined
        set is empty).
    """
    correct = np.asarray(correct, bool)
    out = []
    for j, name in enumerate(names):
        others = [i for i in range(correct.shape[1]) if i != j]
        sur = correct[:, others]
        kept = ~sur.any(axis=1)
        out.append(
            {
                "heldout": name,
                "surrogates": [names[i] for i in others],
                "curve": surrogate_curve(sur, correct[:, j]),
                "transfer": transfer(kept, correct[:, j], draws=draws, rng=seed)
                if kept.any()
                else None,
            }
        )
    return out


def stored_correctness(
    store, run_ids: Sequence[str], names: Sequence[str], *, include_clean: bool = False
):
    """(candidate table, bool matrix candidates x models) from stored runs of the models.

    Several run ids per model (a list of lists) are stacked, so one pool can come from
    several folders (say an ImageNet-C folder and a background-scenario folder).
    """
    import pandas as pd

    from robustlab.workflows.imagenet_d.mine.core import candidate_table

    groups = [list(r) if isinstance(r, (list, tuple)) else [r] for r in run_ids]
    tables = []
    for part in zip(*groups):
        t, _ = candidate_table(store, list(part), list(names), include_clean=include_clean)
        tables.append(t)
    table = pd.concat(tables, ignore_index=True)
    return table, np.stack([table[f"{n}_correct"].to_numpy(bool) for n in names], axis=1)


__all__ = ["surrogate_curve", "transfer", "leave_one_out", "stored_correctness"]
