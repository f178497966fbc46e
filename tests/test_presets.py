"""The official generators' presets as registry data, suites and protocols."""

from __future__ import annotations

import numpy as np
import pytest

import robustlab
from robustlab.errors import InputError
from robustlab.pipeline import geometry, prepare, prepare_bbox
from robustlab.shifts.registry import PRESETS, get_shift, register_shift
from robustlab.suites import (
    IMAGENET_C_PROTOCOL,
    PRESET_PROTOCOLS,
    Protocol,
    get_suite,
    parse_protocol,
    protocol_label,
)


def test_every_corruption_has_every_preset_with_its_levels():
    for name in robustlab.list_corruptions("all"):
        sh = get_shift(name)
        assert set(sh.presets) == set(PRESETS), name
        for preset in PRESETS:
            view = get_shift(name, preset=preset)
            assert view.levels == sh.levels == (1, 2, 3, 4, 5)
            assert view.fn is sh.fn and view.name == sh.name and view.preset_name == preset


def test_preset_tables_are_the_scripts_constants():
    """A few constants the issue names, read back from the registry (the tables are data)."""
    assert get_shift("gaussian_noise", preset="cifar-c").params == {
        1: 0.04,
        2: 0.06,
        3: 0.08,
        4: 0.09,
        5: 0.1,
    }
    assert get_shift("gaussian_noise").params[5] == 0.38
    # elastic scaled by the image size: make_cifar_c.py's IMSIZE * 0.08 ...
    assert get_shift("elastic_transform", preset="cifar-c").params[1] == (0.0, 0.0, 32 * 0.08)
    assert get_shift("elastic_transform", preset="imagenet-c-299").params[1][0] == 360 * 2
    # frost crops from textures shrunk for the image: 0.2 for 32 px, 0.3 for 64 px
    assert get_shift("frost", preset="cifar-c").params[1] == (1, 0.2, 0.2)
    assert get_shift("frost", preset="tiny-imagenet-c").params[1][2] == 0.3
    assert get_shift("fog", preset="imagenet-64-c").params[1][2] == 64


def test_unknown_preset_is_one_line():
    with pytest.raises(InputError, match="no preset 'cifar-100-c'"):
        get_shift("fog", preset="cifar-100-c")
    with pytest.raises(InputError, match="no preset"):
        robustlab.corrupt(np.zeros((32, 32, 3), np.uint8), "fog", 1, preset="nope")
    with pytest.raises(InputError, match="unknown parameter preset"):
        Protocol(preset="nope")


def test_register_refuses_a_preset_with_other_levels():
    with pytest.raises(ValueError, match="has levels"):
        register_shift("t_bad_preset", family="t", params={1: 1, 2: 2}, presets={"cifar-c": {1: 1}})
    with pytest.raises(ValueError, match="unknown preset"):
        register_shift("t_bad_preset", family="t", params={1: 1}, presets={"x": {1: 1}})


def test_small_preset_constants_on_any_size():
    """The presets' fixed sizes (fog's map, frost's shrunk texture) do not limit the image:
    a larger one still gets a result of its own size."""
    x = (np.random.default_rng(0).random((100, 80, 3)) * 255).astype(np.uint8)
    for name in ("fog", "frost", "elastic_transform", "glass_blur"):
        out = robustlab.corrupt(x, name, 5, seed=1, preset="cifar-c")
        assert out.shape == x.shape


def test_elastic_sigma_zero_is_the_affine_warp_alone():
    """Severity 1 of the 32 and 64 px presets: alpha 0 and sigma 0 (scipy leaves the field
    unfiltered), so the displacement is zero and the draws still happen in order."""
    x = (np.random.default_rng(1).random((32, 32, 3)) * 255).astype(np.uint8)
    a = robustlab.corrupt(
        x, "elastic_transform", 1, seed=np.random.RandomState(5), preset="cifar-c"
    )
    b = robustlab.corrupt(
        x, "elastic_transform", 1, seed=np.random.RandomState(5), preset="cifar-c"
    )
    assert np.array_equal(a, b) and a.shape == x.shape


def test_preset_suites():
    for preset in PRESETS:
        suite = get_suite(preset)
        assert suite.protocol.preset == preset
        assert len(suite.shifts) == 19 and len(suite.cells()) == 95
        assert suite.select("common").suite.shifts == tuple(robustlab.list_corruptions())
    assert get_suite("cifar-c").label_space == "cifar10"
    assert get_suite("cifar-c").protocol.format == "png"


def test_protocol_records_the_preset_only_when_set():
    assert "preset" not in IMAGENET_C_PROTOCOL.describe()
    d = PRESET_PROTOCOLS["cifar-c"].describe()
    assert d["preset"] == "cifar-c" and d["frame"] == "squash" and d["resize"] == 32
    assert PRESET_PROTOCOLS["imagenet-c-299"].name == "imagenet-c-299"
    assert "cifar-c constants" in protocol_label(d)
    # a name changes the frame and view, not what the cells are (the preset, the format)
    p = parse_protocol("view=model", PRESET_PROTOCOLS["cifar-c"])
    assert p.preset == "cifar-c" and p.view == "model"
    assert parse_protocol("imagenet-c", PRESET_PROTOCOLS["cifar-c"]).preset == "cifar-c"
    assert parse_protocol("preset=none", PRESET_PROTOCOLS["cifar-c"]).preset is None


def test_inception_frame_geometry():
    """make_imagenet_c_inception.py's center_crop(img, 0.875) then resize((299, 299))."""
    p = PRESET_PROTOCOLS["imagenet-c-299"]
    g = geometry(500, 375, p)
    kept_w, kept_h = int(500 * 0.875), int(375 * 0.875)  # 437, 328
    left, top = int(round((500 - kept_w) / 2.0)), int(round((375 - kept_h) / 2.0))
    assert g.pre_box == (left, top, left + kept_w, top + kept_h)
    assert g.output == (299, 299)
    x = np.zeros((375, 500, 3), np.uint8)
    x[top:, :] = 255  # white below the crop's top edge
    out = prepare(x, p)
    assert out.shape == (299, 299, 3) and out.min() == 255
    # a box maps through the pre-crop and the squash
    box = prepare_bbox((left, top, left + kept_w, top + kept_h), (500, 375), p)
    assert box == (0, 0, 299, 299)


def test_a_suite_whose_preset_lacks_a_shift_is_refused_before_work(tmp_path):
    """A user suite (YAML) with a preset but a scene shift, which has no such table."""
    suite = tmp_path / "s.yaml"
    suite.write_text("name: x\nshifts: [color_grey]\nprotocol: {preset: cifar-c}\n")
    data = tmp_path / "data" / "n01440764"
    data.mkdir(parents=True)
    x = (np.random.default_rng(0).random((40, 40, 3)) * 255).astype(np.uint8)
    from PIL import Image

    Image.fromarray(x).save(data / "a.png")
    with pytest.raises(InputError, match="no preset 'cifar-c'"):
        robustlab.evaluate(
            "lite0", data=tmp_path / "data", suite=str(suite), db=tmp_path / "d.duckdb"
        )
