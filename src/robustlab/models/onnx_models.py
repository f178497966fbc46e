"""``onnx:PATH``: an exported image classifier run with onnxruntime.

The graph must take one float32 ``Bx3xHxW`` input and return ``(B, classes)`` logits as its
first output. An ONNX file does not say how its input was normalised, so the preprocessing
comes from the model's metadata when the exporter wrote it (metadata_props keys
``input_size``, ``crop_pct``, ``interpolation``, ``mean``, ``std``, ``resize_mode`` holding
JSON values), else ImageNet defaults (256 -> 224 crop, bilinear, ImageNet mean/std) with
the graph's own input size when it is fixed. What was used is recorded either way.
A graph with a fixed batch dimension is fed in chunks of that size (the last one padded).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from robustlab.errors import InputError, MissingResourceError

from .base import Model
from .devices import auto_device, default_batch_size
from .preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing
from .weights import package_versions, weights_hash

CPU_BATCH = 32
META_KEYS = ("input_size", "crop_pct", "interpolation", "mean", "std", "resize_mode")


class ONNXModel(Model):
    adapter = "onnx"

    def __init__(self, spec: str, session, fixed_batch: int | None, **kwargs):
        self.session = session
        self.input_name = session.get_inputs()[0].name
        self.fixed_batch = fixed_batch
        super().__init__(spec, **kwargs)

    def input_device(self) -> str:
        return "cpu"  # ONNX Runtime reads numpy arrays from host memory

    def _forward(self, batch):
        import torch

        x = batch.detach().cpu().float().numpy()
        n = x.shape[0]
        if self.fixed_batch is None:
            return torch.from_numpy(np.asarray(self.session.run(None, {self.input_name: x})[0]))
        b = self.fixed_batch
        outs = []
        for i in range(0, n, b):
            chunk = x[i : i + b]
            if chunk.shape[0] < b:
                pad = np.zeros((b - chunk.shape[0], *chunk.shape[1:]), dtype=chunk.dtype)
                chunk = np.concatenate([chunk, pad])
            outs.append(np.asarray(self.session.run(None, {self.input_name: chunk})[0]))
        return torch.from_numpy(np.concatenate(outs)[:n])


def _dim(d) -> int | None:
    return d if isinstance(d, int) and d > 0 else None


def _preprocessing(meta: dict, h: int | None, w: int | None) -> tuple[Preprocessing, str]:
    found = {k: meta[k] for k in META_KEYS if k in meta}
    size = h if h and h == w else ((h, w) if h and w else 224)
    if not found:
        return (
            Preprocessing(size, 0.875, "bilinear", IMAGENET_MEAN, IMAGENET_STD),
            "defaults (no preprocessing metadata in the ONNX file)",
        )
    try:
        vals = {k: json.loads(v) if isinstance(v, str) else v for k, v in found.items()}
    except json.JSONDecodeError as exc:
        raise InputError(f"ONNX preprocessing metadata is not JSON: {exc}") from None
    input_size = vals.get("input_size", size)
    if isinstance(input_size, list):
        input_size = (
            input_size[0]
            if len(input_size) == 2 and input_size[0] == input_size[1]
            else tuple(input_size)
        )
    return (
        Preprocessing(
            input_size=input_size,
            crop_pct=float(vals.get("crop_pct", 0.875)),
            interpolation=str(vals.get("interpolation", "bilinear")),
            mean=tuple(vals.get("mean", IMAGENET_MEAN)),
            std=tuple(vals.get("std", IMAGENET_STD)),
            resize_mode=str(vals.get("resize_mode", "shorter")),
        ),
        "from ONNX metadata_props",
    )


def load(
    path: str, *, spec: str, weights=None, device=None, label_space=None, batch_size=None
) -> ONNXModel:
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingResourceError(
            "onnx: models need onnxruntime: pip install onnxruntime"
        ) from None
    if weights is not None:
        raise InputError(
            "onnx: models carry their weights in the .onnx file; --weights is not used"
        )
    file = Path(path).expanduser()
    if not file.is_file():
        raise MissingResourceError(f"ONNX file {file} does not exist")
    dev = auto_device(device)
    providers = ["CPUExecutionProvider"]
    if dev.startswith("cuda") and "CUDAExecutionProvider" in ort.get_available_providers():
        providers.insert(0, "CUDAExecutionProvider")
    try:
        session = ort.InferenceSession(str(file), providers=providers)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"cannot load ONNX model {file}: {text}") from None
    inputs, outputs = session.get_inputs(), session.get_outputs()
    shape = inputs[0].shape
    if len(inputs) != 1 or len(shape) != 4 or (isinstance(shape[1], int) and shape[1] != 3):
        raise InputError(
            f"{file}: expected one Bx3xHxW input, found {[(i.name, i.shape) for i in inputs]}"
        )
    out_shape = outputs[0].shape
    classes = _dim(out_shape[-1]) if len(out_shape) == 2 else None
    meta = session.get_modelmeta().custom_metadata_map or {}
    pre, note = _preprocessing(meta, _dim(shape[2]), _dim(shape[3]))
    if classes is None:  # dynamic class dimension: ask the graph once
        import torch

        probe = torch.zeros(1 if _dim(shape[0]) is None else shape[0], 3, *pre.hw)
        out = session.run(None, {inputs[0].name: probe.numpy()})[0]
        if np.ndim(out) != 2:
            raise InputError(
                f"{file}: first output has shape {np.shape(out)}, expected (B, classes)"
            )
        classes = int(np.shape(out)[1])
    return ONNXModel(
        spec,
        session,
        _dim(shape[0]),
        preprocessing=pre,
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=label_space,
        weights_path=file,
        weights_hash=weights_hash(file),
        model_outputs=classes,
        details={
            "architecture": "onnx",
            "preprocessing_source": note,
            "providers": session.get_providers(),
            "versions": package_versions("onnxruntime"),
        },
    )
