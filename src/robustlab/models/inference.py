"""How a model's forward pass computes: numeric precision (autocast) and ``torch.compile``.

``--precision bf16`` or ``fp16`` runs the forward pass under ``torch.autocast`` on the
model's device: convolutions and matrix products in the low-precision type, the ops
autocast lists as float32 ones in float32. The weights stay float32, and softmax and
top-k run on float32 logits (:meth:`Model._logits`). Two layers stay in float32 (
:func:`keep_ends_fp32`): the one that reads the pixels and the one that writes the
logits, as is usual for low-precision inference. bfloat16 keeps 8 significant bits, so a
logit of 10 is only known to 0.06: two close classes would swap or tie in the stored
top-5, and the normalised input levels of ImageNet's mean/std are 0.017 apart, close to
bfloat16's own steps. On lite0 and the 500 shared photos this took the top-1 change from
-0.6 to -0.2 points on an AVX-512 CPU; how a bf16 convolution rounds depends on the CPU's
kernels, and with AMX tiles (newer Xeons) the same run moves -0.6 points, with AVX2 only
-0.4 (benchmarks/README.md, "precision.py"). ``fp32`` (the default) is the comparable
number: every published figure is an fp32 one.

``--compile`` wraps the forward pass in ``torch.compile`` (inductor). Fused kernels may
round differently, so a compiled run, like a low-precision one, is a run of its own: both
join the run identity, and only when they are not the default, so every fp32, uncompiled
run keeps the id it always had (:func:`robustlab.records.identity.inference_identity`).

Only adapters whose backend is a torch module can do either; an ONNX model refuses
anything but the default in one line rather than silently computing in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from robustlab.errors import EnvironmentProblem, InputError

PRECISIONS = ("fp32", "bf16", "fp16")
# --precision value -> torch dtype name (fp32: no autocast at all).
_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Inference:
    """How the forward pass computes (the defaults change nothing).

    Attributes:
        precision: ``fp32`` (no autocast), ``bf16`` or ``fp16`` (autocast to that type).
        compile: Whether the forward pass runs through ``torch.compile``.
    """

    precision: str = "fp32"
    compile: bool = False

    def __post_init__(self):
        if self.precision not in PRECISIONS:
            raise InputError(
                f"unknown precision {self.precision!r}; use one of {', '.join(PRECISIONS)}"
            )
        if not isinstance(self.compile, bool):
            raise InputError(f"compile must be True or False, got {self.compile!r}")

    @property
    def default(self) -> bool:
        return self.precision == "fp32" and not self.compile

    @property
    def dtype(self):
        """The autocast dtype, or None for fp32."""
        import torch

        name = _DTYPES.get(self.precision)
        return None if name is None else getattr(torch, name)

    def precision_label(self) -> str | None:
        """What the run record's ``precision`` says under autocast (``bfloat16 (autocast)``),
        None for fp32 (the record then keeps the parameters' dtype, as it always did)."""
        name = _DTYPES.get(self.precision)
        return None if name is None else f"{name} (autocast)"

    def describe(self) -> dict[str, Any]:
        return {"precision": self.precision, "compile": self.compile}


def get_inference(precision=None, compile=False) -> Inference:
    """An :class:`Inference` from the ``precision``/``compile`` arguments (None: fp32)."""
    text = "fp32" if precision is None else str(precision).strip().lower()
    return Inference(text, bool(compile))


def check_autocast(device: str, inference: Inference) -> None:
    """Refuse, in one line, a precision the device cannot autocast to.

    Autocast does not always fail loudly: CPU autocast to an unsupported dtype only warns
    and runs in float32, which would label fp32 numbers bf16. So a matrix product is run
    under autocast and its dtype checked.

    Raises:
        EnvironmentProblem: the device has no autocast, or it does not give the dtype.
    """
    import warnings

    import torch

    dtype = inference.dtype
    if dtype is None:
        return
    dev = torch.device(device)
    hint = "use --precision fp32 (the default)"
    if not torch.amp.is_autocast_available(dev.type):
        raise EnvironmentProblem(
            f"--precision {inference.precision}: torch has no autocast on {dev.type}", hint=hint
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.inference_mode(), torch.autocast(dev.type, dtype=dtype):
                a = torch.ones(4, 4, device=dev)
                got = (a @ a).dtype
    except (RuntimeError, TypeError, AssertionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise EnvironmentProblem(
            f"--precision {inference.precision} is not supported on {device}: {first}",
            hint=hint,
        ) from None
    if got != dtype:
        raise EnvironmentProblem(
            f"--precision {inference.precision} is not supported on {device} "
            f"(autocast computes in {str(got).removeprefix('torch.')} there)",
            hint=hint,
        )


def compile_failure(exc: BaseException) -> EnvironmentProblem:
    """One line for a ``torch.compile`` that failed (no C compiler, an unsupported op...)."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # Dynamo's messages start with a generic line; the cause is usually in the first few.
    first = next((ln for ln in lines if not ln.startswith("backend=")), type(exc).__name__)
    return EnvironmentProblem(
        f"--compile: torch.compile failed ({type(exc).__name__}: {first[:200]})",
        hint="leave --compile out, or install a C compiler (torch.compile's inductor needs one)",
    )


def end_layers(module) -> list:
    """The first and the last convolution or linear layer of a torch module, in the order
    they were registered: for the classifiers of timm, torchvision and transformers that
    is the layer that reads the pixels (the stem) and the one that writes the logits (the
    head). Empty when the module has no such layer."""
    import torch.nn as nn

    if not isinstance(module, nn.Module):
        return []
    kinds = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
    layers = [m for m in module.modules() if isinstance(m, kinds)]
    return [] if not layers else list(dict.fromkeys([layers[0], layers[-1]]))


def keep_ends_fp32(layers, device_type: str) -> list:
    """Run ``layers`` outside autocast, on float32 inputs (their output is float32 too).

    The layer's ``forward`` is replaced on the instance only (its class, parameters and
    state dict are untouched); :func:`release_fp32` puts the original back.

    Returns:
        The layers changed, for :func:`release_fp32`.
    """
    for layer in layers:
        if "_robustlab_forward" in vars(layer):
            continue
        original = layer.forward
        layer._robustlab_forward = original
        layer.forward = _Float32Forward(original, device_type)
    return list(layers)


def release_fp32(layers) -> None:
    """Undo :func:`keep_ends_fp32`."""
    for layer in layers:
        original = vars(layer).pop("_robustlab_forward", None)
        if original is not None:
            vars(layer).pop("forward", None)


class _Float32Forward:
    """A layer's forward with autocast off and floating inputs cast to float32."""

    def __init__(self, forward, device_type: str):
        self.forward = forward
        self.device_type = device_type

    def __call__(self, *args, **kwargs):
        import torch

        args = tuple(
            a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args
        )
        with torch.autocast(self.device_type, enabled=False):
            return self.forward(*args, **kwargs)
