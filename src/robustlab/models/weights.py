"""Reading weights files safely and naming them: hashes, state dicts, strict loading.

Every checkpoint is read with ``weights_only=True`` (or as safetensors): a file holding
pickled code is refused with one line, never executed. :func:`weights_hash` and
:func:`package_versions` go into the model's record, so two runs with different
checkpoints or libraries never look like the same model.
"""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path
from typing import Any

from robustlab.errors import InputError


def weights_hash(*paths) -> str:
    """First 16 hex digits of the SHA-256 of the weights file(s), read in the given order.

    Recorded with every run so two runs of ``timm:resnet50`` with different checkpoints
    never look like the same model.
    """
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def package_versions(*dists: str) -> dict[str, str]:
    out = {}
    for dist in ("torch", *dists):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


# What robustlab says, and what it never says, when a checkpoint holds more than tensors.
UNSAFE_PICKLE = (
    "it holds pickled Python objects besides tensors, which robustlab refuses to load "
    "(unpickling them could run any code)"
)
SAFE_FORMATS = (
    "save the weights as a state dict of tensors (torch.save(model.state_dict(), PATH)) "
    "or as .safetensors, from code you trust"
)


def is_unsafe_pickle(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it wraps) is ``torch.load(weights_only=True)`` refusing
    a pickle that holds more than tensors."""
    import pickle

    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, pickle.UnpicklingError) or "weights_only" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return False


def weights_refusal(path, exc: BaseException, what: str = "weights file") -> InputError:
    """The one-line error for a checkpoint that cannot be read safely.

    PyTorch's own message for a refused pickle explains how to load it anyway
    (``weights_only=False`` "will likely succeed"): advice that runs the file's code.
    robustlab never repeats it; a refused pickle is named as such, with the safe formats
    as the hint, and any other failure by the first line of its message.
    """
    text = str(exc)
    if not _torch_file(path) and Path(path).suffix != ".safetensors":
        # Text, an image, a truncated download: torch's unpickler calls that a refused
        # pickle too, which would send the user looking for objects that are not there.
        return InputError(
            f"cannot read {what} {path}: not a PyTorch weights file (neither torch.save's "
            "zip archive nor a pickle)",
            hint=SAFE_FORMATS,
        )
    if is_unsafe_pickle(exc):
        return InputError(f"cannot read {what} {path}: {UNSAFE_PICKLE}", hint=SAFE_FORMATS)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return InputError(f"cannot read {what} {path}: {first}", hint=SAFE_FORMATS)


def _torch_file(path) -> bool:
    """Whether ``path`` starts like a file ``torch.save`` writes: a zip archive, or (the
    legacy format) a pickle's protocol marker."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return True  # unreadable: the caller's own error says why
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def load_torch_file(path):
    """``torch.load`` of a weights file with ``weights_only=True`` (tensors and plain
    containers only, never code), on the CPU; a one-line InputError when it fails."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - corrupt file, pickle with code, wrong format
        raise weights_refusal(path, exc) from None


def load_state_dict_file(path) -> dict:
    """Tensors of a checkpoint file (``.safetensors``, or a torch file holding a state dict,
    possibly under ``state_dict`` / ``model`` / ``state_dict_ema``), ``module.`` prefix removed."""
    import torch

    path = Path(path)
    sd: Any
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            sd = load_file(str(path))
        except Exception as exc:  # noqa: BLE001 - a corrupt or foreign file
            raise weights_refusal(path, exc) from None
    else:
        sd = load_torch_file(path)
    if isinstance(sd, dict):
        for key in ("state_dict", "model", "model_state_dict", "module"):
            if key in sd and isinstance(sd[key], dict):
                sd = sd[key]
                break
    if (
        not isinstance(sd, dict)
        or not sd
        or not all(isinstance(v, torch.Tensor) for v in sd.values())
    ):
        raise InputError(f"weights file {path} does not hold a state dict of tensors")
    if all(k.startswith("module.") for k in sd):
        sd = {k[len("module.") :]: v for k, v in sd.items()}
    return dict(sd)


def head_classes(module, sd: dict) -> int | None:
    """Output classes the checkpoint's head has when it differs from the module's, else None.

    Finds tensors whose shape disagrees with the module's; if they are all head tensors
    sharing one leading size (a checkpoint fine-tuned to another class count), returns it.
    """
    target = module.state_dict()
    bad = [k for k in sd if k in target and tuple(sd[k].shape) != tuple(target[k].shape)]
    if not bad:
        return None
    sizes = {int(sd[k].shape[0]) for k in bad}
    if len(sizes) == 1 and all(sd[k].ndim in (1, 2, 4) for k in bad):
        return sizes.pop()
    return None


def _few(keys: list[str], n: int = 3) -> str:
    more = f" (+{len(keys) - n} more)" if len(keys) > n else ""
    return ", ".join(keys[:n]) + more


def state_dict_mismatch(module, sd: dict) -> str | None:
    """What keeps ``sd`` from loading strictly into ``module``, in one line, or None.

    Names a few missing, unexpected and mis-shaped keys: enough to tell a checkpoint of
    another architecture from one of another head or a wrapped (``module.``) state dict.
    """
    target = module.state_dict()
    missing = [k for k in target if k not in sd]
    unexpected = [k for k in sd if k not in target]
    shaped = [k for k in sd if k in target and tuple(sd[k].shape) != tuple(target[k].shape)]
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing ({_few(missing)})")
    if unexpected:
        parts.append(f"{len(unexpected)} unexpected ({_few(unexpected)})")
    if shaped:
        k = shaped[0]
        parts.append(
            f"{len(shaped)} of another shape (e.g. {k}: {tuple(sd[k].shape)}, "
            f"expected {tuple(target[k].shape)})"
        )
    return "; ".join(parts) or None


def load_strict(module, sd: dict, what: str) -> None:
    """``load_state_dict(strict=True)`` with a one-line InputError saying what does not fit."""
    why = state_dict_mismatch(module, sd)
    if why:
        raise InputError(f"weights do not fit {what}: {why}")
    module.load_state_dict(sd, strict=True)


def checkpoint_fingerprint(path) -> str:
    """16 hex digits identifying a checkpoint folder without reading gigabytes of weights:
    the SHA-256 of every JSON/text config plus the name and size of every other file."""
    root = Path(path).expanduser()
    h = hashlib.sha256()
    for f in sorted(x for x in root.rglob("*") if x.is_file()):
        rel = f.relative_to(root).as_posix()
        if rel.startswith(".") or "/." in rel:
            continue
        h.update(rel.encode() + b"\0")
        if f.suffix in (".json", ".txt"):
            h.update(f.read_bytes())
        else:
            h.update(str(f.stat().st_size).encode())
    return h.hexdigest()[:16]
