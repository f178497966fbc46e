"""``open_clip:ARCH`` + weights: CLIP zero-shot classification over a label space.

ARCH is an open_clip model config name (``ViT-B-32``, ...) or a local folder holding an
``open_clip_config.json`` (the layout of open_clip models on the hub). The weights file is
required (``weights=PATH`` or ``open_clip:ARCH@PATH``; a folder may hold its own
``open_clip_pytorch_model.bin`` / ``open_clip_model.safetensors``): robustlab never
downloads CLIP weights.

The classifier is built once from the label space's readable class names: each name is
written into every prompt template, the normalised text embeddings are averaged per class
and normalised again; logits are ``logit_scale * <image embedding, class embedding>``.
So the outputs are the label space's own classes (ImageNet-9's 9 super-class names,
ImageNet-D's 113 names) and predictions are scored directly.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robustlab.errors import InputError, MissingResourceError

from .base import Model
from .devices import auto_device, default_batch_size
from .preprocess import Preprocessing
from .registry import unknown_model
from .weights import is_unsafe_pickle, package_versions, weights_hash, weights_refusal

CPU_BATCH = 16
# Prompt templates (our own short set; ImageNet-D's protocol uses the first one alone).
TEMPLATES = (
    "a photo of a {}.",
    "a photo of the {}.",
    "a blurry photo of a {}.",
    "a close-up photo of a {}.",
    "a bright photo of a {}.",
    "a dark photo of a {}.",
    "a drawing of a {}.",
    "a photo of a small {}.",
    "a photo of a large {}.",
    "a cropped photo of a {}.",
)


def imagenet_d_clip_name(name: str) -> str:
    """ImageNet-D's CLIP class text: ``_`` and ``-`` become spaces, ``/`` becomes " or ",
    lower case (``coffee/french press`` -> ``coffee or french press``, ``t-shirt`` ->
    ``t shirt``), as its evaluation script writes the class names into the prompt."""
    return name.replace("_", " ").replace("-", " ").replace("/", " or ").lower()


@dataclass(frozen=True)
class ZeroShotProtocol:
    """How a paper built its zero-shot classifier: prompt templates, how a class name is
    written into them, and the fixed logit scale (None: the checkpoint's own)."""

    templates: tuple[str, ...]
    name: Callable[[str], str]
    logit_scale: float | None
    source: str


# Label spaces whose paper fixed the zero-shot protocol; other spaces use TEMPLATES.
PAPER_PROTOCOLS = {
    "imagenet-d": ZeroShotProtocol(
        ("A photo of a {}",),
        imagenet_d_clip_name,
        100.0,
        "ImageNet-D evaluate_vlm.py: 'A photo of a {c}', softmax over 100 x cosine",
    ),
}
FOLDER_WEIGHTS = ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")
TEXT_CHUNK = 256


@contextlib.contextmanager
def _quiet():
    """Silence open_clip's root-logger warnings ("initialized randomly") while we build the
    model: the weights are loaded right after, explicitly."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


class OpenCLIPModel(Model):
    adapter = "open_clip"

    def __init__(self, spec: str, net, class_weights, logit_scale: float, **kwargs):
        self.module = net.eval().to(kwargs["device"])
        self.class_weights = class_weights.to(kwargs["device"])
        self.logit_scale = float(logit_scale)
        super().__init__(spec, native=True, **kwargs)

    def _forward(self, batch):
        import torch
        import torch.nn.functional as F

        img = self.module.encode_image(batch.to(self.device, non_blocking=True))
        # The class logits in float32 also under --precision bf16/fp16 (see
        # robustlab.models.inference): only the image tower runs in low precision.
        with torch.autocast(torch.device(self.device).type, enabled=False):
            img = F.normalize(img.float(), dim=-1)
            return self.logit_scale * img @ self.class_weights.float().T

    def _fp32_layers(self) -> list:
        """The image tower's ends (the text tower only built the class weights)."""
        from robustlab.models.inference import end_layers

        return end_layers(self.module.visual)


def zero_shot_weights(net, tokenizer, classes, templates, device: str):
    """(num_classes, dim) normalised mean text embedding of each class over the templates."""
    import torch
    import torch.nn.functional as F

    texts = [t.format(c) for c in classes for t in templates]
    embs = []
    with torch.inference_mode():
        for i in range(0, len(texts), TEXT_CHUNK):
            tokens = tokenizer(texts[i : i + TEXT_CHUNK]).to(device)
            embs.append(F.normalize(net.encode_text(tokens).float(), dim=-1))
    emb = torch.cat(embs).view(len(classes), len(templates), -1).mean(dim=1)
    return F.normalize(emb, dim=-1)


def _preprocessing(net) -> Preprocessing:
    import open_clip

    cfg = open_clip.get_model_preprocess_cfg(net)
    size = cfg.get("size", 224)
    if isinstance(size, (list, tuple)):
        size = int(size[0]) if size[0] == size[1] else (int(size[0]), int(size[1]))
    mode = "squash" if cfg.get("resize_mode") == "squash" else "shorter"
    return Preprocessing(
        input_size=size,
        crop_pct=1.0,
        interpolation=cfg.get("interpolation", "bicubic"),
        mean=tuple(cfg["mean"]),
        std=tuple(cfg["std"]),
        resize_mode=mode,
    )


def _checkpoint(open_clip, arch: str, weights) -> tuple[str, Path]:
    """(open_clip model name, weights file) for ``arch``: a config name, or a folder
    holding ``open_clip_config.json`` and perhaps its own weights file."""
    folder = Path(arch).expanduser()
    if folder.is_dir():
        if not (folder / "open_clip_config.json").is_file():
            raise InputError(f"{folder} has no open_clip_config.json")
        name = f"local-dir:{folder}"
        if weights is None:
            found = [folder / f for f in FOLDER_WEIGHTS if (folder / f).is_file()]
            weights = found[0] if found else None
    elif arch in open_clip.list_models():
        name = arch
    else:
        raise unknown_model(
            "open_clip",
            arch,
            open_clip.list_models(),
            "open_clip.list_models() (or a folder with open_clip_config.json)",
        )
    if weights is None:
        raise MissingResourceError(
            f"open_clip:{arch} needs weights: download the checkpoint (e.g. "
            "open_clip_pytorch_model.bin from the model's Hugging Face page) and pass "
            "--weights PATH; robustlab does not download CLIP weights"
        )
    path = Path(weights).expanduser()
    if not path.is_file():
        raise MissingResourceError(f"weights file {path} does not exist")
    return name, path


def _build(open_clip, arch: str, name: str, path: Path):
    """(network, tokenizer) with the checkpoint loaded strictly; one line when it does not fit."""
    try:
        with _quiet():
            net = open_clip.create_model(name, load_weights=False, pretrained_text=False)
            open_clip.load_checkpoint(net, str(path), strict=True)
            tokenizer = open_clip.get_tokenizer(name)
    except Exception as exc:  # noqa: BLE001 - config needing a download, checkpoint misfit
        if is_unsafe_pickle(exc):
            raise weights_refusal(path, exc) from None
        text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise InputError(f"cannot load open_clip:{arch} with {path}: {text}") from None
    return net, tokenizer


def load(
    arch: str,
    *,
    spec: str,
    weights=None,
    device=None,
    label_space=None,
    batch_size=None,
    templates=None,
) -> OpenCLIPModel:
    """A zero-shot CLIP classifier over ``label_space``.

    ``templates`` None: the paper's protocol when the label space has one
    (:data:`PAPER_PROTOCOLS`: ImageNet-D's single prompt, name normalisation and logit scale
    100), else robustlab's :data:`TEMPLATES` with the checkpoint's logit scale.
    """
    try:
        import open_clip
    except ImportError:
        raise MissingResourceError(
            "open_clip: models need open_clip: pip install open-clip-torch"
        ) from None
    from robustlab.data.labels import get_label_space

    space = get_label_space(label_space or "imagenet1k")
    protocol = PAPER_PROTOCOLS.get(space.name) if templates is None else None
    if templates is None:
        templates = protocol.templates if protocol else TEMPLATES
    if not templates or any("{}" not in t for t in templates):
        raise InputError("prompt templates must each contain '{}' for the class name")
    name, path = _checkpoint(open_clip, arch, weights)
    dev = auto_device(device)
    net, tokenizer = _build(open_clip, arch, name, path)
    net = net.eval().to(dev)
    name_of = protocol.name if protocol else (lambda c: c.replace("_", " "))
    classes = [name_of(c) for c in space.classes]
    class_weights = zero_shot_weights(net, tokenizer, classes, templates, dev)
    scale = float(net.logit_scale.exp().detach())
    if protocol and protocol.logit_scale:
        scale = protocol.logit_scale
    return OpenCLIPModel(
        spec,
        net,
        class_weights,
        scale,
        preprocessing=_preprocessing(net),
        batch_size=batch_size or default_batch_size(CPU_BATCH, dev),
        device=dev,
        label_space=space,
        weights_path=path,
        weights_hash=weights_hash(path),
        model_outputs=len(space),
        details={
            "architecture": f"open_clip:{arch}",
            "zero_shot": {
                "templates": list(templates),
                "class_texts": classes,
                "logit_scale": scale,
                "protocol": protocol.source if protocol else "robustlab templates",
            },
            "versions": package_versions("open_clip_torch"),
        },
    )
