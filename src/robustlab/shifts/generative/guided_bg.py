"""ImageNet-E background complexity: guided diffusion makes the background busier or plainer.

The method (REFERENCE.md section 4, read from alibaba/easyrobust's ImageNet-Editing): an
unconditional pixel diffusion model (OpenAI's ``256x256_diffusion_uncond.pt``: 1000 linear
steps, respaced to 100) re-draws the image from a lightly noised start, and at every step
its mean is shifted towards a higher (lambda > 0) or lower (lambda < 0) high-frequency
content of the predicted clean image:

- start ``x = q_sample(background, t_start)``, ``t_start = steps - 1`` of the respaced
  schedule, so only the last ``steps`` of the 100 steps run;
- at step ``t`` predict ``x0_hat`` from the model's eps, take
  ``loss = -lambda * HF(x0_hat) + range_lambda * mean((x0_hat - clamp(x0_hat, -1, 1))**2)``
  with ``HF(x) = mean |FFT2((x + 1) / 2)|`` over H, W, and shift the posterior mean by
  ``Sigma * (-grad_x loss)`` (classifier-guidance style; the gradient runs through the
  network); with a learned sigma, Sigma interpolates in log space between the posterior
  variance and beta as guided-diffusion does;
- after every step the object region is replaced by ``q_sample(object, t)`` (same ``t`` as
  the official code), and the clean object is composited on the final ``x0_hat``;
- the adversarial level adds ``adv_scale * log p(true class | x0_hat)`` to the loss, through
  any robustlab torch classifier and its own preprocessing (resize, crop, normalise, done
  differentiably), so the background is pushed away from the true class. The official
  code meant this for a ResNet-50 but its call is broken; here the gradient also runs
  through the diffusion model, like the complexity term, instead of being taken with
  respect to ``x0_hat`` and added to the ``x`` gradient.

Randomness: every noise tensor comes from one CPU ``torch.Generator`` seeded by a draw
from the cell's generator (the seed rule), so a cell is reproducible on one machine and
the noise is the same on every device. The image is processed at the model's size (256)
and resized back; the exact original object pixels are pasted at the end.

Configuration, like ``ai_bg``'s inpainter: the run's
:class:`~robustlab.settings.ToolSettings` (resolved by the planning process,
then carried by each task): ``bg_diffusion`` (``--bg-diffusion``, default
``$ROBUSTLAB_BG_DIFFUSION``) = a guided-diffusion ``.pt`` file (OpenAI 256x256 unconditional
architecture) or a diffusers ``UNet2DModel`` folder; ``bg_diffusion_device`` (default cuda
when available) and ``bg_diffusion_dtype`` (``float32``, or ``float16``/``bfloat16``
autocast; default float16 on a GPU); ``bg_adv_model`` = the model spec of the adversarial
level's classifier (e.g. ``torchvision:resnet50``).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from robustlab.errors import CellSkipped, RobustlabError
from robustlab.seeding import randint
from robustlab.settings import ToolSettings, checked_path, path_setting_problem
from robustlab.shifts.registry import register_resource, register_shift
from robustlab.shifts.scenes._common import check_image, check_mask
from robustlab.shifts.generative.guided_sampler import (
    RANGE_LAMBDA,
    RESPACING,
    STEPS,
    ClassifierGuide,
    GuidedBackground,
    Respaced,
    hf_complexity,
    hf_loss,
    space_timesteps,
)

ENV_PATH = "ROBUSTLAB_BG_DIFFUSION"
ENV_DEVICE = "ROBUSTLAB_BG_DIFFUSION_DEVICE"
ENV_DTYPE = "ROBUSTLAB_BG_DIFFUSION_DTYPE"
ENV_ADV = "ROBUSTLAB_BG_ADV_MODEL"

ADV_SCALE = 10.0  # the official classifier_scale default

# Levels are the paper's lambda values; parameters as data.
BG_COMPLEXITY = {
    -20: {"lam": -20.0, "steps": STEPS, "range_lambda": RANGE_LAMBDA, "respacing": RESPACING},
    20: {"lam": 20.0, "steps": STEPS, "range_lambda": RANGE_LAMBDA, "respacing": RESPACING},
}
BG_COMPLEXITY_ADV = {
    20: {
        "lam": 20.0,
        "steps": STEPS,
        "range_lambda": RANGE_LAMBDA,
        "respacing": RESPACING,
        "adv_scale": ADV_SCALE,
    },
}


# --------------------------------------------------------------------------- configuration
_CACHE: dict[tuple, GuidedBackground] = {}
_ADV: dict[tuple, ClassifierGuide] = {}
_FAILED: dict[tuple, Exception] = {}
_CACHE_LOCK = threading.Lock()


def _problem(path) -> str | None:
    """Why ``path`` cannot be a checkpoint (cheap: no weights read), or None."""
    p = Path(path).expanduser()
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(4)
        # torch.save writes a zip archive (or, before torch 1.6, a pickle): anything else
        # (a text file, an image, safetensors) is refused here, before any worker starts.
        if head[:4] != b"PK\x03\x04" and head[:1] != b"\x80":
            return f"{p} is not a torch checkpoint file (neither a zip archive nor a pickle)"
        return None
    if p.is_dir():
        from robustlab.errors import InputError
        from robustlab.models.adm import unet_folder

        try:
            unet_folder(p)
        except InputError as exc:
            return str(exc)
        return None
    return f"{p} does not exist"


def _tools(settings: ToolSettings | None) -> ToolSettings:
    return settings if settings is not None else ToolSettings.from_environment()


def _settings(path, device, dtype, settings: ToolSettings | None):
    from robustlab.errors import MissingResourceError
    from robustlab.models.devices import auto_device

    tools = _tools(settings)
    path = path if path is not None else tools.bg_diffusion
    if not path:
        raise MissingResourceError("no background-diffusion checkpoint configured", hint=_hint())
    device = auto_device(device or tools.bg_diffusion_device)
    default = "float16" if device.startswith("cuda") else "float32"
    dtype = dtype or tools.bg_diffusion_dtype or default
    return Path(path).expanduser().resolve(), device, dtype


def get_bg_diffusion(
    path=None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    settings: ToolSettings | None = None,
) -> GuidedBackground:
    """The :class:`GuidedBackground` of ``path`` (default: the ``settings``' ``bg_diffusion``,
    for None ``$ROBUSTLAB_BG_DIFFUSION``), loaded once per process.

    Raises:
        MissingResourceError: nothing configured or nothing at the path.
        InputError: not a guided-diffusion state dict or UNet2DModel folder (one line).
    """
    from robustlab.models.adm import load_denoiser

    root, device, dtype = _settings(path, device, dtype, settings)
    key = (str(root), device, dtype)
    with _CACHE_LOCK:
        if key in _FAILED:  # a checkpoint that does not load fails every sample at once
            raise _FAILED[key]
        if key not in _CACHE:
            try:
                _CACHE[key] = GuidedBackground(load_denoiser(root), device=device, dtype=dtype)
            except RobustlabError as exc:
                _FAILED[key] = exc
                raise
        return _CACHE[key]


def describe_bg_diffusion(
    path=None,
    *,
    device: str | None = None,
    dtype: str | None = None,
    settings: ToolSettings | None = None,
) -> dict[str, Any]:
    """The configured checkpoint's record (path, kind, fingerprint, device, dtype) without
    loading it, for manifests and run records (a loaded one describes itself)."""
    from robustlab.errors import InputError
    from robustlab.models.adm import fingerprint
    from robustlab.shifts.generative.tiny import warn_if_random

    root, device, dtype = _settings(path, device, dtype, settings)
    warn_if_random(root)  # a run planned with a tiny-checkpoints folder says so
    with _CACHE_LOCK:
        loaded = _CACHE.get((str(root), device, dtype))
    if loaded is not None:
        return loaded.describe()
    problem = _problem(root)
    if problem:
        raise InputError(f"background diffusion: {problem}")
    return {
        "path": str(root),
        "kind": "diffusers" if root.is_dir() else "adm",
        "fingerprint": fingerprint(root),
        "device": device,
        "dtype": dtype,
    }


def get_adv_guide(
    spec: str | None = None, *, device: str | None = None, settings: ToolSettings | None = None
) -> ClassifierGuide:
    """The adversarial level's classifier (default: the ``settings``' ``bg_adv_model``, for
    None ``$ROBUSTLAB_BG_ADV_MODEL``), on the diffusion model's device, loaded once per
    process."""
    from robustlab.errors import MissingResourceError
    from robustlab.models import load_model
    from robustlab.models.devices import auto_device

    tools = _tools(settings)
    spec = spec or tools.bg_adv_model
    if not spec:
        raise MissingResourceError(
            "no classifier configured for the adversarial level", hint=_adv_hint()
        )
    device = auto_device(device or tools.bg_diffusion_device)
    with _CACHE_LOCK:
        if (spec, device) not in _ADV:
            _ADV[(spec, device)] = ClassifierGuide(load_model(spec, device=device))
        return _ADV[(spec, device)]


def checked_bg_diffusion(path) -> str:
    """The absolute path of a checkpoint the user named (``--bg-diffusion``), once it is
    usable (cheap: no weights read).

    Raises:
        InputError: not a torch checkpoint file or a UNet2DModel folder (one line).
    """
    return checked_path(path, _problem, what="background diffusion", hint=_hint())


def _hint() -> str:
    return (
        f"pass --bg-diffusion (or set {ENV_PATH}) to OpenAI's 256x256_diffusion_uncond.pt "
        "(openai/guided-diffusion) or a diffusers UNet2DModel folder"
    )


def _adv_hint() -> str:
    return (
        f"pass --bg-adv-model (or set {ENV_ADV}) to a robustlab model spec "
        "(e.g. torchvision:resnet50)"
    )


def _check(settings: ToolSettings) -> str | None:
    return path_setting_problem(settings, "bg_diffusion", _problem, _hint())


def _check_adv(settings: ToolSettings) -> str | None:
    return None if settings.bg_adv_model else _adv_hint()


def _load(settings: ToolSettings) -> GuidedBackground:
    return get_bg_diffusion(settings=settings)


def _describe(settings: ToolSettings) -> dict[str, Any]:
    return describe_bg_diffusion(settings=settings)


def _load_adv(settings: ToolSettings) -> ClassifierGuide:
    return get_adv_guide(settings=settings)


def _describe_adv(settings: ToolSettings) -> dict[str, Any]:
    return {"spec": settings.bg_adv_model}


register_resource("bg_diffusion", check=_check, load=_load, describe=_describe)
register_resource("bg_adv_model", check=_check_adv, load=_load_adv, describe=_describe_adv)


def _sampler(ctx) -> GuidedBackground:
    s = ctx["bg_diffusion"]
    return get_bg_diffusion(s) if isinstance(s, (str, os.PathLike)) else s


def _generate(x, m, p, rng, ctx, **guidance):
    """The level's new background around the kept object, seeded by one draw from ``rng``
    (after the shift's other draws); ``guidance``: the adversarial level's classifier."""
    seed = int(randint(rng, 0, 2**31 - 1))
    return _sampler(ctx)(
        x,
        m,
        seed=seed,
        lam=p["lam"],
        steps=p["steps"],
        range_lambda=p["range_lambda"],
        respacing=p["respacing"],
        background=ctx.get("filled_background"),
        **guidance,
    )


@register_shift(
    "bg_complexity",
    family="background",
    params=BG_COMPLEXITY,
    needs=("mask", "bg_diffusion"),
    tags=("imagenet-e",),
)
def bg_complexity(image, p, rng, ctx):
    """Background made busier (level > 0) or plainer (< 0) by guided diffusion; object kept."""
    x = check_image(image)
    return _generate(x, check_mask(ctx.get("mask"), x.shape), p, rng, ctx)


@register_shift(
    "bg_complexity_adv",
    family="background",
    params=BG_COMPLEXITY_ADV,
    needs=("mask", "bg_diffusion", "bg_adv_model", "class_name"),
    tags=("imagenet-e",),
)
def bg_complexity_adv(image, p, rng, ctx):
    """Busier background also guided away from the true class through a classifier."""
    x = check_image(image)
    m = check_mask(ctx.get("mask"), x.shape)
    guide = ctx["bg_adv_model"]
    if isinstance(guide, str):
        guide = get_adv_guide(guide)
    try:
        ids = guide.column_ids(class_name=ctx["class_name"])
    except ValueError as exc:  # the class is not in the classifier's label space: skip the sample
        raise CellSkipped(f"adversarial guidance: {exc}") from None
    return _generate(x, m, p, rng, ctx, guide=guide, guide_ids=ids, adv_scale=p["adv_scale"])


__all__ = [
    "GuidedBackground",
    "ClassifierGuide",
    "Respaced",
    "space_timesteps",
    "hf_loss",
    "hf_complexity",
    "get_bg_diffusion",
    "describe_bg_diffusion",
    "get_adv_guide",
    "checked_bg_diffusion",
    "bg_complexity",
    "bg_complexity_adv",
    "BG_COMPLEXITY",
    "BG_COMPLEXITY_ADV",
    "ENV_PATH",
    "ENV_DEVICE",
    "ENV_DTYPE",
    "ENV_ADV",
]
