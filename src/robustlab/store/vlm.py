"""VLM answers in the results database (an additive table).

``vlm_answers`` holds one row per (run, image): the options in the order asked, the
answer (free text, or the chosen option in likelihood mode), the option it chose, whether
that is the truth, why it was dropped ("both" / "neither") and, in likelihood mode, each
option's log-likelihood. The run itself is an ordinary ``runs`` row with
``config["task"] == "vlm"``. The table is created on the first write, so older databases
read as having no VLM answers.
"""

from __future__ import annotations

from robustlab.store.connection import has_table

VLM_TASK = "vlm"
VLM_DDL = """
    CREATE TABLE IF NOT EXISTS vlm_answers (
        run_id VARCHAR NOT NULL,
        subset VARCHAR NOT NULL,
        image_id VARCHAR NOT NULL,
        gt VARCHAR NOT NULL,
        distractor VARCHAR NOT NULL,
        options VARCHAR[] NOT NULL,
        answer VARCHAR,
        chosen VARCHAR,
        correct BOOLEAN,
        dropped VARCHAR,
        logprobs DOUBLE[],
        seed UBIGINT,
        PRIMARY KEY (run_id, image_id)
    )
"""
VLM_COLUMNS = (
    "run_id",
    "subset",
    "image_id",
    "gt",
    "distractor",
    "options",
    "answer",
    "chosen",
    "correct",
    "dropped",
    "logprobs",
    "seed",
)


def _has(con) -> bool:
    return has_table(con, "vlm_answers")


def write_answers(store, rows: list[dict]) -> int:
    """Insert answers (dicts with :data:`VLM_COLUMNS`) in one transaction; stored
    (run, image) keys are left untouched, so a resumed run never duplicates them."""
    import pyarrow as pa

    if not rows:
        return 0
    table = pa.table(
        {
            **{
                c: pa.array([r[c] for r in rows], pa.string())
                for c in (
                    "run_id",
                    "subset",
                    "image_id",
                    "gt",
                    "distractor",
                    "answer",
                    "chosen",
                    "dropped",
                )
            },
            "options": pa.array([list(r["options"]) for r in rows], pa.list_(pa.string())),
            "correct": pa.array([r["correct"] for r in rows], pa.bool_()),
            "logprobs": pa.array([r["logprobs"] for r in rows], pa.list_(pa.float64())),
            "seed": pa.array([r["seed"] for r in rows], pa.uint64()),
        }
    )
    with store.connect() as con:
        con.execute(VLM_DDL)
    store._insert_batch("vlm_answers", VLM_COLUMNS, table)
    return len(rows)


def answered(store, run_id: str) -> set[str]:
    """Image ids already answered in ``run_id`` (resume)."""
    if not store.exists():
        return set()
    with store.connect(read_only=True) as con:
        if not _has(con):
            return set()
        rows = con.execute("SELECT image_id FROM vlm_answers WHERE run_id = ?", [run_id]).fetchall()
    return {r[0] for r in rows}


def answers(store, run_ids=None):
    """The ``vlm_answers`` rows (of some runs, or all) as a DataFrame; empty if none."""
    import pandas as pd

    empty = pd.DataFrame(columns=list(VLM_COLUMNS))
    if not store.exists():
        return empty
    run_ids = None if run_ids is None else list(run_ids)
    with store.connect(read_only=True) as con:
        if not _has(con):
            return empty
        where = (
            ""
            if run_ids is None
            else f"WHERE run_id IN ({', '.join('?' for _ in run_ids)})"
            if run_ids
            else "WHERE FALSE"
        )
        return con.execute(
            f"SELECT {', '.join(VLM_COLUMNS)} FROM vlm_answers {where} "
            "ORDER BY run_id, subset, image_id",
            run_ids or [],
        ).df()


def summary(store, run_id: str):
    """Per subset: n, right, wrong, dropped (both / neither) and accuracy =
    right / (right + wrong) (NaN when every answer was dropped)."""
    import pandas as pd

    df = answers(store, [run_id])
    rows = []
    for subset, g in df.groupby("subset", sort=True):
        # A dropped answer's NULL reads as None or NA: neither right nor wrong.
        known = [bool(v) for v in g["correct"] if v is not None and not pd.isna(v)]
        right, wrong = sum(known), len(known) - sum(known)
        rows.append(
            {
                "subset": subset,
                "n": len(g),
                "right": right,
                "wrong": wrong,
                "dropped_both": int((g["dropped"] == "both").sum()),
                "dropped_neither": int((g["dropped"] == "neither").sum()),
                "accuracy": right / (right + wrong) if right + wrong else float("nan"),
            }
        )
    return pd.DataFrame(
        rows,
        columns=["subset", "n", "right", "wrong", "dropped_both", "dropped_neither", "accuracy"],
    )
