"""Test-time defences as model wrappers: CLAHE, non-local means and ten-crop TTA.

The ImageNet-C paper measured what such defences do to corruption robustness (CLAHE
helped after fine-tuning on CLAHE images, NL-means and 10-crop did not). :func:`defend`
wraps any adapter's model, so every model robustlab loads can be measured with them:

>>> from robustlab.defences import defend
>>> model = defend(load_model("lite0"), preprocess="clahe", tta="ten-crop")  # doctest: +SKIP

A defence is named by a short spec, ``NAME`` or ``NAME:key=value,...`` (``clahe``,
``clahe:clip_limit=3,tile_grid=4x4``, ``nlmeans:h_factor=0.8``, ``ten-crop:scale=0.8``);
the parameters are the fields of :class:`~robustlab.defences.pixels.Clahe`,
:class:`~robustlab.defences.pixels.NLMeans` and :class:`~robustlab.defences.tta.TenCrop`,
whose docstrings justify the defaults. The full record (name and every parameter) is part
of the run identity, so a defended run never mixes or resumes with a plain one.

Where each part runs: the pixel defences work on uint8 images and run inside
``model.preprocessing.to_uint8``, i.e. in the evaluation workers that decode and corrupt
the images, in parallel, while the main process keeps the accelerator busy; NL-means
costs about 60 ms per 224-pixel image on one core, more than a GPU forward pass, so the
main process is the wrong place for it. The workers still ship one uint8 image per
sample; with ten-crop that image is ``1 / scale`` larger (256 instead of 224 pixels:
1.3x the bytes, where ten shipped views would be 10x) and the views are cut and
normalised on the model's device, where slicing is nearly free.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from robustlab.defences.model import DefendedModel, DefendedPreprocessing
from robustlab.defences.pixels import PIXEL_DEFENCES, Clahe, NLMeans, noise_sigma
from robustlab.defences.tta import TTA_METHODS, TenCrop
from robustlab.errors import InputError

__all__ = [
    "PIXEL_DEFENCES",
    "TTA_METHODS",
    "Clahe",
    "DefendedModel",
    "DefendedPreprocessing",
    "NLMeans",
    "TenCrop",
    "defence_label",
    "defend",
    "get_preprocess",
    "get_tta",
    "noise_sigma",
    "parse_spec",
]


def _convert(cls, key: str, text: str):
    """A ``key=value`` value as the type of the field's default."""
    default = {f.name: f.default for f in dataclasses.fields(cls)}[key]
    hint = typing.get_type_hints(cls).get(key)
    try:
        if isinstance(default, tuple):
            parts = [int(p) for p in text.lower().split("x")]
            if len(parts) == 1:
                parts = parts * 2
            return tuple(parts)
        if isinstance(default, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if isinstance(default, int) or hint is int:
            return int(text)
        return float(text)
    except ValueError:
        raise InputError(
            f"{cls.name} {key}={text!r} is not a valid value (default {default!r})"
        ) from None


def parse_spec(spec, table: dict[str, type], what: str):
    """A defence object from ``NAME[:key=value,...]``, an object already made, or None.

    Raises:
        InputError: an unknown name (the message lists the choices), an unknown
            parameter (it lists the parameters) or a bad value.
    """
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "none")):
        return None
    if not isinstance(spec, str):
        if type(spec) not in table.values():
            raise InputError(
                f"{what} must be one of {', '.join(table)} (a name or an object "
                f"of its class), got {spec!r}"
            )
        return spec
    name, _, params = spec.strip().partition(":")
    cls = table.get(name.strip().lower())
    if cls is None:
        raise InputError(f"unknown {what} {name.strip()!r}; choose from {', '.join(table)}")
    fields = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in params.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            raise InputError(
                f"{cls.name} has no parameter {key!r}; its parameters are "
                f"{', '.join(fields)} (as {cls.name}:{fields[0]}=VALUE)"
            )
        kwargs[key] = _convert(cls, key, value.strip())
    return cls(**kwargs)


def get_preprocess(spec):
    """A pixel defence from its spec (``clahe``, ``nlmeans:h_factor=0.8``...) or None."""
    return parse_spec(spec, PIXEL_DEFENCES, "--preprocess")


def get_tta(spec):
    """A test-time augmentation from its spec (``ten-crop``...) or None."""
    return parse_spec(spec, TTA_METHODS, "--tta")


def defend(model, *, preprocess=None, tta=None):
    """``model`` behind the named defences, or ``model`` itself when none is named.

    Args:
        model: A loaded :class:`robustlab.models.Model` (any adapter).
        preprocess: Pixel defence spec or object (``"clahe"``, ``"nlmeans"``) or None.
        tta: Test-time augmentation spec or object (``"ten-crop"``) or None.
    """
    pixels, views = get_preprocess(preprocess), get_tta(tta)
    if pixels is None and views is None:
        return model
    return DefendedModel(model, pixels=pixels, tta=views)


def defence_label(defence: dict | None) -> str | None:
    """Short name of a stored defence record: ``clahe``, ``nlmeans+ten-crop``; None for
    no defence. Parameters other than the defaults are shown: ``clahe(clip_limit=3.0)``."""
    if not defence:
        return None
    parts = []
    for key, table in (("preprocess", PIXEL_DEFENCES), ("tta", TTA_METHODS)):
        rec = defence.get(key)
        if not rec:
            continue
        name = rec.get("name")
        cls = table.get(name)
        changed = []
        if cls is not None:
            default = cls().describe()
            changed = [f"{k}={v}" for k, v in rec.items() if k != "name" and default.get(k) != v]
        parts.append(f"{name}({', '.join(changed)})" if changed else str(name))
    return "+".join(parts) or None
