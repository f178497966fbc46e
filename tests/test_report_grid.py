"""The report's example grids: which samples are shown, and how their cells are laid out."""

from __future__ import annotations

import numpy as np
from conftest import make_masked_folder
from PIL import Image

import robustlab
from robustlab.workflows.report.grid import layout_rows, mask_shares, pick_samples
from robustlab.store import Store


def test_layout_groups_single_level_shifts_per_family_and_keeps_severity_rows():
    keys = [
        ("clean", "0"),
        ("fog", "1"),
        ("fog", "3"),
        ("blur_bg", "default"),
        ("color_r", "default"),
        ("bright_obj", "default"),
        ("only_fg", "default"),
        ("mixed_rand", "default"),
        ("obj_position", "random"),
        *[(f"color_{c}", "default") for c in "gb"],
        ("rainbow", "default"),
        ("segmented", "default"),
    ]
    rows = layout_rows(keys)
    assert rows[0] == ("fog", [("fog", "1", "level 1"), ("fog", "3", "level 3")])
    first = rows[1]
    assert first[0] == "clean, background" and first[1][0] == ("clean", "0", "clean")
    assert all(len(cells) <= 6 for _, cells in rows)
    shown = [(s, lv) for _, cells in rows for s, lv, _ in cells]
    assert sorted(shown) == sorted(keys)  # every cell exactly once
    assert ("obj_position", "random", "obj position random") in [c for _, cs in rows for c in cs]


def test_examples_prefer_masks_covering_10_to_60_percent(samples_dir, tmp_path):
    data, masks = make_masked_folder(samples_dir, tmp_path, 4, 0.0)
    files = sorted(masks.rglob("*.png"))
    shares = [0.85, 0.30, 0.05, 0.45]  # too big, good, too small, good
    for path, share in zip(files, shares):
        w, h = Image.open(next(data.rglob(path.stem + ".*"))).size
        side = np.sqrt(share)  # a centred rectangle: it survives the protocol's centre crop
        m = np.zeros((h, w), np.uint8)
        top, left = int(h * (1 - side) / 2), int(w * (1 - side) / 2)
        m[top : top + int(h * side), left : left + int(w * side)] = 255
        Image.fromarray(m).save(path)
    db = tmp_path / "r.duckdb"
    res = robustlab.evaluate(
        "lite0",
        data,
        suite="ximagenet12",
        shifts=["blur_bg"],
        masks=masks,
        db=db,
        workers=0,
        progress=False,
    )
    store = Store(db)
    record = store.get_run(res.run_id)
    ids = sorted(store.predictions([res.run_id])["sample_id"].unique())
    measured = mask_shares(record, ids)
    good = set()
    for (sid, share), want in zip(sorted(measured.items()), shares):
        assert abs(share - want) < 0.02, sid
        if 0.10 <= want <= 0.60:
            good.add(sid)
    assert len(measured) == 4 and len(good) == 2
    picked = pick_samples(store, [res.run_id], k=2, record=record)
    assert set(picked) == good
    # without the record (no mask information) the choice falls back to the predictions, among
    # the samples stored in every cell (the 85 % mask fills the centre crop: blur_bg skipped it)
    preds = store.predictions([res.run_id])
    complete = preds.groupby("sample_id").size()
    assert set(pick_samples(store, [res.run_id], k=4)) == set(
        complete[complete == complete.max()].index
    )
