"""``robustlab synth --checkpoint DIR --out DIR``: ImageNet-D style images from a prompt grid."""

from __future__ import annotations

from robustlab.commands._args import (
    PRECISIONS,
    Deprecated,
    add_backend,
    add_device,
    add_into_existing,
    add_no_progress,
    add_seed,
    count,
)


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


# --precision values (those of evaluate, mine and train) as the pipeline's torch dtypes.
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "synth",
        help="draw classes x nuisances with a local diffusion checkpoint as <subset>/<class>/<id>.png",
        description="Prompt a local diffusers text-to-image checkpoint with every (class, "
        "nuisance) pair, N images each, seeded by the seed rule, in ImageNet-D's layout. "
        "Rerunning the same command resumes; other settings on the same --out are refused.",
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="local diffusers text-to-image folder (save_pretrained layout, e.g. SD 1.5/2/SDXL)",
    )
    p.add_argument(
        "--out", required=True, help="output folder (resumes when it already holds a run)"
    )
    p.add_argument(
        "--label-space",
        default="imagenet-d",
        help="label space whose classes are drawn (default imagenet-d: 113 classes)",
    )
    p.add_argument(
        "--classes",
        default=None,
        help="comma-separated class folders, names or indices (default: all)",
    )
    p.add_argument(
        "--nuisances",
        default="background,texture,material",
        help="comma-separated built-in vocabularies (background, texture, material) "
        "or CSV files with a 'name' column (default: all three)",
    )
    p.add_argument(
        "--max-nuisances", type=int, default=None, help="only the first N names of each vocabulary"
    )
    p.add_argument("--per-pair", type=int, default=1, help="images per (class, nuisance) pair")
    p.add_argument(
        "--templates",
        default=None,
        help="CSV with columns subset,template replacing the default prompt templates",
    )
    p.add_argument("--steps", type=int, default=30, help="denoising steps (default 30)")
    p.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance scale")
    p.add_argument("--size", type=int, default=512, help="image side in pixels (multiple of 8)")
    p.add_argument("--negative-prompt", default="", help="negative prompt (default none)")
    p.add_argument(
        "--sampler",
        default=None,
        help="replace the checkpoint's scheduler: ddim, pndm, euler, euler-a, dpm++, lms, unipc",
    )
    add_seed(p)
    add_into_existing(p)
    p.add_argument("--limit", type=count, default=None, help="only the first N images of the grid")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="prompts per pipeline call (default 8 on a GPU, 1 on the CPU)",
    )
    add_device(p)
    p.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="numeric precision of the pipeline's forward pass: fp32, bf16 or fp16 (its weights "
        "cast to it; default fp16 on a GPU, fp32 on the CPU)",
    )
    p.add_argument(
        "--dtype",
        action=Deprecated,
        dest="dtype",
        choices=["float32", "float16", "bfloat16"],
        new="--precision fp32|fp16|bf16",
    )
    add_backend(p)
    add_no_progress(p)
    p.set_defaults(func=run)


def _timing(res) -> str:
    """Wall time, split into loading and drawing: the pipeline's load (tens of seconds for
    a real checkpoint) is not the model's drawing speed, which is what a rate should say."""
    if not res.draw_seconds:
        return f"{res.seconds:.1f} s, nothing drawn"
    rate = res.written / res.draw_seconds
    return (
        f"{res.seconds:.1f} s: {res.seconds - res.draw_seconds:.1f} s planning and loading "
        f"the pipeline, {res.draw_seconds:.1f} s drawing at {rate:.3g} images/s"
    )


def run(args) -> int:
    from robustlab.workflows.imagenet_d.synth.request import (
        SynthDiffusion,
        SynthExecution,
        SynthGrid,
    )
    from robustlab.workflows.imagenet_d.synth.run import synth
    from robustlab.workflows.keywords import specs_from_args

    parts = {"grid": SynthGrid, "diffusion": SynthDiffusion, "execution": SynthExecution}
    specs = specs_from_args(
        "synth",
        args,
        parts,
        classes=_csv(args.classes),
        nuisances=_csv(args.nuisances) or [],
        guidance_scale=args.guidance,
        height=args.size,
        width=args.size,
        dtype=args.dtype or DTYPES.get(args.precision),
    )
    from robustlab.records.manifest import MANIFEST

    res = synth(args.out, args.checkpoint, **specs)
    print(
        f"{res.out}: {res.written} written, {res.existing} already there, "
        f"{len(res.failures)} failed ({res.planned} planned; {_timing(res)}); "
        f"manifest: {res.out / MANIFEST}"
    )
    if res.stages:
        from robustlab.execution.ray.pipeline import stages_line

        print(stages_line(res.stages))
    for file, reason in res.failures[:10]:
        print(f"  skipped {file}: {reason}")
    if len(res.failures) > 10:
        print(f"  ... {len(res.failures) - 10} more in the manifest")
    return 0 if res.written + res.existing else 1
