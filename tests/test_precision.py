"""Mixed precision, torch.compile and the end-of-run throughput line (issue 11, "Also").

bf16 is measured against fp32 on real photos (the repository's compact copy of the shared
set, or the full 500 photos in the slow test), the run identity is checked against the
fields an fp32 run always hashed, and the ONNX adapter's refusal, the CLI flags and the
throughput numbers are exercised through ``robustlab.evaluate`` and the command line.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import robustlab
from robustlab.errors import EnvironmentProblem, InputError
from robustlab.models import load_model
from robustlab.models.inference import Inference, check_autocast, end_layers, get_inference
from robustlab.records.identity import run_id
from robustlab.store import Store

KW = dict(workers=0, batch_size=8, progress=False)


def _folder(samples_dir: Path, dst: Path, n: int, step: int = 1) -> Path:
    """Every ``step``-th of the first photos of the shared set, linked with their CSV rows."""
    rows = list(csv.DictReader((samples_dir / "labels.csv").open(encoding="utf-8")))
    rows = rows[::step][:n]
    dst.mkdir(parents=True)
    for r in rows:
        os.link(samples_dir / r["file"], dst / r["file"])
    with (dst / "labels.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return dst


@pytest.fixture(scope="module")
def lite0():
    return load_model("lite0", device="cpu")


def _clean_pixels(model, folder: Path):
    """The uint8 batch evaluate feeds the model for the clean cell, and the labels."""
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.execution.runner import _ModelTransform
    from robustlab.execution.tasks import Task, TaskDataset

    plan = make_plan(EvaluateRequest.build(model, folder))
    tasks = [Task(i, tuple(plan.cells)) for i in range(len(plan.samples))]
    ds = TaskDataset(plan.samples, tasks, plan.images, _ModelTransform(model))
    return torch.cat([ds[i][1] for i in range(len(tasks))]), torch.tensor(plan.labels)


def _topk(model, x, precision: str):
    model.set_inference(get_inference(precision))
    try:
        parts = [model.predict_topk(x[i : i + 16]) for i in range(0, len(x), 16)]
    finally:
        model.set_inference(Inference())
    return torch.cat([p for p, _ in parts]), torch.cat([i for _, i in parts])


def test_bf16_agrees_with_fp32_on_real_photos(lite0, samples_dir, tmp_path):
    """48 photos spread over the classes: bf16 really computes in bf16 (the probabilities
    move), yet the top-1 class stays the same on at least 46 (measured on the compact
    copy: 48 of 48; on the 500 shared photos 495 of 500, see benchmarks/README.md)."""
    x, labels = _clean_pixels(lite0, _folder(samples_dir, tmp_path / "p", 48, step=2))
    p32, i32 = _topk(lite0, x, "fp32")
    p16, i16 = _topk(lite0, x, "bf16")
    assert p16.dtype == torch.float32  # softmax and top-k in float32
    moved = (p16[:, 0] - p32[:, 0]).abs()
    assert moved.max() > 1e-3, "bf16 gave fp32's numbers: autocast did not take effect"
    assert moved.max() < 0.15
    assert int((i16[:, 0] == i32[:, 0]).sum()) >= 46
    acc32 = (i32[:, 0] == labels).float().mean()
    acc16 = (i16[:, 0] == labels).float().mean()
    assert abs(float(acc16 - acc32)) <= 2 / 48


def test_the_pixel_and_logit_layers_stay_float32(lite0):
    """Under bf16 the stem and the classifier compute in float32 (see models.inference),
    everything between in bfloat16; fp32 again undoes it."""
    net = lite0.module
    assert end_layers(net) == [net.conv_stem, net.classifier]
    seen = {}
    hooks = [
        m.register_forward_hook(lambda mod, i, o, name=name: seen.__setitem__(name, o.dtype))
        for name, m in (("stem", net.conv_stem), ("head", net.classifier), ("mid", net.conv_head))
    ]
    try:
        _topk(lite0, torch.zeros(2, 3, 224, 224, dtype=torch.uint8), "bf16")
        assert seen == {"stem": torch.float32, "mid": torch.bfloat16, "head": torch.float32}
        lite0.predict(torch.zeros(2, 3, 224, 224, dtype=torch.uint8))  # fp32 again
        assert seen["mid"] == torch.float32 and "forward" not in vars(net.conv_stem)
    finally:
        for h in hooks:
            h.remove()


@pytest.mark.slow
def test_bf16_moves_top1_by_at_most_two_tenths_on_the_500_photos(full_samples_dir, tmp_path):
    """The issue's contract, through the whole evaluate path: lite0 on the 500 shared
    photos, top-1 under bf16 within 0.2 points of fp32 (measured: 89.0 vs 88.8 on an
    AVX-512 CPU; it fails on a CPU with AMX, where oneDNN's bf16 kernels give 88.4, and
    passes there with ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16: benchmarks/README.md)."""
    data = _folder(full_samples_dir, tmp_path / "all", 500)
    db = tmp_path / "r.duckdb"
    kw = dict(db=db, device="cpu", workers=1, progress=False)
    fp32 = robustlab.evaluate("lite0", data, **kw)
    bf16 = robustlab.evaluate("lite0", data, precision="bf16", **kw)
    assert fp32.run_id != bf16.run_id
    assert abs(float(bf16.table["top1"].iloc[0] - fp32.table["top1"].iloc[0])) <= 0.002 + 1e-9


def test_precision_joins_the_run_id_and_fp32_keeps_its_old_one(lite0, samples_dir, tmp_path):
    """An fp32 run hashes exactly the fields it always hashed (rebuilt here from the
    record), so stored fp32 runs resume; bf16 and fp16 differ only by the precision."""
    from robustlab import __version__
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan

    data = _folder(samples_dir, tmp_path / "p", 3)
    records = {
        p: make_plan(EvaluateRequest.build("lite0", data, device="cpu", precision=p)).record
        for p in PREC
    }
    plain = make_plan(EvaluateRequest.build("lite0", data, device="cpu")).record

    def old_identity(record, precision):
        return {
            "model_spec": record.model_spec,
            "weights_hash": record.weights_hash,
            "suite": None,
            "suite_version": None,
            "robustlab": __version__,
            "data_fingerprint": record.data_fingerprint,
            "label_space": record.label_space,
            "seed": 0,
            "preprocessing": record.preprocessing,
            "source": "on-the-fly",
            "masks": None,
            "precision": precision,
            "generated": None,
        }

    assert plain.run_id == records["fp32"].run_id
    assert run_id(old_identity(plain, "torch.float32")) == plain.run_id
    assert run_id(old_identity(plain, "bfloat16 (autocast)")) == records["bf16"].run_id
    assert run_id(old_identity(plain, "float16 (autocast)")) == records["fp16"].run_id
    assert records["bf16"].config["inputs"]["precision"] == "bfloat16 (autocast)"
    assert records["bf16"].config["model"]["inference"] == {"precision": "bf16", "compile": False}
    assert "inference" not in plain.config["model"]
    assert plain.config["model"]["memory_format"] == "channels_last"  # recorded, not hashed


PREC = ("fp32", "bf16", "fp16")


def test_a_bf16_run_is_its_own_labelled_run_with_throughput(samples_dir, tmp_path, capsys):
    """evaluate(precision="bf16") stores a run of its own (never resuming the fp32 one),
    labelled @bf16 in tables and "bfloat16 (autocast)" in the summary, resumes itself, and
    reports this call's throughput in ``df.attrs``."""
    from robustlab.metrics.summary import summarise_run

    data = _folder(samples_dir, tmp_path / "p", 6)
    db = tmp_path / "r.duckdb"
    fp32 = robustlab.evaluate("lite0", data, db=db, **KW)
    bf16 = robustlab.evaluate("lite0", data, db=db, precision="bf16", **KW)
    assert bf16.run_id != fp32.run_id
    assert list(bf16.table["model"]) == ["lite0 @bf16"] and list(fp32.table["model"]) == ["lite0"]
    assert bf16.n_written == 6 and not bf16.resumed
    tp = bf16.throughput
    assert tp["predictions"] == 6 and tp["device"] == "cpu"
    assert tp["per_s"] == pytest.approx(6 / tp["wall_s"], rel=0.05)
    # busy comes from the unrounded times and is rounded to 0.001; predict_s and wall_s
    # are rounded to 1 ms
    assert 0 < tp["predict_s"] <= tp["wall_s"] and tp["busy"] == pytest.approx(
        tp["predict_s"] / tp["wall_s"], abs=0.0005 + 0.002 / tp["wall_s"]
    )
    again = robustlab.evaluate("lite0", data, db=db, precision="bf16", **KW)
    assert again.resumed and again.n_written == 0
    assert again.throughput["predictions"] == 0
    store = Store(db)
    rows = {}
    for rid in (fp32.run_id, bf16.run_id):
        run = store.get_run(rid)
        rows[rid] = summarise_run(run, store.predictions([rid]))["precision"]
    assert rows == {fp32.run_id: "float32", bf16.run_id: "bfloat16 (autocast)"}


def test_cli_precision_flag_and_throughput_line(samples_dir, tmp_path, capsys):
    """The run through the command's main in this process (a new interpreter would import
    torch again for seconds of CPU); the refused flag through ``python -m robustlab.cli``,
    which stops in the argument parser before any heavy import."""
    from robustlab.cli import main

    data = _folder(samples_dir, tmp_path / "p", 3)
    argv = ["evaluate", "lite0", "--data", str(data)]
    argv += ["--db", str(tmp_path / "r.duckdb"), "--workers", "0", "--device", "cpu"]
    assert main([*argv, "--precision", "bf16"]) == 0
    out, err = capsys.readouterr()
    assert "lite0 @bf16" in out
    line = [ln for ln in err.splitlines() if ln.startswith("throughput: 3 predictions")]
    assert len(line) == 1 and "predictions/s, model busy" in line[0], err
    cmd = [sys.executable, "-m", "robustlab.cli", *argv]
    bad = subprocess.run([*cmd, "--precision", "fp8"], capture_output=True, text=True)
    assert bad.returncode == 2 and "invalid choice: 'fp8'" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_onnx_refuses_another_precision_in_one_line(tmp_path):
    """ONNX Runtime has no autocast: bf16 is refused, never silently computed in fp32."""
    import timm

    torch.manual_seed(0)
    net = timm.create_model("test_resnet", pretrained=False).eval()
    path = tmp_path / "m.onnx"
    x = torch.zeros(2, 3, 64, 64)
    torch.onnx.export(
        net,
        (x,),
        str(path),
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
        opset_version=17,
        dynamo=False,
    )
    model = load_model(f"onnx:{path}", device="cpu")
    for precision, compile in (("bf16", False), ("fp32", True)):
        with pytest.raises(InputError, match="needs a torch model; the onnx adapter") as err:
            model.set_inference(get_inference(precision, compile))
        assert "\n" not in str(err.value)
    model.set_inference(get_inference("fp32"))  # the default is fine


def test_unknown_precision_and_a_device_without_autocast_are_one_line():
    with pytest.raises(InputError, match="unknown precision 'int8'; use one of fp32, bf16"):
        get_inference("int8")
    # The meta device runs no autocast: refused, not silently run in fp32.
    with pytest.raises(EnvironmentProblem, match="--precision bf16: torch has no autocast on meta"):
        check_autocast("meta", get_inference("bf16"))
    check_autocast("cpu", get_inference("bf16"))
    check_autocast("meta", get_inference("fp32"))


def _tiny(tmp_path):
    import timm

    torch.manual_seed(0)
    ckpt = tmp_path / "tiny.pth"
    torch.save(timm.create_model("test_resnet", pretrained=False).state_dict(), ckpt)
    return load_model("timm:test_resnet", weights=ckpt, device="cpu", batch_size=4)


@pytest.mark.long
def test_a_failing_torch_compile_is_one_line(tmp_path, monkeypatch):
    """No usable C compiler: the compile that evaluate forces before any work fails with
    one EnvironmentProblem line, not inductor's page of traceback."""
    import torch._inductor.config as inductor

    model = _tiny(tmp_path)
    monkeypatch.setattr(inductor.cpp, "cxx", ("/nonexistent/c++",))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    torch._dynamo.reset()
    model.set_inference(get_inference("fp32", True))
    try:
        with pytest.raises(EnvironmentProblem, match=r"--compile: torch.compile failed") as err:
            model.warm_up()
        assert "\n" not in str(err.value)
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_model_predicts_like_the_plain_one_in_a_run_of_its_own(tmp_path, samples_dir):
    model = _tiny(tmp_path)
    data = _folder(samples_dir, tmp_path / "p", 5)
    db = tmp_path / "r.duckdb"
    plain = robustlab.evaluate(model, data, db=db, **KW)
    compiled = robustlab.evaluate(model, data, db=db, compile=True, **KW)
    assert compiled.run_id != plain.run_id
    assert list(compiled.table["model"]) == ["timm:test_resnet @compiled"]
    store = Store(db)
    a = store.predictions([plain.run_id])
    b = store.predictions([compiled.run_id])
    assert [list(v) for v in a["top5_ids"]] == [list(v) for v in b["top5_ids"]]
    run = store.get_run(compiled.run_id)
    assert run["config"]["inputs"]["compile"] == "inductor"


def test_ray_actors_load_the_drivers_precision(lite0):
    """The Ray backend's model stage rebuilds the model from its spec on each actor: it
    gets the driver's precision too (else a bf16 run id would hold fp32 predictions)."""
    import torch

    from robustlab.execution.ray.predictor import Predictor

    # this process's own torch thread count, so building the actor here changes nothing
    threads = torch.get_num_threads()
    args = ("lite0", None, "imagenet1k", "cpu", 4, lite0.weights_hash, 5, {}, threads)
    actor = Predictor(*args, get_inference("bf16"))
    assert actor.model.inference == Inference("bf16")
    net = actor.model.module
    assert "forward" in vars(net.conv_stem) and "forward" in vars(net.classifier)
    assert Predictor(*args).model.inference.default
