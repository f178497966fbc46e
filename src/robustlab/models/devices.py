"""Which devices this machine can run a model on, and the batch size that suits each.

``--device`` is checked here once, with the devices that would work as the hint, so a
typo or a missing GPU is one line before any model is built.
"""

from __future__ import annotations

from robustlab.errors import EnvironmentProblem, InputError


def available_devices() -> list[str]:
    """The ``--device`` values this machine can run: cpu, then each CUDA GPU, then mps."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def auto_device(device=None) -> str:
    """``device`` as a string, or ``"cuda"`` when a GPU is available and ``"cpu"`` otherwise.

    Raises:
        InputError: ``device`` is not a device name (``--device nonsense``).
        EnvironmentProblem: a device this machine does not have (``cuda`` without a GPU,
            ``cuda:3`` on a one-GPU machine). Both list the devices that would work.
    """
    import torch

    if device is None or str(device) == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    dev = str(device).strip()
    hint = f"use one of: {', '.join(available_devices())}"
    try:
        kind = torch.device(dev)
    except (RuntimeError, ValueError, TypeError):
        raise InputError(f"unknown device {dev!r}", hint=hint) from None
    if kind.type == "cuda":
        if not torch.cuda.is_available():
            raise EnvironmentProblem(
                f"device {dev!r} requested but this machine has no usable CUDA GPU", hint=hint
            )
        if kind.index is not None and kind.index >= torch.cuda.device_count():
            raise EnvironmentProblem(
                f"device {dev!r} requested but this machine has "
                f"{torch.cuda.device_count()} CUDA GPU(s)",
                hint=hint,
            )
    elif kind.type == "mps":
        if "mps" not in available_devices():
            raise EnvironmentProblem(
                f"device {dev!r} requested but Apple MPS is not available", hint=hint
            )
    elif kind.type != "cpu":
        raise InputError(f"robustlab runs models on cpu, cuda or mps, not {dev!r}", hint=hint)
    return dev


def default_batch_size(cpu_default: int, device: str) -> int:
    """A sensible batch: the adapter's CPU default, four times that on a GPU."""
    return cpu_default * 4 if device.startswith("cuda") else cpu_default
