"""ai_bg: a real (tiny, randomly initialised) diffusers inpainting pipeline saved to disk and
loaded back through the backend; the skip when no inpainter is configured."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from robustlab.errors import MissingResourceError
from robustlab.seeding import make_rng
from robustlab.shifts import get_shift
from robustlab.shifts.registry import available_shifts, missing_resource
from robustlab.shifts.generative.inpaint import AI_BG, ENV_PATH, Inpainter, get_inpainter

TINY = {**AI_BG["default"], "steps": 3, "work_size": 64}


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory):
    """A StableDiffusionInpaintPipeline with tiny random weights, saved with save_pretrained:
    the ``inpaint`` folder of ``robustlab data tiny-checkpoints`` (the same builder; no
    download), here with a 16-token context."""
    from robustlab.shifts.generative.tiny import save_inpaint

    return save_inpaint(tmp_path_factory.mktemp("inpainter") / "tiny-sd-inpaint", context_length=16)


@pytest.fixture(scope="module")
def scene(photo):
    """A real photo with an elliptic object mask."""
    yy, xx = np.mgrid[:224, :224]
    mask = ((yy - 120) / 70.0) ** 2 + ((xx - 105) / 60.0) ** 2 <= 1
    return photo, mask


def test_backend_keeps_object_pixels_and_is_seeded(tiny_pipeline, scene):
    x, m = scene
    inp = get_inpainter(tiny_pipeline, device="cpu")
    assert get_inpainter(tiny_pipeline, device="cpu") is inp  # loaded once per process
    out = inp(x, m, seed=11, **{k: TINY[k] for k in ("prompt", "steps", "work_size")})
    assert out.shape == x.shape and out.dtype == np.uint8
    np.testing.assert_array_equal(out[m], x[m])
    assert np.mean(out[~m] != x[~m]) > 0.5  # the background was redrawn
    again = inp(x, m, seed=11, prompt=TINY["prompt"], steps=3, work_size=64)
    np.testing.assert_array_equal(out, again)
    other = inp(x, m, seed=12, prompt=TINY["prompt"], steps=3, work_size=64)
    assert not np.array_equal(out, other)
    d = inp.describe()
    assert d["pipeline"] == "StableDiffusionInpaintPipeline" and len(d["fingerprint"]) == 16


def test_odd_sizes_run_at_a_multiple_of_the_vae_factor(tiny_pipeline, samples_dir):
    from PIL import Image

    x = np.asarray(Image.open(samples_dir / "n01440764_tench.JPEG").convert("RGB").resize((75, 53)))
    m = np.zeros(x.shape[:2], bool)
    m[10:40, 20:50] = True
    inp = get_inpainter(tiny_pipeline, device="cpu")
    assert inp.working_size(53, 75, None) == (56, 72)
    assert inp.working_size(224, 300, 512) == (512, 688)
    out = inp(x, m, seed=0, steps=2, work_size=None)
    assert out.shape == x.shape
    np.testing.assert_array_equal(out[m], x[m])


def test_registered_shift_follows_the_seed_rule(tiny_pipeline, scene):
    from robustlab.pipeline import apply_shift

    x, m = scene
    shift = get_shift("ai_bg")
    assert shift.needs == {"mask", "inpainter"} and "ximagenet12" in shift.tags
    assert shift.params["default"]["prompt"].startswith("high-definition pictures")
    tiny = dataclasses.replace(shift, params={"tiny": TINY})  # the real function, a cheap level
    ctx = {"mask": m.astype(np.uint8) * 255, "inpainter": str(tiny_pipeline)}
    a = apply_shift(x, "a.JPEG", tiny, "tiny", 0, ctx)
    np.testing.assert_array_equal(a, apply_shift(x, "a.JPEG", tiny, "tiny", 0, ctx))
    np.testing.assert_array_equal(a[m], x[m])
    assert not np.array_equal(a, apply_shift(x, "b.JPEG", tiny, "tiny", 0, ctx))
    with pytest.raises(ValueError, match="needs inpainter"):
        tiny.apply(x, "tiny", make_rng(0), {"mask": ctx["mask"]})


def test_bad_checkpoint_folders_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="is not a folder"):
        Inpainter(tmp_path / "nope")
    with pytest.raises(ValueError, match="no model_index.json"):
        Inpainter(tmp_path)
    (tmp_path / "model_index.json").write_text('{"_class_name": "StableDiffusionInpaintPipeline"}')
    with pytest.raises(ValueError, match="cannot load an inpainting pipeline") as exc:
        Inpainter(tmp_path, device="cpu")
    assert "\n" not in str(exc.value)


def test_unconfigured_inpainter_skips_ai_bg_with_a_message(monkeypatch, caplog, tiny_pipeline):
    from robustlab.suites import get_suite

    monkeypatch.delenv(ENV_PATH, raising=False)
    names = list(get_suite("ximagenet12").shifts)
    assert names[-1] == "ai_bg"
    with caplog.at_level(logging.WARNING):
        kept = available_shifts(names)
    assert kept == names[:-1]
    assert "skipping ai_bg: no usable inpainter" in caplog.text and ENV_PATH in caplog.text
    with pytest.raises(MissingResourceError, match=ENV_PATH):
        available_shifts(["ai_bg"])
    monkeypatch.setenv(ENV_PATH, str(tiny_pipeline.parent / "missing"))
    assert "is not a folder" in missing_resource(get_shift("ai_bg"))
    monkeypatch.setenv(ENV_PATH, str(tiny_pipeline))
    assert missing_resource(get_shift("ai_bg")) is None
    assert available_shifts(names) == names


def test_generate_and_evaluate_skip_ai_bg_without_an_inpainter(
    monkeypatch, caplog, samples_dir, tmp_path
):
    import shutil

    from PIL import Image

    from robustlab.workflows.evaluate.plan import resolve_suite
    from robustlab.workflows.generate import generate

    monkeypatch.delenv(ENV_PATH, raising=False)
    data, masks = tmp_path / "data" / "n01440764", tmp_path / "masks" / "n01440764"
    data.mkdir(parents=True)
    masks.mkdir(parents=True)
    shutil.copy(samples_dir / "n01440764_tench.JPEG", data)
    w, h = Image.open(data / "n01440764_tench.JPEG").size
    m = np.zeros((h, w), np.uint8)
    m[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4] = 255
    Image.fromarray(m).save(masks / "n01440764_tench.png")
    with caplog.at_level(logging.WARNING):
        res = generate(
            "ximagenet12",
            tmp_path / "data",
            tmp_path / "out",
            shifts=["segmented", "ai_bg"],
            masks=tmp_path / "masks",
            progress=False,
            workers=0,
        )
    assert res.written == 1 and res.cells == 1 and "skipping ai_bg" in caplog.text
    assert not (tmp_path / "out" / "ai_bg").exists()
    with pytest.raises(MissingResourceError, match=ENV_PATH):
        generate(
            "ximagenet12",
            tmp_path / "data",
            tmp_path / "out2",
            shifts=["ai_bg"],
            masks=tmp_path / "masks",
            progress=False,
            workers=0,
        )
    suite, _, cells = resolve_suite("ximagenet12", None, None)
    assert "ai_bg" not in suite.shifts and len(cells) == 1 + 13


@pytest.mark.slow
def test_generate_ai_bg_end_to_end_with_the_default_level(
    monkeypatch, tiny_pipeline, samples_dir, tmp_path
):
    """The registered level (30 steps at 512 px) through generate, configured by the env."""
    import shutil

    from PIL import Image

    from robustlab.data.sources import discover
    from robustlab.workflows.generate import generate
    from robustlab.pipeline import decode, load_prepared
    from robustlab.suites import get_suite

    monkeypatch.setenv(ENV_PATH, str(tiny_pipeline))
    monkeypatch.setenv("ROBUSTLAB_INPAINTER_DEVICE", "cpu")
    data, masks = tmp_path / "data" / "n01440764", tmp_path / "masks" / "n01440764"
    data.mkdir(parents=True)
    masks.mkdir(parents=True)
    shutil.copy(samples_dir / "n01440764_tench.JPEG", data)
    w, h = Image.open(data / "n01440764_tench.JPEG").size
    m = np.zeros((h, w), np.uint8)
    m[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4] = 255
    Image.fromarray(m).save(masks / "n01440764_tench.png")
    res = generate(
        "ximagenet12",
        tmp_path / "data",
        tmp_path / "out",
        shifts=["ai_bg"],
        masks=tmp_path / "masks",
        progress=False,
        workers=0,
    )
    assert res.written == 1 and res.failed == 0
    # The manifest names the checkpoint, and evaluating the folder records that one.
    import json

    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.shifts.generative.inpaint import checkpoint_fingerprint

    manifest = json.loads(res.manifest_path.read_text())
    assert manifest["inpainter"] == manifest["runs"][-1]["inpainter"]
    assert manifest["inpainter"]["fingerprint"] == checkpoint_fingerprint(tiny_pipeline)
    assert manifest["inpainter"]["path"] == str(tiny_pipeline.resolve())
    monkeypatch.setenv("ROBUSTLAB_INPAINTER_DTYPE", "float16")  # the local setting does not count
    plan = make_plan(
        EvaluateRequest.build("lite0", tmp_path / "out", shifts=["ai_bg"], device="cpu")
    )
    assert plan.record.config["inpainter"] == manifest["inpainter"]
    monkeypatch.delenv("ROBUSTLAB_INPAINTER_DTYPE")
    out = decode((tmp_path / "out/ai_bg/default/n01440764/n01440764_tench.png").read_bytes())
    prep = load_prepared(
        discover(tmp_path / "data", masks=tmp_path / "masks")[0],
        get_suite("ximagenet12").protocol,
        with_mask=True,
    )
    keep = prep.mask > 0
    np.testing.assert_array_equal(out[keep], prep.rgb[keep])
    assert np.mean(out[~keep] != prep.rgb[~keep]) > 0.5


def _one_masked_photo(samples_dir, tmp_path):
    """(data, masks) folders holding the tench photo and a centred box mask."""
    import shutil

    from PIL import Image

    data, masks = tmp_path / "data" / "n01440764", tmp_path / "masks" / "n01440764"
    data.mkdir(parents=True)
    masks.mkdir(parents=True)
    shutil.copy(samples_dir / "n01440764_tench.JPEG", data)
    w, h = Image.open(data / "n01440764_tench.JPEG").size
    m = np.zeros((h, w), np.uint8)
    m[h // 4 : 3 * h // 4, w // 4 : 3 * w // 4] = 255
    Image.fromarray(m).save(masks / "n01440764_tench.png")
    return tmp_path / "data", tmp_path / "masks"


def test_inpainter_fingerprint_is_recorded_when_ai_bg_runs(
    monkeypatch, tiny_pipeline, samples_dir, tmp_path
):
    """The run record names the checkpoint that draws ai_bg; described from its folder (the
    weights not loaded) it equals the loaded Inpainter's describe(). Without ai_bg: no record."""
    import json

    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.workflows.generate import generate
    from robustlab.models import load_model
    from robustlab.shifts.generative import inpaint

    monkeypatch.setenv(ENV_PATH, str(tiny_pipeline))
    monkeypatch.setenv("ROBUSTLAB_INPAINTER_DEVICE", "cpu")
    data, masks = _one_masked_photo(samples_dir, tmp_path)
    expected = get_inpainter(tiny_pipeline, device="cpu").describe()
    assert expected["fingerprint"] == inpaint.checkpoint_fingerprint(tiny_pipeline)
    monkeypatch.setattr(inpaint, "_CACHE", {})  # as in a parent process whose workers inpaint
    assert inpaint.describe_inpainter() == expected

    model = load_model("lite0", device="cpu")
    plan = make_plan(
        EvaluateRequest.build(
            model, data, suite="ximagenet12", shifts=["ai_bg", "segmented"], masks=masks
        )
    )
    assert plan.record.config["inpainter"] == expected
    plan = make_plan(
        EvaluateRequest.build(model, data, suite="ximagenet12", shifts=["segmented"], masks=masks)
    )
    assert "inpainter" not in plan.record.config
    res = generate(
        "ximagenet12",
        data,
        tmp_path / "out",
        shifts=["segmented"],
        masks=masks,
        progress=False,
        workers=0,
    )
    manifest = json.loads(res.manifest_path.read_text())
    assert manifest["inpainter"] is None and "inpainter" not in manifest["runs"][-1]


def test_attribute_edits_fill_with_the_diffusers_backend(monkeypatch, tiny_pipeline, scene):
    """ImageNet-E edits with ROBUSTLAB_EDIT_FILL=diffusers: the configured checkpoint repaints
    the uncovered object region; the record names it; the draw follows the seed rule."""
    from robustlab.pipeline import apply_shift
    from robustlab.shifts.attributes import describe_hole_fill
    from robustlab.shifts.attributes import fill as fillmod

    x, m = scene
    monkeypatch.setenv(ENV_PATH, str(tiny_pipeline))
    monkeypatch.setenv(fillmod.ENV_FILL, "diffusers")
    monkeypatch.setitem(
        fillmod.SETTINGS,
        "diffusers",
        {**fillmod.SETTINGS["diffusers"], "steps": 3, "work_size": 64},
    )
    rec = describe_hole_fill()
    assert rec["backend"] == "diffusers" and rec["inpainter"]["path"] == str(tiny_pipeline)
    assert rec["fingerprint"] != describe_hole_fill("telea")["fingerprint"]
    attrs = {}
    out = apply_shift(x, "s.png", "obj_direction", "180", 0, {"mask": m, "attributes": attrs})
    again = apply_shift(x, "s.png", "obj_direction", "180", 0, {"mask": m})
    np.testing.assert_array_equal(out, again)
    assert attrs["fill"] == "diffusers"
    rm = np.rot90(m, 2)
    np.testing.assert_array_equal(out[rm], np.rot90(x, 2)[rm])
    hole = fillmod.hole_mask(m, fillmod.SETTINGS["diffusers"]["dilate"])
    np.testing.assert_array_equal(out[~hole & ~rm], x[~hole & ~rm])
    assert (out[hole & ~rm] != x[hole & ~rm]).any()


def test_a_random_weights_checkpoint_says_so(tiny_pipeline, tmp_path, caplog):
    """The tiny checkpoint carries the random-weights marker, and planning a run with it
    (describing the configured inpainter) logs one warning line; a checkpoint without the
    marker logs none."""
    import json
    import shutil

    from robustlab.shifts.generative import tiny
    from robustlab.shifts.generative.inpaint import describe_inpainter

    marker = json.loads((tiny_pipeline / tiny.MARKER).read_text())
    assert marker["random_weights"] is True and marker["kind"] == "inpaint"
    tiny._warned.clear()  # once per process: start from none
    with caplog.at_level(logging.WARNING, logger="robustlab.shifts.generative.tiny"):
        describe_inpainter(tiny_pipeline, device="cpu")
        describe_inpainter(tiny_pipeline, device="cpu")
    lines = [r.getMessage() for r in caplog.records if "RANDOM weights" in r.getMessage()]
    assert len(lines) == 1 and "never for numbers" in lines[0]
    caplog.clear()
    plain = shutil.copytree(tiny_pipeline, tmp_path / "plain")
    (plain / tiny.MARKER).unlink()
    with caplog.at_level(logging.WARNING, logger="robustlab.shifts.generative.tiny"):
        describe_inpainter(plain, device="cpu")
    assert not tiny.is_random(plain) and "RANDOM" not in caplog.text
