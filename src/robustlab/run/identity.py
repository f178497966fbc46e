"""Run identity: a deterministic run id, so a rerun of the same evaluation resumes.

Two invocations are the same run when they evaluate the same model (spec and weights
hash) with the same preprocessing on the same images (data fingerprint) under the same
suite, suite version, robustlab version, label space, seed and source kind (generated
folder or on-the-fly). Which cells are requested is *not* part of the identity: asking for
more cells later extends the run, and cells already stored are skipped.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
from collections.abc import Iterable
from importlib import metadata
from typing import Any


def as_dict(obj: Any) -> dict[str, Any]:
    """A JSON-able dict from a dataclass, mapping, namedtuple or plain object."""
    if obj is None:
        return {}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if hasattr(obj, "_asdict"):
        return dict(obj._asdict())
    if hasattr(obj, "__dict__"):
        return {k: v for k, v in vars(obj).items() if not k.startswith("_")}
    return {"value": obj}


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def data_fingerprint(entries: Iterable[tuple[Any, ...]]) -> str:
    """Hash of the image set: one tuple per sample (id, class, label, size...), in order.

    The sample list is sorted by id (Sources contract), so the fingerprint does not depend
    on directory listing order. Entries are hashed one at a time: memory stays flat.
    """
    h = hashlib.blake2b(digest_size=16)
    n = 0
    for entry in entries:
        h.update("\t".join("" if v is None else str(v) for v in entry).encode())
        h.update(b"\n")
        n += 1
    h.update(f"n={n}".encode())
    return h.hexdigest()


def run_id(identity: dict[str, Any]) -> str:
    """A 16-hex-digit id from the identity fields (canonical JSON, BLAKE2b)."""
    return hashlib.blake2b(canonical_json(identity).encode(), digest_size=8).hexdigest()


def versions() -> dict[str, str]:
    """Versions of the packages whose behaviour can change a prediction."""
    out = {"python": platform.python_version()}
    for dist in ("robustlab", "numpy", "torch", "torchvision", "timm", "pillow",
                 "opencv-python-headless", "scikit-image", "scipy", "duckdb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
