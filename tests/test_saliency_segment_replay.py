"""Saliency and segment runs keep their ids and rows (issue 23, items 1 and 9).

``tests/fixtures/masked_runs/runs.json`` was written by ``make.py`` beside it, with the code
before saliency and segment shared their run scaffolding: a tiny saliency run (real lite0,
Grad-CAM) and a tiny segment run (lraspp, random weights from a fixed torch seed) on the
two replay photos with elliptic masks. The current code must give each the same run id,
the same ``runs`` row and the same stored rows, so databases written before resume.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent / "fixtures" / "masked_runs"
# The fixture's own builder (same photos, masks, weights and calls), under a name of its own.
_spec = importlib.util.spec_from_file_location("masked_runs_make", HERE / "make.py")
assert _spec is not None and _spec.loader is not None
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)

RECORD = json.loads((HERE / "runs.json").read_text())


def _same_rows(got: list[dict], want: list[dict]) -> None:
    """Same keys and values; floats to 1e-5 and map thumbnails to 1 grey level (another
    CPU may round otherwise)."""
    assert len(got) == len(want) > 0
    key = lambda r: (r["sample_id"], r["shift"], r["level"])  # noqa: E731
    for g, w in zip(sorted(got, key=key), sorted(want, key=key)):
        assert g.keys() == w.keys(), key(w)
        for k, v in w.items():
            if k == "map":
                a = np.frombuffer(bytes.fromhex(g[k]), np.uint8).astype(int)
                b = np.frombuffer(bytes.fromhex(v), np.uint8).astype(int)
                assert a.shape == b.shape and np.abs(a - b).max() <= 1, key(w)
            elif isinstance(v, float):
                assert g[k] == pytest.approx(v, abs=1e-5, nan_ok=True), (key(w), k)
            else:
                assert g[k] == v, (key(w), k)


def test_saliency_run_keeps_its_id_record_and_rows(tmp_path):
    pytest.importorskip("pytorch_grad_cam", reason="pip install 'robustlab[saliency]'")
    want = RECORD["saliency"]
    got = make.run_saliency(tmp_path / "s.duckdb")
    assert got["run_id"] == want["run_id"]
    assert got["run"] == want["run"]
    _same_rows(got["rows"], want["rows"])


def test_segment_run_keeps_its_id_record_and_rows(tmp_path):
    want = RECORD["segment"]
    got = make.run_segment(tmp_path / "g.duckdb", make.segment_weights(tmp_path))
    assert got["run_id"] == want["run_id"]
    assert got["run"] == want["run"]
    _same_rows(got["rows"], want["rows"])
