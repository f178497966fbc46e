"""The records that generate, synth and mine write into their folders stay byte for byte
what they were (times, ids, hosts, paths and library versions aside).

``tests/fixtures/folder_manifests`` holds what the code wrote at the commit before the
folder run-record was factored out of the three workflows (``python
tests/test_folder_manifests.py`` rewrote it then; rewriting it is a deliberate change of
every folder's record and must say so in its commit). Each scenario runs twice into one
folder, the second run adding cells or images, so the runs list, the merged counts and the
skipped inputs are covered too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parent / "fixtures" / "folder_manifests"
# Keys whose values differ from run to run or machine to machine (not what a folder *is*).
VOLATILE = {
    "started_at",
    "finished_at",
    "created_at",
    "updated_at",
    "host",
    "pid",
    "seconds",
    "versions",
    "fingerprint",
    "checkpoint_fingerprint",
    "mining_id",
    "run_ids",
    "scheduler_config",  # diffusers' defaults, which grow with its version
}


def normalised(raw: bytes, tmp: Path) -> str:
    """The record with volatile values and temp paths masked, in its own byte format: the
    file must be exactly ``json.dumps(..., indent=2)`` plus a newline, so re-dumping the
    masked data compares key order, spacing and values."""
    text = raw.decode()
    data = json.loads(text)
    assert text == json.dumps(data, indent=2) + "\n", "not the records' JSON format"

    def mask(x):
        if isinstance(x, dict):
            run = "started_at" in x  # a run's entry: its id is drawn afresh
            return {
                k: ("<volatile>" if k in VOLATILE or (run and k == "id") else mask(v))
                for k, v in x.items()
            }
        if isinstance(x, list):
            return [mask(v) for v in x]
        if isinstance(x, str):
            return x.replace(str(tmp.resolve()), "<tmp>").replace(str(tmp), "<tmp>")
        return x

    return json.dumps(mask(data), indent=2) + "\n"


def _generate(tmp: Path) -> dict[str, bytes]:
    from robustlab.workflows.demo import materialise
    from robustlab.workflows.generate import generate

    data, _ = materialise(tmp / "demo")
    first = sorted(p for p in data.rglob("*") if p.is_file())[0]
    (first.parent / "broken.jpg").write_bytes(b"not an image")  # a counted skipped input
    out = tmp / "gen"
    kw = dict(seed=3, workers=0, progress=False, limit=4)
    generate("imagenet-c", data, out, shifts=["contrast"], levels=[1], **kw)
    generate("imagenet-c", data, out, shifts=["contrast", "gaussian_noise"], levels="1-2", **kw)
    return {"generate.json": (out / "manifest.json").read_bytes()}


def _synth(tmp: Path) -> dict[str, bytes]:
    from conftest import save_tiny_text2image

    from robustlab.shifts.generative.text2image import TextToImage
    from robustlab.workflows.imagenet_d.synth.run import synth

    ckpt = save_tiny_text2image(tmp / "tiny-sd")
    pipe = TextToImage(ckpt, device="cpu")
    out = tmp / "synth"
    kw = dict(
        classes=["backpack"], max_nuisances=1, seed=5, steps=1, height=32, width=32, pipeline=pipe
    )
    synth(out, ckpt, nuisances=["background"], **kw)
    synth(out, ckpt, nuisances=["background", "texture"], per_pair=2, batch_size=2, **kw)
    return {
        "synth.json": (out / "manifest.json").read_bytes(),
        "synth-prompts.csv": (out / "prompts.csv").read_bytes(),
        "synth-labels.csv": (out / "labels.csv").read_bytes(),
    }


def _mine(tmp: Path) -> dict[str, bytes]:
    from robustlab.workflows.demo import materialise
    from robustlab.workflows.imagenet_d.mine import mine

    data, _ = materialise(tmp / "demo-mine")
    res = mine(
        data,
        surrogates=["lite0"],
        label_space="demo",
        db=tmp / "r.duckdb",
        out=tmp / "hard",
        workers=0,
        progress=False,
    )
    record = json.loads((tmp / "hard" / "mining.json").read_text())
    assert (record["mining_id"], record["run_ids"]) == (res.mining_id, res.run_ids)
    return {
        "mining.json": (tmp / "hard" / "mining.json").read_bytes(),
        "mining-labels.csv": (tmp / "hard" / "labels.csv").read_bytes(),
    }


SCENARIOS = {"generate": _generate, "synth": _synth, "mine": _mine}


@pytest.mark.parametrize(
    "name",
    # synth and mine are slow (a diffusers pipeline; a surrogate's evaluation, ~10 s each)
    [
        "generate",
        pytest.param("mine", marks=pytest.mark.slow),
        pytest.param("synth", marks=pytest.mark.slow),
    ],
)
def test_folder_records_are_byte_for_byte_the_same(name, tmp_path):
    for file, raw in SCENARIOS[name](tmp_path).items():
        golden = (GOLDEN / file).read_text()
        if file.endswith(".json"):
            assert normalised(raw, tmp_path) == golden, file
        else:
            assert raw.decode() == golden, file


if __name__ == "__main__":  # rewrite the golden files (a deliberate change: say so)
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIOS.values():
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for file, raw in scenario(tmp).items():
                text = normalised(raw, tmp) if file.endswith(".json") else raw.decode()
                (GOLDEN / file).write_text(text)
