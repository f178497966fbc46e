"""User-caused conditions end in one line and exit 2 or 3, never an internal-error
traceback (exit 70): weights files holding pickled code, a full disk under the results
database, a malformed request to the review API."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _runs_helpers as h  # noqa: E402


class _Touch:
    """Unpickling this runs code: it creates ``path``. A safe loader never does."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def _malicious(path: Path, marker: Path) -> Path:
    import torch

    torch.save({"weight": torch.zeros(2), "payload": _Touch(marker)}, path)
    return path


def _assert_refused(code: int, err: str, marker: Path) -> None:
    line = h.assert_user_error(code, err, codes=(2,), contains="pickled Python objects")
    assert not marker.exists(), "the file's code ran"
    # PyTorch's own advice to load it anyway runs the code: never repeated.
    assert "weights_only" not in err and "likely succeed" not in err, err
    assert line.count("\n") == 0


@pytest.mark.parametrize("model", ["lite0", "timm:resnet18", "torchvision:resnet18"])
def test_weights_with_pickled_code_are_refused_in_one_line(tmp_path, capsys, model):
    data = h.flat_folder(tmp_path / "data", 1)
    marker = tmp_path / "code-ran"
    bad = _malicious(tmp_path / "bad.pt", marker)
    code, _, err = h.cli(
        capsys, "evaluate", model, "--weights", bad, "--data", data, "--db",
        tmp_path / "r.duckdb", "--workers", "0", "--no-progress",
    )  # fmt: skip
    _assert_refused(code, err, marker)


def test_hf_folder_with_pickled_code_is_refused_in_one_line(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "hf-model"
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8], depths=[1], num_labels=1000
    )
    config.save_pretrained(folder)
    marker = tmp_path / "code-ran"
    _malicious(folder / "pytorch_model.bin", marker)
    data = h.flat_folder(tmp_path / "data", 1)
    code, _, err = h.cli(
        capsys, "evaluate", f"hf:{folder}", "--data", data, "--db", tmp_path / "r.duckdb",
        "--workers", "0", "--no-progress",
    )  # fmt: skip
    _assert_refused(code, err, marker)


@pytest.fixture
def small_disk(tmp_path):
    """A 24 KiB tmpfs: room for an empty results database, not for a run's predictions.

    A real full disk (ENOSPC from the kernel), not a simulation; needs the right to mount
    (root in this container). Skipped with the reason where mounting is not allowed.
    """
    where = tmp_path / "small-disk"
    where.mkdir()
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount command to make a small tmpfs")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def test_full_disk_under_the_database_is_one_line(tmp_path, capsys, caplog, small_disk):
    data = h.flat_folder(tmp_path / "data", 3)
    code, _, err = h.cli(
        capsys, "evaluate", "lite0", "--data", data, "--db", small_disk / "r.duckdb",
        "--suite", "imagenet-c", "--shift", "brightness,contrast", "--batch-size", "2",
        "--workers", "0", "--no-progress",
    )  # fmt: skip
    h.assert_user_error(code, err, codes=(3,), contains="no space left on device")
    assert "Traceback" not in caplog.text  # no log record with a traceback either
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


def test_review_decide_with_a_json_array_is_a_400(tmp_path):
    from PIL import Image

    from robustlab.workflows.imagenet_d.review import load_review_set
    from robustlab.workflows.imagenet_d.review.app import create_app
    from robustlab.store.reviews import ReviewStore

    data = tmp_path / "hard"
    (data / "n01440764").mkdir(parents=True)
    row = h.photo_rows(1)[0]
    Image.open(h.MINI / row["file"]).save(data / "n01440764" / "a.png")
    app = create_app(load_review_set(data), ReviewStore(tmp_path / "r.duckdb"), "tok")
    client = app.test_client()
    for body in ("[1, 2]", "7", '"accept"', "null"):
        resp = client.post(
            "/api/decide",
            data=body,
            headers={"X-Review-Token": "tok", "Content-Type": "application/json"},
        )
        assert resp.status_code == 400, (body, resp.status_code)
        assert "JSON object" in resp.get_json()["error"]
    resp = client.post(
        "/api/decide",
        json={"annotator": ["alice"], "index": 0, "decision": "accept"},
        headers={"X-Review-Token": "tok"},
    )
    assert resp.status_code == 400 and "annotator" in resp.get_json()["error"]
    resp = client.post(
        "/api/decide",
        json={"annotator": "alice", "index": 0, "decision": "accept"},
        headers={"X-Review-Token": "tok"},
    )
    assert resp.status_code == 200
