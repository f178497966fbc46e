"""Compact aggregates of the predictions table, computed in DuckDB.

``robustlab results`` and ``robustlab report`` must hold many full runs (one ImageNet-C run
is 50,000 images x 76 cells = 3.8 M rows), so they never read the predictions table into
pandas: every number they show is a function of counts per cell, per class or per image,
which these queries return. Each result is small whatever the number of rows: one row per
cell, per (cell, class) or per image of one run, never one per prediction.

The metrics functions that take a predictions DataFrame (for a Python caller's own rows)
reduce them to the same counts first and share the code that turns counts into numbers, so
both paths give the same floats and bootstrap draws (tests/test_store_scale.py compares
them; the report's page is the one the row-based code wrote, tests/test_report_same_html.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from robustlab.store.connection import Database, in_clause
from robustlab.store.schema import CLEAN_SHIFT


@dataclass(frozen=True)
class ImageCounts:
    """One run's per-image counts (:meth:`AggregateQueries.image_counts`).

    Attributes:
        ids: Sample ids, sorted.
        right: Right predictions over each image's shifted cells.
        n: Predictions over each image's shifted cells (0: the image has only clean ones).
    """

    ids: np.ndarray
    right: np.ndarray
    n: np.ndarray

    def shifted(self) -> np.ndarray:
        """(right, predictions) rows of the images with a shifted prediction: what the
        per-image bootstrap of pooled shifted accuracy resamples."""
        keep = self.n > 0
        return np.stack([self.right[keep], self.n[keep]], axis=1).reshape(-1, 2)


def and_where(condition: str, where: str) -> str:
    """``WHERE condition`` joined with an :func:`in_clause` (which may be empty)."""
    rest = where.removeprefix("WHERE ").strip()
    return f"WHERE {condition}" + (f" AND {rest}" if rest else "")


class AggregateQueries(Database):
    """Aggregates of ``predictions`` (part of :class:`robustlab.store.Store`)."""

    def distinct_images(self, run_ids: Iterable[str] | None = None) -> dict[str, int]:
        """Run id -> number of distinct images with at least one prediction."""
        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            rows = con.execute(
                f"SELECT run_id, count(DISTINCT sample_id) FROM predictions {where} "
                "GROUP BY run_id",
                params,
            ).fetchall()
        return {str(r): int(n) for r, n in rows}

    def image_counts(self, run_id: str) -> ImageCounts:
        """Per image of ``run_id`` (sample-id order): its id, and over its shifted
        (non-clean) cells the right predictions and the predictions.

        The per-image bootstrap of pooled shifted accuracy resamples these (an image's
        cells together): 50,000 x 2 numbers for a full run instead of 3.8 M rows; the ids
        count the run's images.
        """
        with self.connect(read_only=True) as con:
            got = con.execute(
                "SELECT sample_id, coalesce(sum(correct::INTEGER) FILTER (shift <> ?), 0) AS k, "
                "count(*) FILTER (shift <> ?) AS n FROM predictions WHERE run_id = ? "
                "GROUP BY sample_id ORDER BY sample_id",
                [CLEAN_SHIFT, CLEAN_SHIFT, run_id],
            ).fetchnumpy()
        return ImageCounts(
            np.asarray(got["sample_id"], dtype=object),
            np.asarray(got["k"], dtype=np.float64),
            np.asarray(got["n"], dtype=np.float64),
        )

    def cell_and_class_counts(self, run_ids: Iterable[str]):
        """Counts per cell and per class of the same runs, in one pass over their rows
        (GROUPING SETS): ``(cells, classes)``. ``cells`` is :meth:`cell_table`; ``classes``
        has one row per run, cell (shift and level), label and class name: ``run_id``,
        ``shift``, ``level``, ``label``, ``class_name``, ``n``, ``n_correct``,
        ``n_correct5`` (a missing label stays missing; the caller decides whether it
        counts), sorted. A caller that pools a shift's levels sums them
        (:func:`pool_levels`); the report keeps named variants (random_bg's add and
        paste) apart."""
        from robustlab.metrics.accuracy import add_rates, sort_cells

        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            both = con.execute(
                "SELECT grouping(label) = 1 AS per_cell, run_id, shift, level, label, "
                "class_name, count(*) AS n, sum(correct::INTEGER) AS n_correct, "
                f"sum(correct5::INTEGER) AS n_correct5 FROM predictions {where} "
                "GROUP BY GROUPING SETS ((run_id, shift, level), "
                "(run_id, shift, level, label, class_name))",
                params,
            ).df()
        per_cell = both["per_cell"].astype(bool)
        cols = ["n", "n_correct", "n_correct5"]
        cells = both.loc[per_cell, ["run_id", "shift", "level", *cols]].reset_index(drop=True)
        classes = both.loc[~per_cell, ["run_id", "shift", "level", "label", "class_name", *cols]]
        classes = classes.sort_values(
            ["run_id", "shift", "level", "label", "class_name"], kind="stable"
        )
        return sort_cells(add_rates(cells)), classes.reset_index(drop=True)

    def clean_of_cells(self, run_ids: Iterable[str]):
        """Per shifted cell, the clean predictions of the same images: ``run_id``,
        ``shift``, ``level``, ``n_paired`` (images of the cell with a clean prediction),
        ``n_clean_correct`` (of those, right when clean). A paired drop compares a cell
        with the clean accuracy of exactly its images."""
        ids = list(run_ids)
        where, params = in_clause("c.run_id", ids)
        with self.connect(read_only=True) as con:
            return con.execute(
                "SELECT s.run_id, s.shift, s.level, count(*) AS n_paired, "
                "sum(c.correct::INTEGER) AS n_clean_correct "
                "FROM predictions s JOIN predictions c "
                "ON c.run_id = s.run_id AND c.sample_id = s.sample_id AND c.shift = ? "
                f"{and_where('s.shift <> ?', where)} GROUP BY s.run_id, s.shift, s.level",
                [CLEAN_SHIFT, CLEAN_SHIFT, *params],
            ).df()

    def clean_by_folder(self, run_ids: Iterable[str]):
        """Clean predictions per run and first part of the sample id up to a ``/`` (the
        folder; ImageNet-D's subsets): ``run_id``, ``folder``, ``n``, ``n_correct``, sorted
        by run and folder."""
        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            return con.execute(
                "SELECT run_id, split_part(sample_id, '/', 1) AS folder, count(*) AS n, "
                "sum(correct::INTEGER) AS n_correct FROM predictions "
                f"{and_where('shift = ?', where)} GROUP BY ALL ORDER BY run_id, folder",
                [CLEAN_SHIFT, *params],
            ).df()

    def paired_counts(self, run_a: str, run_b: str):
        """Two runs joined on (shift, level, sample id), reduced to counts.

        Returns:
            (cells, per_image): ``cells`` has one row per cell either run holds with
            ``shift``, ``level``, ``n_a``, ``n_b``, ``n_shared``, ``k_a``, ``k_b`` (right
            among the shared images), ``n_down``, ``n_same``, ``n_up`` (shared images where
            B - A is -1, 0, 1); ``per_image`` is, per shared image in sample-id order, the
            sum of B - A over its shared shifted cells and their number (float rows).
        """
        with self.connect(read_only=True) as con:
            sizes = con.execute(
                "SELECT shift, level, count(*) FILTER (run_id = $1) AS n_a, "
                "count(*) FILTER (run_id = $2) AS n_b FROM predictions "
                "WHERE run_id IN ($1, $2) GROUP BY shift, level",
                [run_a, run_b],
            ).df()
            # One join, grouped two ways: per cell, and per image over the shifted cells.
            # (The two runs' rows are read once each; a 3.8 M-row run joins in ~0.6 GB.)
            joined = con.execute(
                "WITH a AS (SELECT shift, level, sample_id, correct::INTEGER AS c "
                "FROM predictions WHERE run_id = $1), "
                "b AS (SELECT shift, level, sample_id, correct::INTEGER AS c "
                "FROM predictions WHERE run_id = $2) "
                "SELECT grouping(shift, level) = 0 AS per_cell, shift, level, sample_id, "
                "count(*) AS n_shared, sum(a.c) AS k_a, sum(b.c) AS k_b, "
                "count(*) FILTER (b.c - a.c = -1) AS n_down, "
                "count(*) FILTER (b.c = a.c) AS n_same, "
                "count(*) FILTER (b.c - a.c = 1) AS n_up, "
                "sum(b.c - a.c) FILTER (shift <> $3) AS d_shifted, "
                "count(*) FILTER (shift <> $3) AS n_shifted "
                "FROM a JOIN b USING (shift, level, sample_id) "
                "GROUP BY GROUPING SETS ((shift, level), (sample_id))",
                [run_a, run_b, CLEAN_SHIFT],
            ).df()
        per_cell = joined[joined["per_cell"].astype(bool)]
        cells = sizes.merge(
            per_cell[["shift", "level", "n_shared", "k_a", "k_b", "n_down", "n_same", "n_up"]],
            on=["shift", "level"],
            how="left",
        )
        for c in cells.columns[2:]:
            cells[c] = cells[c].fillna(0).astype("int64")
        images = joined[~joined["per_cell"].astype(bool) & (joined["n_shifted"] > 0)]
        images = images.sort_values("sample_id", kind="stable")
        per_image = images[["d_shifted", "n_shifted"]].to_numpy(np.float64).reshape(-1, 2)
        return cells, per_image


def pool_levels(classes):
    """Per-class counts with each shift's levels summed: one row per run, shift, label and
    class name (what the regression fits read), sorted as before levels were kept."""
    keys = ["run_id", "shift", "label", "class_name"]
    return (
        classes.groupby(keys, sort=True, dropna=False)[["n", "n_correct", "n_correct5"]]
        .sum()
        .reset_index()
    )
