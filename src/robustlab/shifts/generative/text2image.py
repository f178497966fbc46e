"""The synthesis backend: a local diffusers text-to-image pipeline, batched, seeded per image.

Any Stable Diffusion or SDXL checkpoint written with ``save_pretrained`` (a folder with
``model_index.json``) loads through ``AutoPipelineForText2Image``; nothing is downloaded.
On a GPU it runs in float16 and in batches, on the CPU in float32.

Reproducibility: each image's starting noise comes from its own CPU ``torch.Generator``
seeded with the grid's seed for that image, so an image's content does not depend on which
other prompts share its batch (diffusers draws one latent per generator). Its bytes may: the
float sums of a batched forward pass, and of a CPU one run on another number of torch
threads, differ in the last bits, which moves a few pixels by one unit (a tiny random
checkpoint, 64 px: batches of 3 against 1, 1 thread against 2). Byte-identical files
therefore need the same batch size and threads (the Ray backend keeps both the local
backend's). Bit-identical results across CPU and GPU, float32 and float16, or library
versions are not promised: the denoising arithmetic differs between them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import InputError, MissingResourceError
from robustlab.shifts.generative._diffusers import load_auto_pipeline, pipeline_dtype
from robustlab.models.weights import checkpoint_fingerprint

# Short sampler names -> diffusers scheduler classes (None: the checkpoint's own).
SCHEDULERS = {
    "ddim": "DDIMScheduler",
    "pndm": "PNDMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler-a": "EulerAncestralDiscreteScheduler",
    "dpm++": "DPMSolverMultistepScheduler",
    "lms": "LMSDiscreteScheduler",
    "unipc": "UniPCMultistepScheduler",
}


def checkpoint_problem(path) -> str | None:
    """Why ``path`` is not a diffusers checkpoint folder, or None."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return f"{p} is not a folder"
    index = p / "model_index.json"
    if not index.is_file():
        return f"{p} has no model_index.json (save a diffusers text-to-image pipeline there)"
    try:
        data = json.loads(index.read_text())
    except (OSError, ValueError) as exc:
        return f"{index} is not readable JSON ({type(exc).__name__})"
    if not isinstance(data, dict) or not data.get("_class_name"):
        return f"{index} names no pipeline class"
    return None


def describe_checkpoint(path) -> dict[str, Any]:
    """Path, fingerprint, pipeline class and scheduler of a folder, without loading weights.

    Raises:
        MissingResourceError: not a diffusers checkpoint folder.
    """
    problem = checkpoint_problem(path)
    if problem:
        raise MissingResourceError(
            f"synthesis checkpoint: {problem}",
            hint="pass a folder written by a diffusers pipeline's save_pretrained",
        )
    root = Path(path).expanduser().resolve()
    index = json.loads((root / "model_index.json").read_text())
    sched = index.get("scheduler")
    return {
        "path": str(root),
        "fingerprint": checkpoint_fingerprint(root),
        "pipeline": index.get("_class_name"),
        "scheduler": sched[1] if isinstance(sched, list) and len(sched) > 1 else None,
    }


class TextToImage:
    """A local diffusers text-to-image pipeline.

    Args:
        path: Checkpoint folder (``save_pretrained`` layout).
        device: ``cpu``, ``cuda``, ``cuda:1``; None: cuda when available.
        dtype: ``float32``/``float16``/``bfloat16``; None: float16 on a GPU, float32 on CPU.
        scheduler: A key of :data:`SCHEDULERS` to replace the checkpoint's sampler, or None.

    Raises:
        MissingResourceError: not a checkpoint folder.
        InputError: the folder does not load as a text-to-image pipeline (one line).
    """

    def __init__(
        self,
        path,
        *,
        device: str | None = None,
        dtype: str | None = None,
        scheduler: str | None = None,
    ):

        from robustlab.models.devices import auto_device

        record = describe_checkpoint(path)
        self.path = Path(record["path"])
        self.fingerprint = record["fingerprint"]
        self.device = auto_device(device)
        self.dtype = pipeline_dtype(self.device, dtype, "synthesis")
        if scheduler is not None and scheduler not in SCHEDULERS:
            raise InputError(f"unknown sampler {scheduler!r}; use one of {', '.join(SCHEDULERS)}")
        pipe = load_auto_pipeline(
            "AutoPipelineForText2Image", self.path, self.dtype, "a text-to-image pipeline"
        )
        if scheduler is not None:
            import diffusers

            pipe.scheduler = getattr(diffusers, SCHEDULERS[scheduler]).from_config(
                pipe.scheduler.config
            )
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(self.device)
        self.multiple = int(getattr(pipe, "vae_scale_factor", 8) or 8)
        self._lock = threading.Lock()

    def __call__(
        self,
        prompts: Sequence[str],
        seeds: Sequence[int],
        *,
        steps: int = 30,
        guidance_scale: float = 7.5,
        height: int = 512,
        width: int = 512,
        negative_prompt: str = "",
    ) -> list[np.ndarray | str]:
        """One image per prompt, in one batch.

        Args:
            prompts: Texts, one per image.
            seeds: Noise seed per image (a CPU ``torch.Generator`` each).
            steps, guidance_scale, height, width, negative_prompt: Passed to the pipeline;
                height and width must be multiples of the VAE's factor.

        Returns:
            Per prompt an HxWx3 uint8 array, or a string saying why that image was refused
            (the safety checker blanked it): a refused image is the caller's counted skip.
        """
        import torch

        if len(prompts) != len(seeds):
            raise ValueError("one seed per prompt")
        for side in (height, width):
            if side < self.multiple or side % self.multiple:
                raise InputError(f"image size {side} is not a multiple of {self.multiple}")
        generators = [torch.Generator("cpu").manual_seed(int(s) & (2**63 - 1)) for s in seeds]
        negative = [negative_prompt] * len(prompts) if negative_prompt else None
        with self._lock, torch.inference_mode():
            out = self.pipe(
                prompt=list(prompts),
                negative_prompt=negative,
                height=int(height),
                width=int(width),
                num_inference_steps=int(steps),
                guidance_scale=float(guidance_scale),
                generator=generators,
                output_type="np",
            )
        images = np.asarray(out.images, dtype=np.float32)
        flagged = getattr(out, "nsfw_content_detected", None) or [False] * len(prompts)
        result: list[np.ndarray | str] = []
        for img, bad in zip(images, flagged):
            if bad:
                result.append("the pipeline's safety checker blanked this image")
            else:
                result.append(np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8))
        return result

    def describe(self) -> dict[str, Any]:
        """JSON-able record of the checkpoint and how it runs (manifest and run records)."""
        sched = self.pipe.scheduler
        return {
            "path": str(self.path),
            "fingerprint": self.fingerprint,
            "pipeline": type(self.pipe).__name__,
            "scheduler": type(sched).__name__,
            "scheduler_config": {
                k: v for k, v in dict(sched.config).items() if not k.startswith("_")
            },
            "device": self.device,
            "dtype": self.dtype,
        }


__all__ = ["TextToImage", "describe_checkpoint", "checkpoint_problem", "SCHEDULERS"]
