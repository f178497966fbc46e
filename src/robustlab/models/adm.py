"""The ADM denoiser of OpenAI's guided-diffusion, and a loader for it and for diffusers UNets.

ImageNet-E's background-complexity edit (REFERENCE.md section 4) runs OpenAI's
``256x256_diffusion_uncond.pt``. That file is a bare state dict of guided-diffusion's
``UNetModel``, so loading it needs a network whose parameter names and shapes are exactly
the official ones. :class:`ADMUNet` is written here from the published architecture (read
from openai/guided-diffusion's ``unet.py``/``nn.py``/``script_util.py``, not copied): the
module tree is built in the same order with the same attribute names, so
``load_state_dict(strict=True)`` takes the official file unchanged.

The architecture is data (:class:`ADMConfig`); :data:`OPENAI_256_UNCOND` is the checkpoint's
configuration. :func:`load_denoiser` also takes a diffusers ``UNet2DModel`` folder (written
by ``save_pretrained``, or a pipeline folder holding ``unet/``), so a user's own pixel-space
diffusion model runs through the same sampler. Either way the result is a
:class:`Denoiser`: ``denoiser(x, t)`` returns the model output for noisy images ``x`` in
[-1, 1] at original (1000-step) timesteps ``t``.

Differences from the official code that do not change the arithmetic: attention uses
``scaled_dot_product_attention`` (same 1/sqrt(head channels) scaling, fused kernels), and
half precision is ``torch.autocast`` rather than converting the torso's weights, which keeps
normalisation and softmax in float32 as the official GroupNorm32/softmax casts do.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from robustlab.errors import InputError, MissingResourceError


@dataclass(frozen=True)
class ADMConfig:
    """Hyper-parameters of an ADM UNet (guided-diffusion's ``create_model`` arguments).

    Attributes:
        image_size: Side of the square images the model was trained on.
        model_channels: Base width (``num_channels``).
        channel_mult: Width multiplier per resolution level.
        num_res_blocks: Residual blocks per level.
        attention_resolutions: Feature-map sides (in pixels) that get self-attention, as
            guided-diffusion's ``"32,16,8"`` string.
        num_head_channels: Channels per attention head (-1: use ``num_heads``).
        num_heads: Heads per attention layer when ``num_head_channels`` is -1.
        use_scale_shift_norm: FiLM-style time conditioning (scale and shift after the norm).
        resblock_updown: Residual blocks (not plain convs) do the up- and down-sampling.
        learn_sigma: The model also predicts the variance (6 output channels).
        norm_groups: GroupNorm groups (32 in every official model).
        in_channels: Image channels.
    """

    image_size: int = 256
    model_channels: int = 256
    channel_mult: tuple[float, ...] = (1, 1, 2, 2, 4, 4)
    num_res_blocks: int = 2
    attention_resolutions: tuple[int, ...] = (32, 16, 8)
    num_head_channels: int = 64
    num_heads: int = 4
    use_scale_shift_norm: bool = True
    resblock_updown: bool = True
    learn_sigma: bool = True
    norm_groups: int = 32
    in_channels: int = 3

    @property
    def out_channels(self) -> int:
        return self.in_channels * (2 if self.learn_sigma else 1)

    @property
    def attention_ds(self) -> tuple[int, ...]:
        """Down-sampling factors with attention (guided-diffusion's internal form)."""
        return tuple(self.image_size // int(r) for r in self.attention_resolutions)

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["channel_mult"] = list(self.channel_mult)
        d["attention_resolutions"] = list(self.attention_resolutions)
        return d


#: ``256x256_diffusion_uncond.pt`` (guided-diffusion README, as ImageNet-E's editor sets it).
OPENAI_256_UNCOND = ADMConfig()


@dataclass(frozen=True)
class NoiseSchedule:
    """The training noise schedule a denoiser belongs to (linear betas, as DDPM/ADM)."""

    num_train_timesteps: int = 1000
    beta_start: float = 0.0001
    beta_end: float = 0.02


# --------------------------------------------------------------------------- network
def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding [cos | sin] of (possibly fractional) timesteps, as ADM's."""
    half = dim // 2
    steps = torch.arange(half, dtype=torch.float32, device=t.device)
    freqs = torch.exp(-math.log(max_period) * steps / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    if dim % 2:
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class _Norm(nn.GroupNorm):
    """GroupNorm computed in float32 whatever the input dtype (ADM's GroupNorm32)."""

    def forward(self, x):
        out = F.group_norm(x.float(), self.num_groups, self.weight, self.bias, self.eps)
        return out.to(x.dtype)


class _Resample(nn.Module):
    """Nearest 2x up-sampling or 2x down-sampling, with a conv when ``conv`` is set.

    The parameter names follow the official Upsample (``conv``) and Downsample (``op``).
    """

    def __init__(self, channels: int, up: bool, conv: bool):
        super().__init__()
        self.up = up
        if up and conv:
            self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        elif not up:
            self.op = (
                nn.Conv2d(channels, channels, 3, stride=2, padding=1)
                if conv
                else nn.AvgPool2d(2, 2)
            )

    def forward(self, x):
        if self.up:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
            return self.conv(x) if hasattr(self, "conv") else x
        return self.op(x)


class _ResBlock(nn.Module):
    """Residual block conditioned on the time embedding; optionally resamples by 2."""

    def __init__(
        self,
        ch: int,
        emb_ch: int,
        out_ch: int,
        *,
        groups: int,
        scale_shift: bool,
        up: bool = False,
        down: bool = False,
    ):
        super().__init__()
        self.scale_shift = scale_shift
        self.in_layers = nn.Sequential(
            _Norm(groups, ch), nn.SiLU(), nn.Conv2d(ch, out_ch, 3, padding=1)
        )
        self.resample = up or down
        if self.resample:
            self.h_upd = _Resample(ch, up=up, conv=False)
            self.x_upd = _Resample(ch, up=up, conv=False)
        self.emb_layers = nn.Sequential(
            nn.SiLU(), nn.Linear(emb_ch, 2 * out_ch if scale_shift else out_ch)
        )
        self.out_layers = nn.Sequential(
            _Norm(groups, out_ch),
            nn.SiLU(),
            nn.Dropout(0.0),
            nn.Conv2d(out_ch, out_ch, 3, padding=1),
        )
        self.skip_connection = nn.Identity() if out_ch == ch else nn.Conv2d(ch, out_ch, 1)

    def forward(self, x, emb):
        if self.resample:
            h = self.in_layers[:-1](x)
            h = self.in_layers[-1](self.h_upd(h))
            x = self.x_upd(x)
        else:
            h = self.in_layers(x)
        e = self.emb_layers(emb).to(h.dtype)[..., None, None]
        if self.scale_shift:
            scale, shift = e.chunk(2, dim=1)
            h = self.out_layers[0](h) * (1 + scale) + shift
            h = self.out_layers[1:](h)
        else:
            h = self.out_layers(h + e)
        return self.skip_connection(x) + h


class _Attention(nn.Module):
    """Self-attention over the pixels, heads split before q/k/v (the official "legacy" order)."""

    def __init__(self, ch: int, *, heads: int, groups: int):
        super().__init__()
        if ch % heads:
            raise ValueError(f"attention: {ch} channels do not split into {heads} heads")
        self.heads = heads
        self.norm = _Norm(groups, ch)
        self.qkv = nn.Conv1d(ch, 3 * ch, 1)
        self.proj_out = nn.Conv1d(ch, ch, 1)

    def forward(self, x):
        b, c, hh, ww = x.shape
        flat = x.reshape(b, c, hh * ww)
        qkv = self.qkv(self.norm(flat))
        d = c // self.heads
        q, k, v = qkv.reshape(b * self.heads, 3 * d, hh * ww).split(d, dim=1)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        h = self.proj_out(a.transpose(1, 2).reshape(b, c, hh * ww))
        return (flat + h).reshape(b, c, hh, ww)


class _Sequential(nn.Sequential):
    """A block list whose residual blocks also receive the time embedding."""

    def forward(self, x, emb):  # noqa: D102
        for layer in self:
            x = layer(x, emb) if isinstance(layer, _ResBlock) else layer(x)
        return x


class ADMUNet(nn.Module):
    """guided-diffusion's UNet (unconditional), parameter names as in the official state dicts.

    Args:
        config: :class:`ADMConfig`.
    """

    def __init__(self, config: ADMConfig = OPENAI_256_UNCOND):
        super().__init__()
        self.config = cfg = config
        mc, g, ss = cfg.model_channels, cfg.norm_groups, cfg.use_scale_shift_norm
        emb_ch = 4 * mc

        def heads(ch: int) -> int:
            return ch // cfg.num_head_channels if cfg.num_head_channels > 0 else cfg.num_heads

        def res(ci, co, **kw):
            return _ResBlock(ci, emb_ch, co, groups=g, scale_shift=ss, **kw)

        self.time_embed = nn.Sequential(nn.Linear(mc, emb_ch), nn.SiLU(), nn.Linear(emb_ch, emb_ch))
        ch = first = int(cfg.channel_mult[0] * mc)
        self.input_blocks = nn.ModuleList(
            [_Sequential(nn.Conv2d(cfg.in_channels, ch, 3, padding=1))]
        )
        skips, ds = [ch], 1
        last = len(cfg.channel_mult) - 1
        for level, mult in enumerate(cfg.channel_mult):
            for _ in range(cfg.num_res_blocks):
                out = int(mult * mc)
                layers = [res(ch, out)]
                ch = out
                if ds in cfg.attention_ds:
                    layers.append(_Attention(ch, heads=heads(ch), groups=g))
                self.input_blocks.append(_Sequential(*layers))
                skips.append(ch)
            if level != last:
                down = (
                    res(ch, ch, down=True)
                    if cfg.resblock_updown
                    else _Resample(ch, up=False, conv=True)
                )
                self.input_blocks.append(_Sequential(down))
                skips.append(ch)
                ds *= 2
        self.middle_block = _Sequential(
            res(ch, ch), _Attention(ch, heads=heads(ch), groups=g), res(ch, ch)
        )
        self.output_blocks = nn.ModuleList()
        for level, mult in reversed(list(enumerate(cfg.channel_mult))):
            for i in range(cfg.num_res_blocks + 1):
                out = int(mult * mc)
                layers = [res(ch + skips.pop(), out)]
                ch = out
                if ds in cfg.attention_ds:
                    layers.append(_Attention(ch, heads=heads(ch), groups=g))
                if level and i == cfg.num_res_blocks:
                    layers.append(
                        res(ch, ch, up=True)
                        if cfg.resblock_updown
                        else _Resample(ch, up=True, conv=True)
                    )
                    ds //= 2
                self.output_blocks.append(_Sequential(*layers))
        self.out = nn.Sequential(
            _Norm(g, ch), nn.SiLU(), nn.Conv2d(first, cfg.out_channels, 3, padding=1)
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Model output for ``x`` at ``t``: eps, then the variance interpolation if learned."""
        emb = self.time_embed(timestep_embedding(t, self.config.model_channels))
        hs, h = [], x
        for block in self.input_blocks:
            h = block(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(torch.cat([h, hs.pop()], dim=1), emb)
        return self.out(h.to(x.dtype))


# --------------------------------------------------------------------------- loading
@dataclass
class Denoiser:
    """A loaded diffusion model behind one call: ``denoiser(x, t) -> output``.

    Attributes:
        net: The torch module (eval mode, gradients off for its parameters).
        kind: ``"adm"`` (guided-diffusion state dict) or ``"diffusers"`` (``UNet2DModel``).
        image_size: Side of the square images it works on.
        learn_sigma: True when the output holds 2x the image channels (eps, variance).
        schedule: Its training :class:`NoiseSchedule`.
        path: The file or folder it was loaded from (None when built in memory).
        fingerprint: 16 hex digits identifying the weights (see :func:`fingerprint`).
    """

    net: nn.Module
    kind: str
    image_size: int
    learn_sigma: bool
    schedule: NoiseSchedule = field(default_factory=NoiseSchedule)
    path: str | None = None
    fingerprint: str | None = None

    def __call__(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if self.kind == "diffusers":
            return self.net(x, t).sample
        return self.net(x, t)

    def describe(self) -> dict[str, Any]:
        d = {
            "path": self.path,
            "kind": self.kind,
            "fingerprint": self.fingerprint,
            "image_size": self.image_size,
            "learn_sigma": self.learn_sigma,
            "schedule": asdict(self.schedule),
        }
        if isinstance(self.net, ADMUNet):
            d["config"] = self.net.config.describe()
        return d


_HASHES: dict[tuple[str, int, int], str] = {}


def fingerprint(path) -> str:
    """16 hex digits identifying a checkpoint: the SHA-256 of a weights file (cached per
    process by path, size and mtime), or for a diffusers folder the hash of its configs and
    file sizes (as the inpainter's)."""
    p = Path(path).expanduser().resolve()
    if p.is_dir():
        from robustlab.models.weights import checkpoint_fingerprint

        return checkpoint_fingerprint(p)
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _HASHES[key] = h.hexdigest()[:16]
    return _HASHES[key]


def check_state_dict(net: nn.Module, sd: dict, what: str) -> None:
    """Raise one-line :class:`InputError` naming a few missing/unexpected/mis-shaped keys."""
    from robustlab.models.weights import state_dict_mismatch

    why = state_dict_mismatch(net, sd)
    if why:
        raise InputError(
            f"{what}: keys do not fit the ADM architecture: {why}",
            hint="pass the matching architecture (ADMConfig) or the official "
            "256x256_diffusion_uncond.pt",
        )


def load_adm(
    path, config: ADMConfig = OPENAI_256_UNCOND, *, schedule: NoiseSchedule | None = None
) -> Denoiser:
    """An :class:`ADMUNet` with the weights of a guided-diffusion state-dict file.

    Raises:
        MissingResourceError: no such file.
        InputError: not a torch state dict, or its keys/shapes do not fit ``config`` (one
            line naming a few of them).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise MissingResourceError(
            f"no guided-diffusion checkpoint at {p}",
            hint="download 256x256_diffusion_uncond.pt from openai/guided-diffusion",
        )
    try:
        sd = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - truncated file, not a torch file, pickled code
        text = str(exc).strip()
        first = text.splitlines()[0].split(". ")[0] if text else type(exc).__name__
        raise InputError(f"cannot read {p} as a torch state dict: {first}") from None
    if isinstance(sd, dict) and isinstance(sd.get("state_dict"), dict):
        sd = sd["state_dict"]
    tensors = isinstance(sd, dict) and sd and all(isinstance(v, torch.Tensor) for v in sd.values())
    if not tensors:
        raise InputError(f"{p} does not hold a state dict of tensors")
    with torch.device("meta"):  # no random init of half a billion parameters to overwrite
        net = ADMUNet(config)
    check_state_dict(net, sd, str(p))
    net.load_state_dict(sd, strict=True, assign=True)
    net.eval().requires_grad_(False)
    return Denoiser(
        net,
        "adm",
        config.image_size,
        config.learn_sigma,
        schedule or NoiseSchedule(),
        str(p.resolve()),
        fingerprint(p),
    )


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path} is not a JSON object")
    return data


def unet_folder(path) -> Path:
    """The folder holding a diffusers ``UNet2DModel`` config: ``path`` or ``path/unet``.

    Raises:
        InputError: neither holds a ``config.json`` of a ``UNet2DModel`` (one line naming
            what was found instead).
    """
    root = Path(path).expanduser()
    for d in (root, root / "unet"):
        cfg = d / "config.json"
        if cfg.is_file():
            name = _read_json(cfg).get("_class_name")
            if name == "UNet2DModel":
                return d
            raise InputError(
                f"{d} holds a {name or 'non-diffusers'} config, not a UNet2DModel",
                hint="point at a pixel-space diffusion UNet (saved with "
                "UNet2DModel.save_pretrained) or a guided-diffusion .pt file",
            )
    raise InputError(
        f"{root} is not a diffusers UNet2DModel folder (no config.json in it or in unet/)",
        hint="save one with UNet2DModel.save_pretrained, or pass a guided-diffusion .pt file",
    )


def _diffusers_schedule(root: Path, unet_dir: Path) -> NoiseSchedule:
    """The linear schedule named by a saved scheduler config next to the UNet, else ADM's."""
    for cfg in (
        root / "scheduler" / "scheduler_config.json",
        unet_dir / "scheduler_config.json",
        root / "scheduler_config.json",
    ):
        if cfg.is_file():
            data = _read_json(cfg)
            kind = data.get("beta_schedule", "linear")
            if kind != "linear" or data.get("trained_betas"):
                raise InputError(
                    f"{cfg}: beta_schedule {kind!r} is not supported (the guided "
                    "sampler uses linear betas, as ADM and DDPM)"
                )
            return NoiseSchedule(
                int(data.get("num_train_timesteps", 1000)),
                float(data.get("beta_start", 0.0001)),
                float(data.get("beta_end", 0.02)),
            )
    return NoiseSchedule()


def load_diffusers_unet(path) -> Denoiser:
    """A diffusers ``UNet2DModel`` saved with ``save_pretrained`` (or a pipeline's ``unet/``).

    Raises:
        InputError: not a UNet2DModel folder, a non-square or non-RGB model, or weights that
            do not load (one line).
    """
    root = Path(path).expanduser()
    d = unet_folder(root)
    try:
        from diffusers import UNet2DModel
    except ImportError:
        raise MissingResourceError(
            "loading a UNet2DModel folder needs diffusers",
            hint="pip install diffusers, or pass a guided-diffusion .pt file",
        ) from None
    try:
        net = UNet2DModel.from_pretrained(str(d), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 - missing weights file, shape mismatch, corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot load a UNet2DModel from {d}: {first}") from None
    cfg = net.config
    size = cfg.sample_size if isinstance(cfg.sample_size, int) else cfg.sample_size[0]
    if not isinstance(cfg.sample_size, int) and len(set(cfg.sample_size)) != 1:
        raise InputError(
            f"{d}: the guided sampler needs a square model, sample_size is {cfg.sample_size}"
        )
    if cfg.in_channels != 3 or cfg.out_channels not in (3, 6):
        raise InputError(
            f"{d}: needs a pixel-space RGB model (3 input, 3 or 6 output channels), "
            f"got {cfg.in_channels} -> {cfg.out_channels}"
        )
    net.eval().requires_grad_(False)
    return Denoiser(
        net,
        "diffusers",
        int(size),
        cfg.out_channels == 6,
        _diffusers_schedule(root, d),
        str(root.resolve()),
        fingerprint(root),
    )


def load_denoiser(path, config: ADMConfig = OPENAI_256_UNCOND) -> Denoiser:
    """A guided-diffusion ``.pt`` file (architecture ``config``) or a diffusers UNet folder.

    Raises:
        MissingResourceError: nothing at ``path``.
        InputError: a file or folder that is not such a model (one line).
    """
    p = Path(path).expanduser()
    if p.is_dir():
        return load_diffusers_unet(p)
    if p.is_file():
        return load_adm(p, config)
    raise MissingResourceError(
        f"no diffusion checkpoint at {p}",
        hint="a guided-diffusion .pt file or a diffusers UNet2DModel folder",
    )


__all__ = [
    "ADMConfig",
    "ADMUNet",
    "OPENAI_256_UNCOND",
    "NoiseSchedule",
    "Denoiser",
    "load_adm",
    "load_diffusers_unet",
    "load_denoiser",
    "check_state_dict",
    "fingerprint",
    "unet_folder",
    "timestep_embedding",
]
