"""The network a surface-variation protocol trains from scratch: its config (all of it
in the run's identity), the network, the training loop and the predictions."""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from robustlab.errors import InputError
from robustlab.seeding import check_seed, derive_seed

log = logging.getLogger(__name__)

# ICONS-50's normalisation (mean 0.5, std 0.25 per channel).
MEAN, STD = 0.5, 0.25


@dataclass(frozen=True)
class HoldoutConfig:
    """How the network is trained from scratch (all of it is in the run's identity).

    Attributes:
        arch: ``small-cnn``, ``resnext``, ``shake-resnext``, ``densenet``, ``msdnet`` (see
            :mod:`robustlab.models.networks`) or ``timm:NAME`` (a ResNet gets a 3x3 stride-1
            stem, no max-pool, as CIFAR-sized ResNets have).
        width: Base width of the network: the small CNN's first-stage channels, and the
            size knob of the others (:func:`robustlab.models.networks.network_params`).
        image_size: Square input side.
        epochs, batch_size, lr, weight_decay: AdamW with a cosine schedule.
        augment: Random shifts of up to 2 px and horizontal flips (ICONS-50's training used
            crops and flips too).
        seed: Seed of initialisation, batch order and augmentation.
    """

    arch: str = "small-cnn"
    width: int = 16
    image_size: int = 32
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 5e-4
    augment: bool = True
    seed: int = 0

    def __post_init__(self):
        check_seed(self.seed)  # the one seed rule (robustlab.seeding)
        if self.epochs < 1 or self.batch_size < 1 or self.width < 1:
            raise InputError("epochs, batch size and width must be at least 1")
        if self.image_size < 16:
            raise InputError(f"image size must be 16 or more, got {self.image_size}")
        if not self.lr > 0:
            raise InputError(f"learning rate must be positive, got {self.lr}")
        from robustlab.models.networks import OWN_ARCHS

        if self.arch not in OWN_ARCHS and not self.arch.startswith("timm:"):
            raise InputError(
                f"--arch must be {', '.join(OWN_ARCHS)} or timm:NAME, not {self.arch!r}"
            )

    @property
    def network(self) -> dict[str, Any] | None:
        """The architecture's hyper-parameters (None for small-cnn and timm models, whose
        ``width``/name say it all and whose run ids predate this field)."""
        from robustlab.models.networks import PARAM_ARCHS, network_params

        if self.arch not in PARAM_ARCHS:
            return None
        return {"arch": self.arch, **network_params(self.arch, self.width)}


def build_network(config: HoldoutConfig, n_classes: int):
    """The untrained network (the weights' seed is set by the caller; Shake-Shake's
    coefficient generator is seeded here from ``config.seed``)."""
    from torch import nn

    from robustlab.models import networks

    if config.arch in networks.OWN_ARCHS:
        seed = derive_seed(config.seed, "network", "shake-shake", config.arch) % 2**63
        return networks.build(config.arch, n_classes, config.width, seed=seed)
    import timm

    name = config.arch.split(":", 1)[1]
    if not timm.models.is_model(name):
        raise InputError(f"unknown timm model {name!r} (see timm.list_models())")
    net = timm.create_model(name, pretrained=False, num_classes=n_classes)
    if hasattr(net, "conv1") and hasattr(net, "maxpool") and hasattr(net, "bn1"):
        net.conv1 = nn.Conv2d(3, net.bn1.num_features, 3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
    return net


def _to_tensor(images: np.ndarray):
    import torch

    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
    return (x - MEAN) / STD


def _augment(x, gen):
    import torch

    n, _, h, w = x.shape
    pad = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
    dx = torch.randint(0, 5, (n,), generator=gen)
    dy = torch.randint(0, 5, (n,), generator=gen)
    out = torch.stack([pad[i, :, dy[i] : dy[i] + h, dx[i] : dx[i] + w] for i in range(n)])
    flip = torch.rand(n, generator=gen) < 0.5
    out[flip] = out[flip].flip(-1)
    return out


@dataclass
class EpochState:
    """Where :func:`train_network` keeps its whole state after every epoch, so that a
    killed training resumes at the last finished epoch with the numbers it would have had.

    Attributes:
        path: The state file (written whole or not at all; removed by the caller once the
            run is stored).
        key: What the state belongs to (the run id); a file with another key is ignored.
        resumed_from: Set by :func:`train_network`: the epochs a resumed training took
            from the file (0 when it started from scratch).
    """

    path: Path
    key: str
    resumed_from: int = 0


def train_network(
    images: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    config: HoldoutConfig,
    progress: Callable[[int, float], None] | None = None,
    device: str = "cpu",
    state: EpochState | None = None,
):
    """Train from scratch on ``device``; returns (network in eval mode, on ``device``, mean
    loss per epoch).

    Every random draw (initialisation, batch order, shifts and flips, Shake-Shake's
    coefficients) comes from CPU generators seeded by ``config.seed``, and batches are
    augmented on the CPU before they move: a GPU trains on the same batches with the same
    draws, and its weights differ from the CPU's by floating-point arithmetic only.

    With ``state``, the weights, optimiser, schedule, losses and every generator are saved
    after each epoch, and a training that finds its own state file continues from it: on
    the same device the result equals an uninterrupted training's bit for bit.
    """
    import torch

    with torch.random.fork_rng(devices=[]):
        x_all, y_all = _to_tensor(images), torch.as_tensor(labels, dtype=torch.long)
        parts, generators = _setup(config, n_classes, device, len(x_all))
        losses: list[float] = []
        if state is not None:
            resumed = _load_state(state, parts, generators, device)
            if resumed is None:  # a state that failed part-way: start again from a clean setup
                parts, generators = _setup(config, n_classes, device, len(x_all))
            losses = resumed or []
            state.resumed_from = len(losses)
            if losses:
                log.info(
                    "resuming after epoch %d of %d from %s", len(losses), config.epochs, state.path
                )
        net, opt, sched = parts["net"], parts["opt"], parts["sched"]
        gen = generators["batches"]
        net.train()
        for epoch in range(len(losses), config.epochs):
            order = torch.randperm(len(x_all), generator=gen)
            total = 0.0
            for k in range(0, len(order), config.batch_size):
                idx = order[k : k + config.batch_size]
                x = x_all[idx]
                if config.augment:
                    x = _augment(x, gen)
                x, y = x.to(device, non_blocking=True), y_all[idx].to(device, non_blocking=True)
                loss = torch.nn.functional.cross_entropy(net(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            losses.append(total / len(x_all))
            if state is not None:
                _save_state(state, parts, generators, losses)
            if progress:
                progress(epoch + 1, losses[-1])
    net.eval()
    return net, losses


def _setup(config: HoldoutConfig, n_classes: int, device, n_images: int) -> tuple[dict, dict]:
    """The untrained network, its optimiser and schedule (``parts``), and the generators
    of batch order and augmentation and of the network's own draws, all freshly seeded."""
    import torch

    torch.manual_seed(int(config.seed))
    net = build_network(config, n_classes).to(device)
    gen = torch.Generator().manual_seed(int(config.seed))
    steps = config.epochs * math.ceil(n_images / config.batch_size)
    opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=config.lr, total_steps=steps, pct_start=0.15
    )
    return {"net": net, "opt": opt, "sched": sched}, {"batches": gen, **_shake_generators(net)}


def _shake_generators(net) -> dict:
    """The network's own generators (Shake-Shake's coefficients), by attribute."""
    import torch

    return {f"net.{name}": g for name, g in vars(net).items() if isinstance(g, torch.Generator)}


def _save_state(state: EpochState, parts: dict, generators: dict, losses: list[float]) -> None:
    """Everything the next epoch depends on, in one file written whole or not at all.
    torch's global generator goes in too: a timm network's dropout draws from it."""
    import torch

    blob = {
        "key": state.key,
        "losses": list(losses),
        **{name: part.state_dict() for name, part in parts.items()},
        "generators": {name: g.get_state() for name, g in generators.items()},
        "torch_rng": torch.get_rng_state(),
    }
    save_whole(blob, state.path, what="training state")


def save_whole(obj: Any, path: Path, *, what: str) -> None:
    """``torch.save(obj)`` at ``path``, written whole or not at all
    (:func:`robustlab.files.outputs.atomic_write`); a file system error is one line naming
    ``what`` and the path."""
    import torch

    from robustlab.errors import environment_errors
    from robustlab.files.atomic import atomic_write

    buf = io.BytesIO()
    torch.save(obj, buf)
    with environment_errors(f"cannot write {what} {path}"):
        atomic_write(path, buf.getvalue())


def _load_state(state: EpochState, parts: dict, generators: dict, device) -> list[float] | None:
    """The losses of the epochs a state file holds, with every part and generator put
    back as they were after its last epoch; [] when there is no file; None (said in the
    log) when it is unreadable or another run's, and the parts may be half-restored."""
    import torch

    if not state.path.is_file():
        return []
    try:
        blob = torch.load(state.path, map_location=device, weights_only=True)
        if blob.get("key") != state.key:
            raise ValueError(f"it belongs to run {blob.get('key')!r}, not {state.key!r}")
        for name, part in parts.items():
            part.load_state_dict(blob[name])
        for name, g in generators.items():
            g.set_state(blob["generators"][name].cpu())
        torch.set_rng_state(blob["torch_rng"].cpu())
        return [float(x) for x in blob["losses"]]
    except Exception as exc:  # noqa: BLE001 - any unreadable state means: train from scratch
        log.warning(
            "%s: training state not used (%s: %s); training from the first epoch",
            state.path,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return None


def predict(net, images: np.ndarray, batch: int = 256) -> np.ndarray:
    """Softmax probabilities, N x classes, computed on the network's device."""
    import torch

    device = next(net.parameters()).device
    out = []
    with torch.no_grad():
        for k in range(0, len(images), batch):
            logits = net(_to_tensor(images[k : k + batch]).to(device))
            out.append(torch.softmax(logits, 1).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)
