"""The runs table: a run's row from its start to its end, and what was stored for it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


from robustlab.store.connection import Database, in_clause, utcnow
from robustlab.store.schema import (
    RUN_COLUMNS,
    RunRecord,
)


class RunsTable(Database):
    """Operations on the ``runs`` table (part of :class:`robustlab.store.Store`)."""

    def start_run(self, record: RunRecord) -> bool:
        """Insert the run, or mark an existing run with the same id as running again.

        Returns:
            True when the run id was new, False when this resumes an earlier run (whose
            ``started_at`` is kept).
        """
        from robustlab.records.manifest import this_process

        record.started_at = record.started_at or utcnow()
        # Who runs it, so that a later run can tell a killed one (kill -9, the OOM killer).
        record.config = {**record.config, "process": this_process()}
        with self.connect() as con:
            _mark_dead_runs(con, record.run_id)
            exists = con.execute(
                "SELECT config FROM runs WHERE run_id = ?", [record.run_id]
            ).fetchone()
            if exists:
                # The notes of earlier sessions stay: their samples are not decoded again.
                old = json.loads(exists[0]) if exists[0] else {}
                config = dict(record.config)
                if old.get("notes"):
                    config["notes"] = old["notes"]
                # The same content read from another folder (a mined subset of hard links,
                # a moved copy) is the same run; its description and its data folder are
                # this session's together, never one folder's CSV beside another's root.
                con.execute(
                    "UPDATE runs SET status = 'running', finished_at = NULL, config = ?, "
                    "data_root = ? WHERE run_id = ?",
                    [
                        json.dumps(config, sort_keys=True, default=str),
                        record.data_root,
                        record.run_id,
                    ],
                )
                return False
            placeholders = ", ".join("?" for _ in RUN_COLUMNS)
            con.execute(
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({placeholders})",
                record.as_row(),
            )
            return True

    def finish_run(
        self,
        run_id: str,
        *,
        status: str,
        n_samples: int | None = None,
        skipped: Sequence[Any] | None = None,
        notes: dict[str, str] | None = None,
    ) -> dict[str, str]:
        """Record the end state of a run (``finished``, ``interrupted`` or ``failed``).

        ``notes`` (sample id -> why it is degenerate: evaluated, counted, but e.g. a 5x5
        image) join those of the run's earlier sessions in ``config["notes"]``; a resumed
        session does not decode the samples already done, so the record keeps them.

        Returns:
            Every note of the run.
        """
        sets, params = ["status = ?", "finished_at = ?"], [status, utcnow()]
        if n_samples is not None:
            sets.append("n_samples = ?")
            params.append(int(n_samples))
        if skipped is not None:
            # ``skipped`` rows are [sample_id, reason]; a sample can fail in several cells.
            n_skipped = len(
                {str(s[0]) if isinstance(s, (list, tuple)) else str(s) for s in skipped}
            )
            sets += ["n_skipped = ?", "skipped = ?"]
            params += [n_skipped, json.dumps(list(skipped), default=str)]
        with self.connect() as con:
            row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
            config = json.loads(row[0]) if row and row[0] else {}
            merged = {**(config.get("notes") or {}), **(notes or {})}
            if notes:
                config["notes"] = dict(sorted(merged.items()))
                sets.append("config = ?")
                params.append(json.dumps(config, sort_keys=True, default=str))
            con.execute(f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ?", [*params, run_id])
        return merged

    def runs(self, run_ids: Iterable[str] | None = None):
        """The ``runs`` table as a DataFrame (JSON columns decoded), oldest first."""
        import pandas as pd

        if not self.exists():
            return pd.DataFrame(columns=list(RUN_COLUMNS))
        where, params = in_clause("run_id", run_ids)
        with self.connect(read_only=True) as con:
            df = con.execute(f"SELECT * FROM runs {where} ORDER BY started_at, run_id", params).df()
        for c in ("preprocessing", "versions", "config", "skipped"):
            df[c] = [json.loads(v) if isinstance(v, str) else v for v in df[c]]
        return df

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        df = self.runs([run_id])
        return None if df.empty else df.iloc[0].to_dict()

    def run_stats(self, run_id: str) -> dict[str, int]:
        """Distinct samples and labels stored for a run's clean cell (baseline checks), or
        over all its cells when it has none (a downloaded ImageNet-C publishes no clean
        images, yet its 50,000 x 1,000 cells are what the AlexNet constants were made on)."""
        with self.connect(read_only=True) as con:
            n, k = con.execute(
                "SELECT count(DISTINCT sample_id), count(DISTINCT label) FROM predictions "
                "WHERE run_id = ? AND (shift = 'clean' OR NOT EXISTS ("
                "SELECT 1 FROM predictions WHERE run_id = ? AND shift = 'clean'))",
                [run_id, run_id],
            ).fetchone()
        return {"n_samples": int(n), "n_classes": int(k)}


def _mark_dead_runs(con, run_id: str) -> None:
    """Runs other than ``run_id`` still ``running`` although the process that started them
    on this host is gone (``kill -9``, power loss, the OOM killer) are marked ``killed``, as
    generate and synth mark theirs: a run never stays ``running`` for ever."""
    from robustlab.records.manifest import mark_dead_runs

    rows = con.execute(
        "SELECT run_id, config FROM runs WHERE status = 'running' AND run_id <> ?", [run_id]
    ).fetchall()
    for rid, config in rows:
        try:
            process = (json.loads(config) if config else {}).get("process") or {}
        except ValueError:
            continue
        run = {"status": "running", "host": process.get("host"), "pid": process.get("pid")}
        if mark_dead_runs([run])[0]["status"] == "killed":
            con.execute("UPDATE runs SET status = 'killed' WHERE run_id = ?", [rid])
