"""XIMAGENET-12 ``ai_bg``: a diffusion inpainting model redraws the background.

The paper regenerated backgrounds with SDXL inpainting and prompts such as "high-definition
pictures like those in the National Geographic magazine" (REFERENCE.md section 2). Here the
model is whatever local ``diffusers`` inpainting checkpoint the user points at (a folder
with ``model_index.json``: Stable Diffusion 1.5/2 inpainting, SDXL inpainting, ...), loaded
with ``AutoPipelineForInpainting`` and never downloaded.

What the shift guarantees:

- the inpainting mask is the background (white = repaint), so the model keeps the object
  as context, and at the end the *exact* object pixels are pasted back: only the
  background changes, like every other XIMAGENET-12 scenario;
- the diffusion noise comes from a ``torch.Generator`` seeded by one draw from the cell's
  own generator (the seed rule), on the CPU whatever the device, so a cell is reproducible
  on one machine. Bit-identical results across CPU and GPU, or across library versions,
  are not promised: diffusion arithmetic differs between backends;
- the image is processed at ``work_size`` (shorter side, both sides rounded to the VAE's
  multiple; inpainting models are trained near 512 or 1024 pixels) and resized back.

Configuration: the :class:`~robustlab.settings.ToolSettings` of the run
(resolved by the planning process, then carried by each task to the workers): ``inpainter``
= the checkpoint folder (``--inpainter``, default ``$ROBUSTLAB_INPAINTER``), optional
``inpainter_device`` (``cpu``, ``cuda``...; default cuda when available) and
``inpainter_dtype`` (``float32``/``float16``; default float16 on a GPU, float32 on the CPU).
A ``ctx["inpainter"]`` given directly (an :class:`Inpainter` or a folder path) wins.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import CellSkipped, InputError, MissingResourceError
from robustlab.models.weights import checkpoint_fingerprint
from robustlab.seeding import randint
from robustlab.settings import ToolSettings, checked_path, path_setting_problem
from robustlab.shifts.registry import register_resource, register_shift
from robustlab.shifts.generative._diffusers import load_auto_pipeline, pipeline_dtype
from robustlab.shifts.scenes._common import check_image, check_mask

ENV_PATH = "ROBUSTLAB_INPAINTER"
ENV_DEVICE = "ROBUSTLAB_INPAINTER_DEVICE"
ENV_DTYPE = "ROBUSTLAB_INPAINTER_DTYPE"
PROMPT = "high-definition pictures like those in the National Geographic magazine"

AI_BG = {
    "default": {
        "prompt": PROMPT,
        "negative_prompt": "",
        "steps": 30,
        "guidance_scale": 7.5,
        "strength": 1.0,
        "work_size": 512,
    },
}


def _problem(path) -> str | None:
    """Why ``path`` is not a usable diffusers checkpoint folder, or None."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return f"{p} is not a folder"
    if not (p / "model_index.json").is_file():
        return f"{p} has no model_index.json (save a diffusers inpainting pipeline there)"
    return None


class Inpainter:
    """A local diffusers inpainting pipeline that redraws everything outside an object mask.

    Args:
        path: Folder written by ``save_pretrained`` (holds ``model_index.json``).
        device: ``cpu``/``cuda``/``cuda:1``; None: cuda when available.
        dtype: ``"float32"`` or ``"float16"``; None: float16 on a GPU, float32 on the CPU.

    Raises:
        InputError: the folder is not a loadable inpainting checkpoint (one line).
    """

    def __init__(self, path, *, device: str | None = None, dtype: str | None = None):
        from robustlab.models.devices import auto_device

        problem = _problem(path)
        if problem:
            raise InputError(f"inpainter: {problem}")
        self.path = Path(path).expanduser().resolve()
        self.device = auto_device(device)
        self.dtype = pipeline_dtype(self.device, dtype, "inpainter")
        pipe = load_auto_pipeline(
            "AutoPipelineForInpainting", self.path, self.dtype, "an inpainting pipeline"
        )
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(self.device)
        self.multiple = int(getattr(pipe, "vae_scale_factor", 8) or 8)
        self.fingerprint = checkpoint_fingerprint(self.path)
        self._lock = threading.Lock()

    def working_size(self, height: int, width: int, work_size: int | None) -> tuple[int, int]:
        """(height, width) the model runs at: shorter side ``work_size``, multiples of the VAE's."""
        scale = 1.0 if not work_size else float(work_size) / min(height, width)
        m = self.multiple
        return (
            max(m, int(round(height * scale / m)) * m),
            max(m, int(round(width * scale / m)) * m),
        )

    def __call__(
        self,
        image: np.ndarray,
        keep: np.ndarray,
        *,
        seed: int,
        prompt: str = PROMPT,
        negative_prompt: str = "",
        steps: int = 30,
        guidance_scale: float = 7.5,
        strength: float = 1.0,
        work_size: int | None = 512,
    ) -> np.ndarray:
        """Redraw the pixels outside ``keep``; the pixels inside are returned unchanged.

        Args:
            image: HxWx3 uint8 RGB.
            keep: HxW bool, True on the object (kept); the rest is repainted.
            seed: Seed of the diffusion noise (a CPU ``torch.Generator``).
            prompt, negative_prompt, steps, guidance_scale, strength: Passed to the pipeline.
            work_size: Shorter side the model runs at (None: the image's own size).

        Returns:
            HxWx3 uint8.

        Raises:
            ValueError: the pipeline's safety checker blanked the result (it would be a black
                background under the scenario's name, so it is refused, not stored).
        """
        import torch
        from PIL import Image

        h, w = image.shape[:2]
        wh, ww = self.working_size(h, w, work_size)
        src = Image.fromarray(image, "RGB")
        repaint = Image.fromarray(np.where(keep, 0, 255).astype(np.uint8), "L")
        if (wh, ww) != (h, w):
            src = src.resize((ww, wh), Image.Resampling.BICUBIC)
            repaint = repaint.resize((ww, wh), Image.Resampling.NEAREST)
        generator = torch.Generator("cpu").manual_seed(int(seed))
        with self._lock, torch.inference_mode():
            out = self.pipe(
                prompt=prompt,
                negative_prompt=negative_prompt or None,
                image=src,
                mask_image=repaint,
                height=wh,
                width=ww,
                num_inference_steps=int(steps),
                guidance_scale=float(guidance_scale),
                strength=float(strength),
                generator=generator,
                output_type="np",
            )
        flagged = getattr(out, "nsfw_content_detected", None)
        if flagged and any(flagged):
            raise CellSkipped("the inpainting pipeline's safety checker blanked this image")
        gen = np.clip(np.round(np.asarray(out.images[0], np.float32) * 255.0), 0, 255).astype(
            np.uint8
        )
        if gen.shape[:2] != (h, w):
            gen = np.asarray(Image.fromarray(gen, "RGB").resize((w, h), Image.Resampling.BICUBIC))
        return np.where(keep[..., None], image, gen).astype(np.uint8)

    def describe(self) -> dict[str, Any]:
        """JSON-able record of the checkpoint and how it runs."""
        return {
            "path": str(self.path),
            "fingerprint": self.fingerprint,
            "device": self.device,
            "dtype": self.dtype,
            "pipeline": type(self.pipe).__name__,
            "scheduler": type(self.pipe.scheduler).__name__,
        }


_CACHE: dict[tuple[str, str | None, str | None], Inpainter] = {}
_CACHE_LOCK = threading.Lock()


def _settings(path, device, dtype, settings: ToolSettings | None) -> tuple[Path, str, str | None]:
    """(checkpoint folder, device, dtype): the arguments given, else the run's ``settings``
    (None: the environment's); device resolved, dtype None = the device's default.

    Raises:
        MissingResourceError: no checkpoint given or configured.
    """
    from robustlab.models.devices import auto_device

    tools = settings if settings is not None else ToolSettings.from_environment()
    path = path if path is not None else tools.inpainter
    if not path:
        raise MissingResourceError(_hint())
    device = auto_device(device or tools.inpainter_device)
    return Path(path).expanduser().resolve(), device, dtype or tools.inpainter_dtype


def get_inpainter(
    path=None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    settings: ToolSettings | None = None,
) -> Inpainter:
    """The :class:`Inpainter` for ``path`` (default: the ``settings``' ``inpainter``, for
    None ``$ROBUSTLAB_INPAINTER``), loaded once per process.

    Raises:
        MissingResourceError: nothing configured.
        InputError: the folder is not a usable checkpoint.
    """
    root, device, dtype = _settings(path, device, dtype, settings)
    key = (str(root), device, dtype)
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = Inpainter(root, device=device, dtype=dtype)
        return _CACHE[key]


def describe_inpainter(
    path=None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    settings: ToolSettings | None = None,
) -> dict[str, Any]:
    """:meth:`Inpainter.describe` of the configured checkpoint, for manifests and run records.

    A checkpoint already loaded in this process describes itself; otherwise the same keys
    are read from its folder (``model_index.json``) and resolved as :func:`get_inpainter`
    would, because loading gigabytes of weights in a parent process whose workers do the
    inpainting only to name them would double the memory.

    Raises:
        MissingResourceError: nothing configured.
        InputError: the folder is not a usable checkpoint.
    """
    root, device, dtype = _settings(path, device, dtype, settings)
    problem = _problem(root)
    if problem:
        raise InputError(f"inpainter: {problem}")
    from robustlab.shifts.generative.tiny import warn_if_random

    warn_if_random(root)  # a run planned with a tiny-checkpoints folder says so
    with _CACHE_LOCK:
        loaded = _CACHE.get((str(root), device, dtype))
    if loaded is not None:
        return loaded.describe()
    try:
        index = json.loads((root / "model_index.json").read_text())
    except (OSError, ValueError):
        index = {}
    scheduler = index.get("scheduler")
    return {
        "path": str(root),
        "fingerprint": checkpoint_fingerprint(root),
        "device": device,
        "dtype": dtype or ("float16" if device.startswith("cuda") else "float32"),
        "pipeline": index.get("_class_name"),
        "scheduler": scheduler[1] if isinstance(scheduler, list) and len(scheduler) > 1 else None,
    }


def checked_inpainter(path) -> str:
    """The absolute path of a checkpoint folder the user named (``--inpainter``), once it
    is usable.

    Raises:
        InputError: not a folder, or no ``model_index.json`` in it (one line).
    """
    return checked_path(path, _problem, what="inpainter", hint=_hint())


def _hint() -> str:
    return (
        f"pass --inpainter (or set {ENV_PATH}) to a local diffusers inpainting checkpoint "
        "folder (e.g. a saved StableDiffusionInpaintPipeline or SDXL inpainting model)"
    )


def _check(settings: ToolSettings) -> str | None:
    return path_setting_problem(settings, "inpainter", _problem, _hint())


def _load(settings: ToolSettings) -> Inpainter:
    return get_inpainter(settings=settings)


def _describe(settings: ToolSettings) -> dict[str, Any]:
    return describe_inpainter(settings=settings)


register_resource("inpainter", check=_check, load=_load, describe=_describe)


@register_shift(
    "ai_bg", family="background", params=AI_BG, needs=("mask", "inpainter"), tags=("ximagenet12",)
)
def ai_bg(image, p, rng, ctx):
    """Background redrawn by a diffusion inpainting model; object pixels unchanged."""
    x = check_image(image)
    m = check_mask(ctx.get("mask"), x.shape)
    inp = ctx["inpainter"]
    if isinstance(inp, (str, os.PathLike)):
        inp = get_inpainter(inp)
    seed = int(randint(rng, 0, 2**31 - 1))
    return inp(
        x,
        m,
        seed=seed,
        prompt=p["prompt"],
        negative_prompt=p["negative_prompt"],
        steps=p["steps"],
        guidance_scale=p["guidance_scale"],
        strength=p["strength"],
        work_size=p["work_size"],
    )


__all__ = [
    "Inpainter",
    "get_inpainter",
    "describe_inpainter",
    "checked_inpainter",
    "ai_bg",
    "AI_BG",
    "PROMPT",
    "ENV_PATH",
    "ENV_DEVICE",
    "ENV_DTYPE",
]
