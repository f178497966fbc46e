"""What every model adapter shares: preprocessing, label-space head, scoring and the record.

An adapter only has to build a backend (a torch module, an ONNX session, ...) and say how
a normalised batch becomes logits. Everything that decides a result -- how an image is
resized and normalised, which logit columns count, when a prediction is correct -- lives
here once, so a ``timm:`` model and an ``onnx:`` export of it score the same way.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from robustlab.errors import EnvironmentProblem, InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
NUM_IMAGENET = 1000
# Environment switches that mean "never touch the network" (checked at call time, so a
# test or a user can set them after import).
OFFLINE_VARS = ("ROBUSTLAB_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")

_PIL_FILTERS = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}


def offline() -> bool:
    """True when the user switched downloads off (``HF_HUB_OFFLINE=1`` and friends)."""
    return any(
        os.environ.get(v, "").strip().lower() not in ("", "0", "false", "no", "off")
        for v in OFFLINE_VARS
    )


def hub_endpoint() -> str:
    """The Hugging Face hub address timm and transformers download from."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def unreachable(url: str) -> str | None:
    """Why ``url``'s host cannot be reached at all (its name does not resolve), else None.

    A cheap check before a download: on a machine with no network the hub clients retry
    for about a minute, logging a warning each time, before they fail.
    """
    host = urlparse(url).hostname if "://" in url else url
    if not host:
        return None
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return f"{host} cannot be reached ({exc.strerror or exc})"
    return None


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


def package_versions(*dists: str) -> dict[str, str]:
    out = {}
    for dist in ("torch", *dists):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


@dataclass(frozen=True)
class Preprocessing:
    """How an adapter turns an RGB image into its input tensor.

    Eval transform of timm/torchvision: resize the shorter side to
    ``floor(input_size / crop_pct)`` (long side truncated, as torchvision's ``Resize``),
    center-crop ``input_size``, scale to [0, 1], subtract ``mean``, divide by ``std``.

    Attributes:
        input_size: Side of the square input, or ``(height, width)``.
        crop_pct: Fraction of the resized image kept by the center crop (1.0: no margin).
        interpolation: ``bicubic``, ``bilinear``, ``nearest``, ``lanczos``, ``box``, ``hamming``.
        mean, std: Per-channel normalisation on the [0, 1] scale.
        resize_mode: ``"shorter"`` (scale the shorter side, keep the aspect ratio: timm,
            torchvision) or ``"squash"`` (scale both sides to the target square, as the
            ViT/BEiT processors of transformers do).
        crop_offset: Where the centre crop starts when the margin is odd: ``"round"``
            (``round(margin / 2)``, torchvision's ``CenterCrop``, timm, open_clip) or
            ``"floor"`` (``margin // 2``, transformers' image processors).
    """

    input_size: int | tuple[int, int]
    crop_pct: float
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize_mode: str = "shorter"
    crop_offset: str = "round"

    def __post_init__(self) -> None:
        size = self.input_size
        sizes = (size,) if isinstance(size, int) else tuple(size)
        if len(sizes) not in (1, 2) or any(not isinstance(s, int) or s < 1 for s in sizes):
            raise InputError(f"input_size must be a positive int or (height, width), got {size!r}")
        if not 0 < float(self.crop_pct) <= 1:
            raise InputError(f"crop_pct must be in (0, 1], got {self.crop_pct!r}")
        if self.interpolation not in _PIL_FILTERS:
            raise InputError(
                f"interpolation must be one of {', '.join(_PIL_FILTERS)}, "
                f"got {self.interpolation!r}"
            )
        if self.resize_mode not in ("shorter", "squash"):
            raise InputError(f"resize_mode must be 'shorter' or 'squash', got {self.resize_mode!r}")
        if self.crop_offset not in ("round", "floor"):
            raise InputError(f"crop_offset must be 'round' or 'floor', got {self.crop_offset!r}")
        if len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std):
            raise InputError("mean and std need 3 values each (std > 0)")

    @property
    def hw(self) -> tuple[int, int]:
        s = self.input_size
        return (s, s) if isinstance(s, int) else (int(s[0]), int(s[1]))

    def describe(self) -> dict[str, Any]:
        """The fields as JSON-able values; ``crop_offset`` only when it is not the default
        (it came later: the records, and so the run ids, of other models stay as they were)."""
        d = asdict(self)
        d["input_size"] = self.input_size if isinstance(self.input_size, int) else list(self.hw)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        if d["crop_offset"] == "round":
            del d["crop_offset"]
        return d

    def resize_crop(self, rgb: np.ndarray, *, crop: bool = True) -> np.ndarray:
        """The uint8 HxWx3 image the model sees (before normalisation).

        ``crop=False`` only resizes: in ``shorter`` mode the shorter side to the input size
        (a square image becomes exactly ``input_size``; a non-square one is kept whole, for
        class maps), in ``squash`` mode (or for a non-square input size) to exactly it.
        """
        from PIL import Image

        h, w = rgb.shape[:2]
        th, tw = self.hw
        resample = _PIL_FILTERS[self.interpolation]
        shorter = th == tw and self.resize_mode == "shorter"
        if crop:
            if shorter:
                size = _short_side_size(h, w, _scaled(th, self.crop_pct))
            else:
                size = (_scaled(th, self.crop_pct), _scaled(tw, self.crop_pct))
        else:
            size = _short_side_size(h, w, th) if shorter else (th, tw)
        if size != (h, w):
            rgb = np.asarray(Image.fromarray(rgb).resize((size[1], size[0]), resample=resample))
        if crop:
            h, w = rgb.shape[:2]
            if self.crop_offset == "floor":
                top, left = (h - th) // 2, (w - tw) // 2
            else:
                top, left = round((h - th) / 2.0), round((w - tw) / 2.0)  # torchvision's
            rgb = rgb[top : top + th, left : left + tw]
        return rgb

    def to_uint8(self, rgb, *, crop: bool = True):
        """CxHxW uint8 tensor of the pixels the model sees, before normalisation.

        This is what evaluation workers hand to the main process: a quarter of the bytes
        of the float32 input, so less shared memory and less copying between processes
        and to the GPU. :meth:`normalize` finishes the job where the model runs.
        """
        import torch

        from robustlab.data.images import array_to_rgb

        rgb, _ = array_to_rgb(rgb)
        out = np.ascontiguousarray(self.resize_crop(rgb, crop=crop))
        if not out.flags.writeable:  # torch wants to own writable memory
            out = out.copy()
        return torch.from_numpy(out).permute(2, 0, 1)

    def normalize(self, batch):
        """Bx3xHxW uint8 -> float32 ``(x / 255 - mean) / std`` on the batch's own device.

        The same float32 operations in the same order as :meth:`to_tensor`, so the result
        is bit-identical whether it runs in a worker, on the CPU or on a GPU.
        """
        import torch

        x = batch.float().div_(255.0)
        mean = torch.tensor(self.mean, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32, device=x.device).view(1, 3, 1, 1)
        return x.sub_(mean).div_(std)

    def to_tensor(self, rgb, *, crop: bool = True):
        """CxHxW float32 tensor of ``rgb`` (uint8 HxW[x1|3|4] array or PIL image)."""
        return self.normalize(self.to_uint8(rgb, crop=crop)[None])[0]


def _scaled(size: int, crop_pct: float) -> int:
    """``floor(size / crop_pct)`` as timm computes it, immune to float noise such as
    ``240 / (240 / 255) = 254.99999999999997``."""
    return math.floor(size / crop_pct + 1e-6)


def _short_side_size(h: int, w: int, short: int) -> tuple[int, int]:
    """(height, width) with the shorter side ``short`` and the longer truncated (torchvision)."""
    if h <= w:
        return short, int(short * w / h)
    return int(short * h / w), short


class Model:
    """A classifier behind one interface, over a label space.

    Subclasses set ``adapter`` and implement :meth:`_forward`. How model outputs relate to
    the label space is decided once at construction:

    - outputs are the label space's own classes (CLIP zero-shot, or a model trained on
      exactly that space): scored directly;
    - 1,000 ImageNet outputs and a *subset* space: :meth:`predict` keeps the subset's
      columns, so labels and predictions are subset indices;
    - 1,000 ImageNet outputs and a *mapping* space: :meth:`predict` returns all 1,000
      logits and :meth:`correct` counts a hit on any ImageNet id mapped to the label.

    Attributes:
        spec: The spec string it was loaded from.
        preprocessing: :class:`Preprocessing`.
        batch_size: Default batch size for this model on its device.
        weights_hash: First 16 hex digits of the weights file's SHA-256.
        label_space: The :class:`robustlab.data.labels.LabelSpace` it is scored on.
        num_outputs: Columns of :meth:`predict`'s logits.
        device: Torch device string (``cpu``, ``cuda``...).
    """

    adapter = "base"

    def __init__(
        self,
        spec: str,
        *,
        preprocessing: Preprocessing,
        batch_size: int,
        device: str,
        label_space,
        weights_path,
        weights_hash: str,
        model_outputs: int,
        native: bool = False,
        details: dict | None = None,
    ):
        from robustlab.data.labels import get_label_space

        self.spec = spec
        self.preprocessing = preprocessing
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise InputError(f"batch size must be at least 1, got {batch_size}")
        self.device = device
        self.label_space = get_label_space(label_space or "imagenet1k")
        self.weights_path = None if weights_path is None else str(weights_path)
        self.weights_hash = weights_hash
        self.model_outputs = int(model_outputs)
        self.details = dict(details or {})
        self._setup_head(native)
        from robustlab.models.inference import Inference

        # fp32, not compiled: the forward pass as the adapter wrote it (set_inference).
        self.inference = Inference()
        self._compiled: Callable | None = None
        self._fp32_kept: list = []  # layers kept in float32 under autocast

    # ------------------------------------------------------------ label-space head
    def _setup_head(self, native: bool) -> None:
        import torch

        space, n = self.label_space, self.model_outputs
        self._columns = None
        self._hits = None
        if native or (n == len(space) and not (n == NUM_IMAGENET and space.kind == "mapping")):
            if n != len(space):
                raise InputError(
                    f"{self.spec} gives {n} outputs but label space {space.name!r} "
                    f"has {len(space)} classes"
                )
            self.head = "direct"
            self.num_outputs = n
        elif n == NUM_IMAGENET and space.kind == "subset":
            self.head = "subset"
            self._columns = torch.tensor(space.subset_ids, dtype=torch.long)
            self.num_outputs = len(space)
        elif n == NUM_IMAGENET and space.kind == "mapping":
            self.head = "mapping"
            hits = torch.zeros(len(space), NUM_IMAGENET, dtype=torch.bool)
            for label, ids in enumerate(space.imagenet_ids):
                hits[label, list(ids)] = True
            self._hits = hits
            self.num_outputs = NUM_IMAGENET
        else:
            raise InputError(
                f"{self.spec} gives {n} outputs; label space {space.name!r} needs "
                f"{NUM_IMAGENET} (an ImageNet-1k classifier) or {len(space)}"
            )

    # ------------------------------------------------------------ the interface
    def transform(self, rgb_uint8_hwc, *, crop: bool = True):
        """CxHxW float tensor for one image; ``crop=False`` resizes only (see Preprocessing)."""
        return self.preprocessing.to_tensor(rgb_uint8_hwc, crop=crop)

    def _forward(self, batch):  # pragma: no cover - every adapter overrides it
        raise NotImplementedError

    def set_inference(self, inference) -> None:
        """Run the forward pass under autocast and/or ``torch.compile`` from now on.

        Args:
            inference: A :class:`robustlab.models.inference.Inference`.

        Raises:
            InputError: anything but fp32 without compile for an adapter whose backend is
                not a torch module (ONNX Runtime has neither autocast nor compile).
            EnvironmentProblem: the device cannot autocast to that precision.
        """
        import torch

        from robustlab.models.inference import check_autocast, keep_ends_fp32, release_fp32

        if not inference.default and not isinstance(getattr(self, "module", None), torch.nn.Module):
            asked = " and ".join(
                x
                for x in (
                    f"--precision {inference.precision}" if inference.precision != "fp32" else "",
                    "--compile" if inference.compile else "",
                )
                if x
            )
            raise InputError(
                f"{self.spec}: {asked} needs a torch model; the {self.adapter} adapter "
                "always computes in its own precision",
                hint="leave it out (fp32, not compiled), or use a torch spec of this model",
            )
        check_autocast(self.device, inference)
        release_fp32(self._fp32_kept)
        self._fp32_kept = (
            keep_ends_fp32(self._fp32_layers(), torch.device(self.device).type)
            if inference.dtype is not None
            else []
        )
        self.inference = inference
        self._compiled = torch.compile(self._forward) if inference.compile else None

    def _fp32_layers(self) -> list:
        """Layers that stay in float32 under autocast: the one reading the pixels and the
        one writing the logits (:func:`robustlab.models.inference.end_layers`)."""
        from robustlab.models.inference import end_layers

        return end_layers(getattr(self, "module", None))

    def warm_up(self) -> None:
        """One forward pass on a blank batch: with ``--compile``, compiles now (a failure is
        one line before any work), not inside the first batch of a run."""
        import torch

        h, w = self.preprocessing.hw
        self.predict(torch.zeros(self.batch_size, 3, h, w, dtype=torch.uint8))

    def _run_forward(self, batch):
        """:meth:`_forward` under the autocast and compile of :attr:`inference`."""
        import contextlib

        import torch

        dtype = self.inference.dtype
        cast = (
            torch.autocast(torch.device(self.device).type, dtype=dtype)
            if dtype is not None
            else contextlib.nullcontext()
        )
        with cast:
            if self._compiled is None:
                return self._forward(batch)
            from torch._dynamo.exc import TorchDynamoException

            from robustlab.models.inference import compile_failure

            try:
                return self._compiled(batch)
            except TorchDynamoException as exc:
                raise compile_failure(exc) from None

    def input_device(self) -> str:
        """Where :meth:`predict` normalises a uint8 batch: the model's own device (adapters
        whose runtime takes host memory, such as ONNX Runtime, say ``cpu``)."""
        return str(self.device)

    def _logits(self, batch):
        """Float32 logits (B, num_outputs) on the device they were computed on.

        A uint8 batch (from :meth:`Preprocessing.to_uint8`) is moved to
        :meth:`input_device` first and normalised there.
        """
        import torch

        if not isinstance(batch, torch.Tensor) or batch.ndim != 4 or batch.shape[1] != 3:
            shape = tuple(batch.shape) if hasattr(batch, "shape") else type(batch).__name__
            raise ValueError(f"predict needs a Bx3xHxW tensor, got {shape}")
        if batch.dtype == torch.uint8:
            batch = self.preprocessing.normalize(batch.to(self.input_device(), non_blocking=True))
        logits = self._run_forward(batch)
        if (
            logits.ndim != 2
            or logits.shape[0] != batch.shape[0]
            or logits.shape[1] != self.model_outputs
        ):
            raise ValueError(
                f"{self.spec} returned logits of shape {tuple(logits.shape)}, "
                f"expected ({batch.shape[0]}, {self.model_outputs})"
            )
        logits = logits.float()  # softmax and top-k in float32 whatever the precision
        if self._columns is not None:
            if self._columns.device != logits.device:
                self._columns = self._columns.to(logits.device)
            logits = logits.index_select(1, self._columns)
        return logits

    def predict(self, batch):
        """Logits (B, num_outputs) as float32 on the CPU, in eval mode without gradients.

        ``batch`` is a Bx3xHxW tensor: float32 already normalised (:meth:`transform`), or
        uint8 pixels (:meth:`Preprocessing.to_uint8`), normalised here on the model's device.
        """
        import torch

        with torch.inference_mode():
            return self._logits(batch).cpu()

    def predict_topk(self, batch, k: int = 5):
        """(probabilities, column ids) of the ``k`` best classes, each (B, k), on the CPU.

        Softmax and top-k run where the logits are (the GPU for a CUDA model), so only
        B x k numbers cross back to the host instead of B x num_outputs.
        """
        import torch

        with torch.inference_mode():
            logits = self._logits(batch)
            probs = torch.softmax(logits, dim=1)
            top = torch.topk(probs, min(int(k), probs.shape[1]), dim=1)
            return top.values.cpu(), top.indices.cpu()

    def correct(self, topk_ids, labels):
        """(top-1 correct, top-k correct) as bool tensors of length B.

        Args:
            topk_ids: (B, k) column indices of :meth:`predict`'s logits, best first (a
                (B,) vector is taken as k = 1).
            labels: (B,) label indices in the label space.
        """
        import torch

        ids = torch.as_tensor(
            np.asarray(topk_ids) if not isinstance(topk_ids, torch.Tensor) else topk_ids
        )
        ids = ids.detach().cpu().long()
        if ids.ndim == 1:
            ids = ids[:, None]
        lab = torch.as_tensor(
            np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels
        )
        lab = lab.detach().cpu().long().reshape(-1)
        if ids.ndim != 2 or ids.shape[0] != lab.shape[0] or ids.shape[1] < 1:
            raise ValueError(
                f"topk_ids {tuple(ids.shape)} and labels {tuple(lab.shape)} do not match"
            )
        n = len(self.label_space)
        if lab.numel() and (int(lab.min()) < 0 or int(lab.max()) >= n):
            raise ValueError(
                f"labels must be in 0..{n - 1} for label space {self.label_space.name!r}"
            )
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= self.num_outputs):
            raise ValueError(f"predicted ids must be in 0..{self.num_outputs - 1}")
        if self.head == "mapping":
            hit = self._hits[lab[:, None], ids]
        else:
            hit = ids == lab[:, None]
        return hit[:, 0].clone(), hit.any(dim=1)

    def describe(self) -> dict[str, Any]:
        """JSON-able record of everything that decides this model's predictions."""
        return {
            "spec": self.spec,
            "adapter": self.adapter,
            "weights": self.weights_path,
            "weights_hash": self.weights_hash,
            "preprocessing": self.preprocessing.describe(),
            "batch_size": self.batch_size,
            "device": self.device,
            "label_space": self.label_space.describe(),
            "head": self.head,
            "model_outputs": self.model_outputs,
            "num_outputs": self.num_outputs,
            **({"inference": self.inference.describe()} if not self.inference.default else {}),
            **self.details,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.spec!r}, label_space={self.label_space.name!r}, "
            f"device={self.device!r})"
        )


class TorchModel(Model):
    """An adapter whose backend is a ``torch.nn.Module`` returning logits."""

    adapter = "torch"

    def __init__(self, spec: str, module, **kwargs):
        import torch

        # channels_last lets oneDNN/cuDNN pick their fast convolution kernels (about 1.3-1.6x
        # for EfficientNet-Lite on CPU; logits agree to ~1e-6). Inputs may stay NCHW. Always
        # on, so it is recorded with the model (describe) but is no part of the run id.
        self.module = module.eval().to(kwargs["device"]).to(memory_format=torch.channels_last)
        super().__init__(spec, **kwargs)

    def _forward(self, batch):
        return self.module(batch.to(self.device, non_blocking=True))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "memory_format": "channels_last"}


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
    if is_unsafe_pickle(exc):
        return InputError(f"cannot read {what} {path}: {UNSAFE_PICKLE}", hint=SAFE_FORMATS)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return InputError(f"cannot read {what} {path}: {first}", hint=SAFE_FORMATS)


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
