"""Speed of ImageNet-D synthesis with the full-size Stable Diffusion architecture, and of mining.

The pipeline is Stable Diffusion 1.5's architecture built from configs in code (UNet 860M
parameters, VAE, CLIP ViT-L/14 text encoder) with random weights: the compute is the
architecture's, so the timing is a real checkpoint's, and nothing is downloaded. It is
called exactly as ``robustlab.shifts.generative.text2image.TextToImage`` calls it (a list of prompts, one
CPU ``torch.Generator`` per image, classifier-free guidance, ``output_type="np"``), so the
number is seconds per image of ``robustlab synth``.

On the CPU a 30-step image takes minutes, so ``--steps`` is measured at 1 and 2 steps and
extrapolated linearly (fixed cost = text encoder + VAE decode; per-step cost = UNet x 2 for
guidance); the JSON says ``"extrapolated": true`` when it did.

Mining throughput (``--mining``, CPU only, needs robustlab's models but not DuckDB): images
per second through the three bundled surrogates (decode + each model's preprocessing +
forward), the work ``robustlab mine`` does per candidate besides storing predictions.

Usage (one JSON line on stdout):
    PYTHONPATH=src python benchmarks/synth.py --device cpu --mining
    PYTHONPATH=src python benchmarks/synth.py --device cuda --fp16 --batch 1,8 --steps 30
The GPU form imports only torch, diffusers and transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import time

# ImageNet-D's grid: 113 classes x (468 backgrounds + 47 textures + 32 materials).
GRID_PAIRS = 113 * (468 + 47 + 32)


def _byte_tokenizer():
    """A CLIP tokenizer over single-byte symbols (no download; prompts tokenise to one id per
    character, at most 77 as in SD)."""
    from transformers import CLIPTokenizer

    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = [chr(c) for c in keep] + [chr(256 + i) for i in range(256 - len(keep))]
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for suffix in ("", "</w>"):
        for c in chars:
            vocab[c + suffix] = len(vocab)
    return CLIPTokenizer(vocab=vocab, merges=[], model_max_length=77)


def full_size_sd(device: str, dtype):
    """Stable Diffusion 1.5's architecture (v1-inference.yaml sizes), random weights."""
    import torch
    from diffusers import (
        AutoencoderKL,
        DDIMScheduler,
        StableDiffusionPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        sample_size=64,
        in_channels=4,
        out_channels=4,
        layers_per_block=2,
        block_out_channels=(320, 640, 1280, 1280),
        cross_attention_dim=768,
        attention_head_dim=8,
        down_block_types=(
            "CrossAttnDownBlock2D",
            "CrossAttnDownBlock2D",
            "CrossAttnDownBlock2D",
            "DownBlock2D",
        ),
        up_block_types=(
            "UpBlock2D",
            "CrossAttnUpBlock2D",
            "CrossAttnUpBlock2D",
            "CrossAttnUpBlock2D",
        ),
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        latent_channels=4,
        sample_size=512,
        layers_per_block=2,
        block_out_channels=(128, 256, 512, 512),
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
    )
    text = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=49408,
            hidden_size=768,
            intermediate_size=3072,
            num_hidden_layers=12,
            num_attention_heads=12,
            max_position_embeddings=77,
            hidden_act="quick_gelu",
            bos_token_id=0,
            eos_token_id=1,
            pad_token_id=1,
        )
    )
    scheduler = DDIMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
    )
    pipe = StableDiffusionPipeline(
        vae=vae,
        text_encoder=text,
        tokenizer=_byte_tokenizer(),
        unet=unet,
        scheduler=scheduler,
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    params = sum(p.numel() for p in unet.parameters())
    return pipe.to(device=device, dtype=dtype), params


def time_call(
    pipe, batch: int, steps: int, size: int, device: str, repeats: int
) -> tuple[float, float]:
    """Median wall seconds and process CPU seconds of one pipeline call for ``batch`` prompts."""
    import torch

    prompts = [f"a photo of a backpack in the forest broadleaf {i}" for i in range(batch)]
    times = []
    for r in range(repeats):
        gens = [torch.Generator("cpu").manual_seed(1000 * r + i) for i in range(batch)]
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.inference_mode():
            pipe(
                prompt=prompts,
                height=size,
                width=size,
                num_inference_steps=steps,
                guidance_scale=7.5,
                generator=gens,
                output_type="np",
            )
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    times.sort()
    return times[len(times) // 2]


def mining_throughput(n: int = 48) -> dict:
    """Images per second through lite0, lite1 and lite2 (decode + preprocess + forward), CPU."""
    import numpy as np
    import torch
    from PIL import Image

    from robustlab.models import load_model

    root = os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "imagenet-samples"
    )
    files = (
        sorted(f for f in os.listdir(root) if f.endswith(".JPEG"))[:n]
        if os.path.isdir(root)
        else []
    )
    if files:
        load = [
            lambda f=f: np.asarray(Image.open(os.path.join(root, f)).convert("RGB")) for f in files
        ]
        source = "imagenet-samples photos"
    else:
        rng = np.random.default_rng(0)
        arrays = [rng.integers(0, 256, (375, 500, 3), dtype=np.uint8) for _ in range(n)]
        load = [lambda a=a: a for a in arrays]
        source = "random 500x375 images (no ../shared/data)"
    models = [load_model(m, device="cpu") for m in ("lite0", "lite1", "lite2")]
    for m in models:  # warm-up
        m.predict(torch.stack([m.transform(load[0]())]))
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(load), 16):
        imgs = [f() for f in load[start : start + 16]]
        for m in models:
            m.predict(torch.stack([m.transform(x) for x in imgs]))
    sec, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "mining_images": len(load),
        "mining_source": source,
        "mining_seconds": round(sec, 2),
        "mining_cpu_seconds": round(cpu, 2),
        "mining_images_per_s_3_surrogates": round(len(load) / sec, 2),
        "mining_images_per_cpu_s_3_surrogates": round(len(load) / cpu, 2),
        "torch_threads": torch.get_num_threads(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fp16", action="store_true", help="float16 weights (GPU)")
    ap.add_argument("--batch", default="1", help="images per call; a comma list times each")
    ap.add_argument("--steps", type=int, default=30, help="steps to report (CPU: extrapolated)")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--mining", action="store_true", help="also time mining (CPU, robustlab models)"
    )
    ap.add_argument("--mining-only", action="store_true", help="only time mining")
    args = ap.parse_args()

    import torch

    if args.mining_only:
        print(json.dumps({"load_average": os.getloadavg()[0], **mining_throughput()}))
        return
    dtype = torch.float16 if args.fp16 else torch.float32
    t0 = time.perf_counter()
    pipe, params = full_size_sd(args.device, dtype)
    build = time.perf_counter() - t0
    out = {
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else None,
        "dtype": str(dtype).replace("torch.", ""),
        "size": args.size,
        "steps": args.steps,
        "unet_params_m": round(params / 1e6, 1),
        "build_seconds": round(build, 1),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    runs = []
    for batch in [int(b) for b in str(args.batch).split(",")]:
        if args.device != "cpu":
            time_call(pipe, batch, 1, args.size, args.device, 1)  # warm-up (kernels, allocator)
        run = {"batch": batch}
        if args.device == "cpu":
            # Wall time on a shared machine measures the neighbours; process CPU time (all
            # threads) is the compute, an upper bound on one idle core's wall time.
            (w1, c1), (w2, c2) = (
                time_call(pipe, batch, n, args.size, args.device, 1) for n in (1, 2)
            )
            cpu_step = max(c2 - c1, 1e-9)
            cpu_call = (c1 - cpu_step) + cpu_step * args.steps
            # A loaded machine can make 2 steps look faster than 1 in wall time; then the
            # wall extrapolation is noise, and the CPU time stands in for it.
            call = (w1 - (w2 - w1)) + (w2 - w1) * args.steps if w2 > w1 else cpu_call
            run.update(
                extrapolated=True,
                wall_1_step_s=round(w1, 2),
                wall_2_steps_s=round(w2, 2),
                cpu_1_step_s=round(c1, 2),
                cpu_2_steps_s=round(c2, 2),
                wall_is_cpu_time=w2 <= w1,
                cpu_seconds_per_image=round(cpu_call / batch, 2),
            )
        else:
            call, _ = time_call(pipe, batch, args.steps, args.size, args.device, args.repeats)
            run.update(extrapolated=False)
        per_image = call / batch
        run.update(
            seconds_per_image=round(per_image, 3),
            images_per_hour=round(3600 / per_image, 1),
            hours_for_imagenet_d_grid_1_per_pair=round(GRID_PAIRS * per_image / 3600, 1),
        )
        runs.append(run)
    out.update(runs=runs, imagenet_d_grid_pairs=GRID_PAIRS, torch=torch.__version__)
    if args.mining:
        out.update(mining_throughput())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
