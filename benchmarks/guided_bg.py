"""Seconds per 256x256 image of ImageNet-E's guided background edit with the full-size ADM.

Usage (from a repository checkout; only torch and numpy are needed):

    PYTHONPATH=src python benchmarks/guided_bg.py --steps 2             # CPU, extrapolated
    PYTHONPATH=src python benchmarks/guided_bg.py --device cuda --steps 100
    PYTHONPATH=src python benchmarks/guided_bg.py --device cuda --steps 100 --dtype float32

The network is OpenAI's ``256x256_diffusion_uncond`` architecture (552.8 M parameters)
with random weights: the time does not depend on the weights. Each guided step is one
forward and one backward pass through the network (the guidance gradient is taken with
respect to the noisy image), exactly as the shift runs it. The run measures ``--steps``
steps per image (``--repeats`` images after one warm-up image of 1 step) and prints one JSON
line: seconds per step, seconds per image at the measured step count and extrapolated to
the official counts (10: the demo's default; 100: every respaced step), images per hour.

The package's ``__init__`` modules are bypassed (the sampler and network modules are
loaded straight from ``src/``), so robustlab's other dependencies (OpenCV, scipy...) need
not be installed on a GPU machine.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
import types
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _import_light():
    """``adm`` and ``guided_sampler`` without running the package ``__init__`` files."""
    packages = (
        ("robustlab", ""),
        ("robustlab.shifts", "shifts"),
        ("robustlab.shifts.generative", "shifts/synth"),
    )
    for name, rel in packages:
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [str(SRC / "robustlab" / rel)]
            sys.modules[name] = mod
    return (
        importlib.import_module("robustlab.models.adm"),
        importlib.import_module("robustlab.shifts.generative.guided_sampler"),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1 ...")
    ap.add_argument("--steps", type=int, default=10, help="guided steps per image (1..100)")
    ap.add_argument("--repeats", type=int, default=2, help="timed images")
    ap.add_argument(
        "--dtype", default=None, help="float32, float16 or bfloat16 (default: float16 on a GPU)"
    )
    ap.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's)"
    )
    args = ap.parse_args()

    import numpy as np
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    adm, gs = _import_light()
    cfg = adm.OPENAI_256_UNCOND
    t0 = time.perf_counter()
    with torch.device(args.device):
        torch.manual_seed(0)
        net = adm.ADMUNet(cfg)
    net.eval().requires_grad_(False)
    build_s = time.perf_counter() - t0
    sampler = gs.GuidedBackground(
        adm.Denoiser(net, "adm", cfg.image_size, cfg.learn_sigma),
        device=args.device,
        dtype=args.dtype,
    )
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, (256, 256, 3), dtype=np.uint8)
    keep = np.zeros((256, 256), bool)
    keep[64:192, 80:176] = True

    def sync():
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()

    sampler(img, keep, seed=0, lam=20.0, steps=1)  # warm-up: kernels, allocator, autotuning
    sync()
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times = []
    for r in range(args.repeats):
        sync()
        t = time.perf_counter()
        out = sampler(img, keep, seed=r + 1, lam=20.0, steps=args.steps)
        sync()
        times.append(time.perf_counter() - t)
    assert np.array_equal(out[keep], img[keep])
    per_image = float(np.median(times))
    per_step = per_image / args.steps
    result = {
        "benchmark": "guided_bg",
        "device": args.device,
        "dtype": sampler.dtype,
        "device_name": (
            torch.cuda.get_device_name(args.device)
            if args.device.startswith("cuda")
            else platform.processor() or platform.machine()
        ),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "params_m": round(sum(p.numel() for p in net.parameters()) / 1e6, 1),
        "build_s": round(build_s, 2),
        "steps": args.steps,
        "repeats": args.repeats,
        "s_per_image": round(per_image, 3),
        "s_per_step": round(per_step, 4),
        "s_per_image_10_steps": round(10 * per_step, 2),
        "s_per_image_100_steps": round(100 * per_step, 2),
        "images_per_hour_at_steps": round(3600 / per_image, 1),
        "extrapolated": args.steps not in (10, 100),
    }
    if args.device.startswith("cuda"):
        result["peak_gpu_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
