"""The guided background sampler of ImageNet-E (the method; the shifts are in guided_bg).

See :mod:`robustlab.shifts.generative.guided_bg` for the method's description and choices. This
module holds only the arithmetic (schedule, guidance, sampling chain) and imports nothing
but numpy and torch from outside robustlab's core, so ``benchmarks/guided_bg.py`` runs it
on a machine that has only torch.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

RESPACING = 100  # the official timestep_respacing
STEPS = 10  # the official demo's default number of steps run (of the 100)
RANGE_LAMBDA = 50.0


# --------------------------------------------------------------------------- schedule
def space_timesteps(num_timesteps: int, count: int) -> list[int]:
    """``count`` evenly spread timesteps of ``0..num_timesteps-1`` (first and last included).

    The stride is accumulated and rounded step by step, as guided-diffusion's
    ``space_timesteps`` does for one section, so "100" picks the same steps.
    """
    if not 1 <= count <= num_timesteps:
        raise ValueError(f"cannot respace {num_timesteps} steps to {count}")
    stride = 1.0 if count == 1 else (num_timesteps - 1) / (count - 1)
    out, cur = [], 0.0
    for _ in range(count):
        out.append(round(cur))
        cur += stride
    return out


@dataclass(frozen=True)
class Respaced:
    """A DDPM schedule respaced to fewer steps; arrays in float64, indexed by the new step."""

    timestep_map: np.ndarray  # new step -> original timestep (what the model is given)
    betas: np.ndarray
    alphas_cumprod: np.ndarray

    @classmethod
    def linear(
        cls,
        num_train_timesteps: int = 1000,
        beta_start: float = 0.0001,
        beta_end: float = 0.02,
        count: int = RESPACING,
    ) -> Respaced:
        base = np.linspace(beta_start, beta_end, num_train_timesteps, dtype=np.float64)
        acp = np.cumprod(1.0 - base)
        keep = space_timesteps(num_train_timesteps, count)
        kept = acp[keep]
        betas = 1.0 - kept / np.append(1.0, kept[:-1])
        return cls(np.asarray(keep, dtype=np.int64), betas, kept)

    def __len__(self) -> int:
        return len(self.betas)

    @property
    def alphas_cumprod_prev(self) -> np.ndarray:
        return np.append(1.0, self.alphas_cumprod[:-1])

    @property
    def posterior_variance(self) -> np.ndarray:
        return self.betas * (1.0 - self.alphas_cumprod_prev) / (1.0 - self.alphas_cumprod)

    @property
    def posterior_log_variance_clipped(self) -> np.ndarray:
        pv = self.posterior_variance
        return np.log(np.append(pv[1], pv[1:]))

    def coefs(self, t: int) -> dict[str, float]:
        """Python floats of step ``t``'s coefficients (x0 from eps, posterior mean, variances)."""
        a, ap, b = self.alphas_cumprod[t], self.alphas_cumprod_prev[t], self.betas[t]
        fixed_large = self.posterior_variance[1] if t == 0 else b
        return {
            "sqrt_recip": float(np.sqrt(1.0 / a)),
            "sqrt_recipm1": float(np.sqrt(1.0 / a - 1.0)),
            "coef1": float(b * np.sqrt(ap) / (1.0 - a)),
            "coef2": float((1.0 - ap) * np.sqrt(1.0 - b) / (1.0 - a)),
            "min_log": float(self.posterior_log_variance_clipped[t]),
            "max_log": float(np.log(b)),
            "fixed_log": float(np.log(fixed_large)),
            "sqrt_a": float(np.sqrt(a)),
            "sqrt_1ma": float(np.sqrt(1.0 - a)),
        }


# --------------------------------------------------------------------------- measures
def hf_loss(x):
    """``mean |FFT2(x)|`` over the last two axes (and everything else): the paper's HF term."""
    import torch

    return torch.fft.fft2(x, dim=(-2, -1)).abs().mean()


def hf_complexity(rgb: np.ndarray, keep: np.ndarray | None = None) -> float:
    """Background complexity of a uint8 image: mean |FFT2| of its [0, 1] pixels over H, W,
    with the object (``keep`` True) set to 0 so that only the background counts."""
    x = np.asarray(rgb, dtype=np.float64) / 255.0
    if keep is not None:
        x = np.where(np.asarray(keep, bool)[..., None], 0.0, x)
    return float(np.abs(np.fft.fft2(x, axes=(0, 1))).mean())


def _range_loss(x):
    return (x - x.clamp(-1, 1)).pow(2).mean(dim=(1, 2, 3)).sum()


# --------------------------------------------------------------------------- classifier
class ClassifierGuide:
    """``log p(true class | image)`` of a robustlab torch classifier, differentiable.

    The model's own preprocessing is replayed with torch ops (resize with antialiasing,
    centre crop, normalise) so the gradient reaches the pixels.

    Raises:
        InputError: the model is not a torch model (ONNX sessions give no gradients).
    """

    def __init__(self, model):
        from robustlab.errors import InputError

        if getattr(model, "module", None) is None:
            raise InputError(
                f"{getattr(model, 'spec', model)}: the adversarial level needs a "
                "torch classifier (timm:, torchvision:, hf:, lite*), not an ONNX "
                "session"
            )
        model.module.requires_grad_(False)  # only the pixels need gradients
        self.model = model

    def column_ids(self, class_name=None, label=None) -> list[int]:
        """The model's output columns that mean the sample's class (one or more)."""
        space = self.model.label_space
        idx = space.index_of(class_name) if class_name is not None else int(label)
        own_classes = self.model.head == "direct" and self.model.model_outputs == len(space)
        if own_classes and len(space) != 1000:
            return [idx]
        return list(space.imagenet_ids[idx])

    def preprocess(self, x01):
        import torch
        from torch.nn import functional as F

        from robustlab.models.preprocess import scaled_side, short_side_size

        p = self.model.preprocessing
        th, tw = p.hw
        h, w = x01.shape[-2:]
        if th == tw and p.resize_mode == "shorter":
            size = short_side_size(h, w, scaled_side(th, p.crop_pct))
        else:
            size = (scaled_side(th, p.crop_pct), scaled_side(tw, p.crop_pct))
        modes = {"nearest": "nearest", "bilinear": "bilinear", "box": "area"}
        mode = modes.get(p.interpolation, "bicubic")
        if tuple(size) != (h, w):
            smooth = mode in ("bilinear", "bicubic")
            kw = {"antialias": True, "align_corners": False} if smooth else {}
            x01 = F.interpolate(x01, size=tuple(size), mode=mode, **kw)
        top, left = round((size[0] - th) / 2.0), round((size[1] - tw) / 2.0)
        x01 = x01[..., top : top + th, left : left + tw]
        mean = torch.tensor(p.mean, device=x01.device, dtype=x01.dtype).view(1, 3, 1, 1)
        std = torch.tensor(p.std, device=x01.device, dtype=x01.dtype).view(1, 3, 1, 1)
        return (x01 - mean) / std

    def log_prob(self, x01, ids: list[int]):
        """Summed over the batch: log of the probability mass on ``ids``."""
        import torch

        logits = self.model._forward(self.preprocess(x01)).float()
        logp = torch.log_softmax(logits, dim=-1)
        return torch.logsumexp(logp[:, ids].to(x01.device), dim=-1).sum()


# --------------------------------------------------------------------------- sampler
def _resize(arr: np.ndarray, h: int, w: int) -> np.ndarray:
    """PIL resize to (h, w): Lanczos for RGB (as the official editor), nearest for a mask."""
    from PIL import Image  # imported only when sizes differ (the benchmark needs no PIL)

    if arr.ndim == 2:
        return np.asarray(Image.fromarray(arr, "L").resize((w, h), Image.Resampling.NEAREST))
    return np.asarray(Image.fromarray(arr, "RGB").resize((w, h), Image.Resampling.LANCZOS))


def _fit(rgb: np.ndarray, s: int) -> np.ndarray:
    return rgb if rgb.shape[:2] == (s, s) else _resize(rgb, s, s)


class GuidedBackground:
    """The guided sampler on a :class:`robustlab.models.adm.Denoiser`.

    Args:
        denoiser: The model (ADM or diffusers UNet2DModel).
        device: ``cpu``/``cuda``...; None: cuda when available.
        dtype: ``float32``, or ``float16``/``bfloat16`` to run the network under autocast;
            None: float16 on a GPU, float32 on the CPU.
    """

    def __init__(self, denoiser, *, device: str | None = None, dtype: str | None = None):
        from robustlab.errors import InputError
        from robustlab.models.devices import auto_device

        self.denoiser = denoiser
        self.device = auto_device(device)
        dtype = dtype or ("float16" if self.device.startswith("cuda") else "float32")
        if dtype not in ("float32", "float16", "bfloat16"):
            raise InputError(f"diffusion dtype must be float32, float16 or bfloat16, not {dtype!r}")
        self.dtype = dtype
        denoiser.net.to(self.device)
        self._lock = threading.Lock()

    def describe(self) -> dict[str, Any]:
        """JSON-able record of the checkpoint and how it runs."""
        return {**self.denoiser.describe(), "device": self.device, "dtype": self.dtype}

    def _tensor(self, rgb: np.ndarray):
        import torch

        x = torch.from_numpy(np.array(rgb, copy=True)).permute(2, 0, 1)[None].float()
        return x.div(127.5).sub(1.0).to(self.device)

    def _model_out(self, x, t_orig: int):
        import torch

        t = torch.full((x.shape[0],), float(t_orig), device=self.device)
        if self.dtype == "float32":
            return self.denoiser(x, t).float()
        kind = self.device.split(":")[0]
        with torch.autocast(device_type=kind, dtype=getattr(torch, self.dtype)):
            return self.denoiser(x, t).float()

    def sample(
        self,
        background,
        obj,
        bg_mask,
        *,
        seed: int,
        lam: float,
        steps: int = STEPS,
        range_lambda: float = RANGE_LAMBDA,
        respacing: int = RESPACING,
        guide: ClassifierGuide | None = None,
        guide_ids=None,
        adv_scale: float = 0.0,
    ):
        """Run the guided chain on model-size tensors; returns the final x0_hat (1x3xSxS).

        Args:
            background: 1x3xSxS in [-1, 1], the start image.
            obj: 1x3xSxS in [-1, 1], the image whose object region is kept.
            bg_mask: 1x1xSxS float, 1 where the model redraws (background), 0 on the object.
            seed: Seed of the CPU generator all noise comes from.
            lam: Complexity guidance scale (> 0 busier, < 0 plainer).
            steps: How many of the last respaced steps run.
        """
        import torch

        ns = self.denoiser.schedule
        sched = Respaced.linear(ns.num_train_timesteps, ns.beta_start, ns.beta_end, respacing)
        if not 1 <= int(steps) <= len(sched):
            raise ValueError(f"steps must be in 1..{len(sched)}, got {steps}")
        gen = torch.Generator("cpu").manual_seed(int(seed))

        def noise():
            return torch.randn(tuple(background.shape), generator=gen).to(self.device)

        guided = lam != 0 or range_lambda != 0 or (guide is not None and adv_scale != 0)
        t_start = int(steps) - 1
        c = sched.coefs(t_start)
        x = c["sqrt_a"] * background + c["sqrt_1ma"] * noise()
        x0 = background
        for t in range(t_start, -1, -1):
            c = sched.coefs(t)
            with torch.enable_grad() if guided else torch.no_grad():
                x = x.detach().requires_grad_(guided)
                out = self._model_out(x, int(sched.timestep_map[t]))
                eps = out[:, :3]
                x0 = c["sqrt_recip"] * x - c["sqrt_recipm1"] * eps
                if self.denoiser.learn_sigma:
                    frac = (out[:, 3:] + 1.0) / 2.0
                    log_var = frac * c["max_log"] + (1.0 - frac) * c["min_log"]
                else:
                    log_var = torch.full_like(x, c["fixed_log"])
                mean = c["coef1"] * x0 + c["coef2"] * x
                if guided:
                    loss = -float(lam) * hf_loss((x0 + 1.0) / 2.0) + float(
                        range_lambda
                    ) * _range_loss(x0)
                    if guide is not None and adv_scale != 0:
                        loss = loss + float(adv_scale) * guide.log_prob((x0 + 1.0) / 2.0, guide_ids)
                    grad = torch.autograd.grad(loss, x)[0]
                    mean = mean - torch.exp(log_var) * grad
            mean, log_var, x0 = mean.detach(), log_var.detach(), x0.detach()
            x = mean + (torch.exp(0.5 * log_var) * noise() if t > 0 else 0.0)
            kept = c["sqrt_a"] * obj + c["sqrt_1ma"] * noise()
            x = x * bg_mask + kept * (1.0 - bg_mask)
        return x0.clamp(-1.0, 1.0) * bg_mask + obj * (1.0 - bg_mask)

    def __call__(
        self,
        image: np.ndarray,
        keep: np.ndarray,
        *,
        seed: int,
        lam: float,
        steps: int = STEPS,
        range_lambda: float = RANGE_LAMBDA,
        respacing: int = RESPACING,
        background: np.ndarray | None = None,
        guide: ClassifierGuide | None = None,
        guide_ids=None,
        adv_scale: float = 0.0,
    ) -> np.ndarray:
        """Edit the background of ``image``; the pixels inside ``keep`` come back unchanged.

        Args:
            image: HxWx3 uint8 RGB.
            keep: HxW bool, True on the object.
            seed: Seed of the diffusion noise.
            lam, steps, range_lambda, respacing: See :meth:`sample`.
            background: HxWx3 uint8 start image (e.g. the object removed and the hole
                filled, as the official pipeline); default ``image``.
            guide, guide_ids, adv_scale: The adversarial level's classifier, the output
                columns of the true class and the scale of its log-probability.

        Returns:
            HxWx3 uint8.
        """
        import torch

        h, w = image.shape[:2]
        s = int(self.denoiser.image_size)
        bg = image if background is None else background
        m = keep if keep.shape == (s, s) else _resize(keep.astype(np.uint8) * 255, s, s) > 0
        bg_mask = torch.from_numpy((~m).astype(np.float32))[None, None].to(self.device)
        with self._lock:
            out = self.sample(
                self._tensor(_fit(bg, s)),
                self._tensor(_fit(image, s)),
                bg_mask,
                seed=seed,
                lam=lam,
                steps=steps,
                range_lambda=range_lambda,
                respacing=respacing,
                guide=guide,
                guide_ids=guide_ids,
                adv_scale=adv_scale,
            )
        gen = (out[0].permute(1, 2, 0).float().cpu().numpy() + 1.0) * 127.5
        gen = gen.round().clip(0, 255).astype(np.uint8)
        if gen.shape[:2] != (h, w):
            gen = _resize(gen, h, w)
        return np.where(keep[..., None], image, gen).astype(np.uint8)


__all__ = [
    "GuidedBackground",
    "ClassifierGuide",
    "Respaced",
    "space_timesteps",
    "hf_loss",
    "hf_complexity",
    "RESPACING",
    "STEPS",
    "RANGE_LAMBDA",
]
