"""What every model adapter shares: the label-space head, scoring and the record.

An adapter only has to build a backend (a torch module, an ONNX session, ...) and say how
a normalised batch becomes logits. Everything that decides a result -- how an image is
resized and normalised (:mod:`.preprocess`), which logit columns count, when a prediction
is correct -- is decided once, so a ``timm:`` model and an ``onnx:`` export of it score
the same way. Devices, downloads and weights files have their own modules
(:mod:`.devices`, :mod:`.hub`, :mod:`.weights`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from robustlab.errors import InputError

from .preprocess import Preprocessing

NUM_IMAGENET = 1000


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
        weights_label: str | None = None,
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
        # How the record names the weights: their path, unless the adapter names them by
        # their place inside an installed package (the bundled lite weights), so that the
        # same run in another environment has the same record, not another site-packages.
        self.weights_label = weights_label
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
            "weights": self.weights_label or self.weights_path,
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
