"""Where on-the-fly evaluation spends its time on a GPU machine (prints one JSON line).

Three rates for lite0 on the whole ImageNet-C suite (clean + 75 cells) over ``--n`` photos:

1. ``bare``: ``model.predict`` on batches already in host memory (the model's speed).
2. ``workers``: the DataLoader workers alone (decode, prepare, shift, JPEG round trip,
   transform) delivering tasks to a main process that does nothing with them: what the
   CPU side can produce.
3. ``evaluate``: ``robustlab.evaluate`` end to end (workers, forward pass, database).

Issue targets: ``evaluate`` at least 80 % of ``workers`` and at least 3,000 predictions/s
with 15 workers on 16 cores.

With ``--shift-device cuda`` (or ``cpu``) the corruptions run batched as torch operations
(:mod:`robustlab.shifts.batched`) and ``evaluate`` uses that path; ``workers`` then
measures what the workers produce on it (decoded photos, as cells: x76), and two more
numbers appear: ``shifts_img_s`` (the batched shifts + JPEG round trip alone on the
device, all 75 cells over one group of photos) and ``jpeg_mad`` (mean absolute pixel
difference of the device's JPEG round trip, nvJPEG on CUDA, against Pillow's at quality
85). Issue target: ``evaluate_over_bare`` >= 0.70 for lite0, >= 0.90 for a large model
(``--model timm:vit_base_patch16_224 --random-weights``). Time inside ``evaluate`` is split by timing the model's
predict calls and the store's writes (wrappers that measure, the real calls run).

The script uses only functions that exist in older robustlab versions too, so the same
file measures a baseline checkout in the same session (``PYTHONPATH=old/src``).

Usage:
    python benchmarks/evaluate_gpu.py --photos DIR --n 240 --workers 15 --batch-size 256 \
        --device cuda [--skip workers,bare] [--shift-device cuda] [--model SPEC]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def make_folder(src: Path, dst: Path, n: int) -> Path:
    """``n`` images hard-linked from the labelled photos in ``src`` under new names."""
    from evaluate import make_folder as link_photos  # benchmarks/evaluate.py, beside this file

    return link_photos(dst, n, src)


class Timer:
    """Wraps a callable and adds up the seconds spent in it."""

    def __init__(self, fn, sync=None):
        self.fn, self.sync, self.seconds, self.calls = fn, sync, 0.0, 0

    def __call__(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return self.fn(*a, **k)
        finally:
            if self.sync is not None:
                self.sync()
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photos", required=True, help="folder of photos with a labels.csv")
    ap.add_argument("--n", type=int, default=240)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: bare, workers")
    ap.add_argument("--label", default="", help="a name for this code version in the output")
    ap.add_argument(
        "--shift-device",
        default=None,
        help="run the batched torch shifts on this device (cuda, cpu)",
    )
    ap.add_argument("--shift-jpeg", default="cpu", choices=("device", "cpu"))
    ap.add_argument("--model", default="lite0", help="model spec (default lite0)")
    ap.add_argument(
        "--shift-group",
        type=int,
        default=0,
        help="photos shifted together on the shift device (default: the device type's)",
    )
    ap.add_argument(
        "--random-weights",
        action="store_true",
        help="timm architecture with random weights (no download)",
    )
    args = ap.parse_args()
    skip = {s for s in args.skip.split(",") if s}
    if args.shift_group:
        from robustlab.execution import device_shifts

        device_shifts.DEFAULT_GROUPS.update(cpu=args.shift_group, cuda=args.shift_group)

    import torch

    import robustlab
    from robustlab.workflows.evaluate import EvaluateRequest, make_plan
    from robustlab.models import load_model
    from robustlab.execution.executors import iterate_local
    from robustlab.execution.bookkeeping import plan_tasks
    from robustlab.execution.runner import RunOptions, _ModelTransform
    from robustlab.execution.tasks import TaskDataset
    from robustlab.store import Store

    tmp = Path(tempfile.mkdtemp(prefix="rl-gpu-"))
    data = make_folder(Path(args.photos), tmp / "photos", args.n)
    weights = None
    if args.random_weights:  # a large architecture's speed, without its download
        import timm

        weights = tmp / "random.pth"
        torch.save(
            timm.create_model(args.model.split(":", 1)[1], pretrained=False).state_dict(), weights
        )
    model = load_model(args.model, device=args.device, batch_size=args.batch_size, weights=weights)
    shift_kw = (
        {"shift_device": args.shift_device, "shift_jpeg": args.shift_jpeg}
        if args.shift_device
        else {}
    )
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else None
    out = {
        "label": args.label,
        "robustlab": robustlab.__version__,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if sync else None,
        "cpus": os.cpu_count(),
        "photos": args.n,
        "workers": args.workers,
        "batch_size": args.batch_size,
        "model": args.model,
        "shift_device": args.shift_device,
        "shift_group": args.shift_group or None,
    }

    # Warm-up: compiles (and caches) every numba kernel in this process before workers
    # start, so no timed part pays for compilation.
    t0 = time.perf_counter()
    one = make_folder(Path(args.photos), tmp / "one", 1)
    robustlab.evaluate(
        model,
        one,
        suite="imagenet-c",
        db=tmp / "warm.duckdb",
        workers=0,
        batch_size=args.batch_size,
        progress=False,
        **shift_kw,
    )
    out["warmup_s"] = round(time.perf_counter() - t0, 2)

    plan = make_plan(EvaluateRequest.build(model, data, suite="imagenet-c"))
    cells, samples = plan.cells, plan.samples
    n_images = len(samples) * len(cells)
    out["predictions"] = n_images
    transform = _ModelTransform(model)

    if "bare" not in skip:
        import numpy as np

        rng = np.random.default_rng(0)
        imgs = [rng.integers(0, 256, (224, 224, 3), dtype=np.uint8) for _ in range(args.batch_size)]
        batch = torch.stack([transform(x) for x in imgs]).contiguous()
        for _ in range(3):
            model.predict(batch)
        reps = max(4, (8192 if sync else 256) // args.batch_size)
        t0 = time.perf_counter()
        for _ in range(reps):
            model.predict(batch)
        if sync:
            sync()
        out["bare_img_s"] = round(reps * args.batch_size / (time.perf_counter() - t0), 1)
        out["bare_input_dtype"] = str(batch.dtype)

    if "workers" not in skip:
        tasks, _, _ = plan_tasks(
            samples, cells, Store(tmp / "none.duckdb"), "none", RunOptions().cells_per_task
        )
        ds = TaskDataset(samples, tasks, plan.images, transform)
        if args.shift_device:  # the workers only decode: each photo counts as its cells
            from robustlab.execution.device_shifts import CleanTaskDataset

            ds = CleanTaskDataset(samples, tasks, plan.images, None)
        t0 = time.perf_counter()
        n = 0
        for item in iterate_local(ds, workers=args.workers, prefetch=2):
            if item[1] is not None:  # (index, tensor, errors, ...)
                n += len(cells) if args.shift_device else item[1].shape[0]
        secs = time.perf_counter() - t0
        out["workers_img_s"] = round(n / secs, 1)
        out["workers_tasks"] = len(tasks)

    if args.shift_device:
        out.update(shift_rates(plan, args, sync))

    # Measure where the main process spends its time inside evaluate.
    predict_name = "predict_topk" if hasattr(model, "predict_topk") else "predict"
    timed_predict = Timer(getattr(model, predict_name), sync)
    setattr(model, predict_name, timed_predict)
    timed_write = Timer(Store.write_predictions)
    Store.write_predictions = lambda self, *a, **k: timed_write(self, *a, **k)
    t0 = time.perf_counter()
    done = robustlab.evaluate(
        model,
        data,
        suite="imagenet-c",
        db=tmp / "run.duckdb",
        workers=args.workers,
        batch_size=args.batch_size,
        progress=False,
        **shift_kw,
    )
    df = getattr(done, "table", done)  # an EvaluateResult; a DataFrame before it existed
    secs = time.perf_counter() - t0
    out.update(
        evaluate_s=round(secs, 2),
        evaluate_pred_s=round(n_images / secs, 1),
        predict_s=round(timed_predict.seconds, 2),
        predict_calls=timed_predict.calls,
        db_write_s=round(timed_write.seconds, 2),
        db_write_calls=timed_write.calls,
        stored=int(df["n"].sum()),
        clean_top1=float(df.loc[df["shift"] == "clean", "top1"].iloc[0]),
    )
    if "workers_img_s" in out:
        out["evaluate_over_workers"] = round(out["evaluate_pred_s"] / out["workers_img_s"], 3)
    if "bare_img_s" in out:
        out["evaluate_over_bare"] = round(out["evaluate_pred_s"] / out["bare_img_s"], 3)
    print(json.dumps(out), flush=True)


def shift_rates(plan, args, sync) -> dict:
    """Batched shifts alone (cells/s on the device) and the device JPEG's distance to Pillow's."""
    import numpy as np
    import torch

    from robustlab.pipeline import as_stored

    try:
        from robustlab.execution.device_shifts import DEFAULT_GROUPS

        group = DEFAULT_GROUPS[torch.device(args.shift_device).type]
    except ImportError:  # a baseline checkout from before the groups by device type
        from robustlab.execution.device_shifts import DEFAULT_GROUP as group  # type: ignore[attr-defined]
    from robustlab.shifts.batched import apply, jpeg_roundtrip

    protocol = plan.images.protocol
    samples = plan.samples[:group]
    imgs = np.stack([plan.images.base(s).rgb for s in samples])
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous().to(args.shift_device)
    ids = [s.id for s in samples]
    shifted = [c for c in plan.cells if c[0] != "clean"]
    for name, lv in shifted[::5]:  # warm-up: kernels, textures, generators
        apply(name, lv, x[:2], ids[:2])
    if sync:
        sync()
    t0 = time.perf_counter()
    per_shift: dict[str, float] = {}
    for name, lv in shifted:
        t = time.perf_counter()
        jpeg_roundtrip(apply(name, lv, x, ids), protocol.jpeg_quality, args.shift_jpeg)
        if sync:
            sync()  # per shift, so the slow ones are named (costs a little of the total rate)
        per_shift[name] = per_shift.get(name, 0.0) + time.perf_counter() - t
    rate = len(shifted) * len(samples) / (time.perf_counter() - t0)
    # the device codec's distance from the protocol's (0 on the CPU; nvJPEG on CUDA)
    ours = jpeg_roundtrip(x, protocol.jpeg_quality, "device").permute(0, 2, 3, 1).cpu()
    pil = np.stack([as_stored(im, protocol) for im in imgs])
    mad = float(np.abs(ours.numpy().astype(int) - pil).mean())
    slowest = sorted(per_shift.items(), key=lambda kv: -kv[1])
    return {
        "shifts_img_s": round(rate, 1),
        "jpeg_mad": round(mad, 4),
        "shift_img_s": {
            k: round(sum(c[0] == k for c in shifted) * len(samples) / v, 1) for k, v in slowest
        },
    }


if __name__ == "__main__":
    main()
