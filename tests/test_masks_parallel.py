"""Masking threads (robustlab.masks.parallel, issue 35 item 5): several images at once give
the masks and records of one image after another, in order, and the caller's library
thread counts come back as they were."""

from __future__ import annotations

import csv
import json
import shutil
import threading

import numpy as np
import pytest
from PIL import Image

from robustlab.masks import AutoMasker, iou, load_mask
from robustlab.masks.parallel import in_order

# the module's lite0 fixture costs seconds: one xdist worker builds it
pytestmark = pytest.mark.xdist_group("masks_parallel")


@pytest.fixture(scope="module")
def lite0():
    from robustlab.models import load_model

    return load_model("lite0")


def _no_box_folder(samples_dir, dst, n=3):
    """``n`` real photos in a flat folder with labels, and no boxes: every one is seeded by
    the lite0 CAM, the path of ``robustlab masks --data DIR --out DIR``."""
    dst.mkdir()
    with open(samples_dir / "labels.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))[10 : 10 + n]
    for r in rows:
        shutil.copy(samples_dir / r["file"], dst / r["file"])
    with open(dst / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


def test_threads_give_the_masks_and_records_of_one_thread(samples_dir, tmp_path, lite0):
    from robustlab.data.sources import discover
    from robustlab.masks.build import build_masks

    samples = discover(_no_box_folder(samples_dir, tmp_path / "data"))
    masker = AutoMasker("grabcut", model=lite0)
    done: list[int] = []
    one = build_masks(samples, tmp_path / "one", masker, threads=1)
    two = build_masks(
        samples, tmp_path / "two", masker, threads=2, progress=lambda d, _t: done.append(d)
    )
    assert done == [1, 2, 3]
    assert one["n_written"] == two["n_written"] == len(samples)
    recs = {
        k: json.loads((tmp_path / k / "masks_quality.json").read_text()) for k in ("one", "two")
    }
    drop = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    a, b = recs["one"]["records"], recs["two"]["records"]
    assert [r["id"] for r in b] == [s.id for s in samples]  # in the samples' order
    assert [r["seed"] for r in b] == ["cam"] * len(samples)
    assert [r["cam_class"] for r in a] == [r["cam_class"] for r in b]
    for ra, rb in zip(a, b):
        ma, mb = load_mask(tmp_path / "one" / ra["mask"]), load_mask(tmp_path / "two" / rb["mask"])
        # a CAM on one torch thread may differ from two threads' in its last bits
        # (oneDNN splits convolutions by thread): the promise is IoU >= 0.99
        assert iou(ma, mb) >= 0.99, ra["id"]
        if np.array_equal(ma, mb):
            assert drop(ra) == drop(rb)


def test_library_thread_counts_come_back(samples_dir, tmp_path, lite0):
    import cv2
    import torch

    from robustlab.data.sources import discover
    from robustlab.masks.build import build_masks

    samples = discover(_no_box_folder(samples_dir, tmp_path / "data", n=2))
    torch_before, cv2_before = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(3)
    try:
        build_masks(samples, tmp_path / "out", AutoMasker("grabcut", model=lite0), threads=2)
        assert torch.get_num_threads() == 3 and cv2.getNumThreads() == cv2_before
    finally:
        torch.set_num_threads(torch_before)


def test_in_order_yields_in_order_when_a_later_item_finishes_first():
    first_may_finish = threading.Event()

    def fn(i):
        if i == 0:  # item 0 waits until item 1 is done
            assert first_may_finish.wait(30)
        if i == 1:
            first_may_finish.set()
        return i * 10

    with in_order(fn, list(range(6)), threads=2) as results:
        assert list(results) == [0, 10, 20, 30, 40, 50]


def test_in_order_raises_at_the_failing_item_and_starts_no_more_than_its_window():
    started: list[int] = []
    lock = threading.Lock()

    def fn(i):
        with lock:
            started.append(i)
        if i == 2:
            raise ValueError("a bug at item 2")
        return i

    got = []
    with pytest.raises(ValueError, match="a bug at item 2"):
        with in_order(fn, list(range(100)), threads=2) as results:
            for r in results:
                got.append(r)
    assert got == [0, 1]
    assert len(started) <= 2 + 2 * 2  # at most the window ahead of the failing item


def test_cli_threads_must_be_a_positive_whole_number(tmp_path, capsys):
    from robustlab.cli import main

    (tmp_path / "data").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "data" / "a.png")
    for bad in ("0", "two"):
        with pytest.raises(SystemExit) as exc:
            main(
                [
                    "masks",
                    "--data",
                    str(tmp_path / "data"),
                    "--out",
                    str(tmp_path / "o"),
                    "--threads",
                    bad,
                ]
            )
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--threads" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
