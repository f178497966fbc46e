"""Run identity: a deterministic run id, so a rerun of the same evaluation resumes.

Two invocations are the same run when everything that decides a prediction is the same:
the model (spec, weights hash, preprocessing, precision, and any test-time defence
with its parameters, see :mod:`robustlab.defences`), the pixels (the *content* of
every image and mask, the masks folder, the suite protocol, seed, suite and its version,
robustlab's version), the labels, the label space and the source kind (on the fly, or a
generated folder and that folder's own identity). Which cells are requested is *not* part
of the identity: asking for more cells later extends the run, and cells already stored are
skipped. A changed input gives a new run id, never a resumed old run.

The parts are also kept apart (:func:`input_parts`, stored as ``runs.config["inputs"]``)
so that a new run can say which input differs from an earlier one over the same data
(:func:`input_changes`).

:func:`make_record` is the one place an identity becomes a run's stored record
(:class:`robustlab.store.RunRecord`): evaluate's planners, saliency, segmentation, the
surface-variation holdout and the ImageNet-D VLM runs build their identity dict and hand
it there, so the id and the columns that repeat the identity cannot drift apart. The few
workflows whose stored runs were spelled otherwise before that (vlm's ``vlm-`` prefix over
``json.dumps``' default separators, data folders stored as given) say so with a
:class:`RecordStyle`, so their stored runs resume under the ids they have.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import platform
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from robustlab.store import RunRecord


def fields_of(obj: Any) -> dict[str, Any]:
    """The fields of a dataclass, mapping, namedtuple or plain object as a dict (for run
    identities; objects with a record of their own have ``describe()``)."""
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


def input_parts(samples, labels, image_hashes, mask_hashes) -> dict[str, Any]:
    """Separate fingerprints of the images, masks and labels of a sample list.

    Args:
        samples: Samples (``id``, ``class_name``), sorted by id.
        labels: Label index per sample.
        image_hashes, mask_hashes: Content hash per sample (None: no mask).

    Returns:
        ``images``, ``masks`` (None when no sample has a mask), ``labels`` and ``n``.
    """
    ids = [s.id for s in samples]
    return {
        "n": len(ids),
        "images": data_fingerprint(zip(ids, image_hashes)),
        "masks": (
            data_fingerprint(zip(ids, mask_hashes))
            if any(h is not None for h in mask_hashes)
            else None
        ),
        "labels": data_fingerprint((s.id, s.class_name, lab) for s, lab in zip(samples, labels)),
    }


def masked_fingerprints(samples) -> tuple[str, str]:
    """(images, masks) fingerprints by content of samples that all have a mask, for the
    workflows that score a model against masks (saliency, segmentation): the image one
    holds id, class and hash, the mask one id and hash, so a replaced mask is another run
    while the images' fingerprint stays comparable across masks folders."""
    from robustlab.records.content_hash import hash_files

    image_hashes = hash_files([x.path for x in samples])
    mask_hashes = hash_files([x.mask_path for x in samples])
    return (
        data_fingerprint((x.id, x.class_name, h) for x, h in zip(samples, image_hashes)),
        data_fingerprint((x.id, h) for x, h in zip(samples, mask_hashes)),
    )


# Reading order and wording of :func:`input_changes`.
_PART_NAMES = {
    "n": "number of images",
    "images": "image content",
    "masks": "mask content",
    "masks_dir": "masks folder",
    "labels": "labels",
    "seed": "seed",
    "protocol": "protocol",
    "preprocessing": "model preprocessing",
    "precision": "precision",
    "compile": "torch.compile",
    "defence": "defence",
    "source": "source",
    "generated": "generated folder",
    "generated_files": "generated file content",
    "shift_path": "shift path",
}


def input_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Phrases naming the inputs that differ (``"masks folder /a -> /b"``, ``"image
    content"``); hashes are named, not printed."""
    out = []
    for key, name in _PART_NAMES.items():
        a, b = old.get(key), new.get(key)
        # As JSON: a stored record has lists where a fresh one has tuples.
        if canonical_json(a) == canonical_json(b):
            continue
        if key in (
            "images",
            "masks",
            "labels",
            "preprocessing",
            "protocol",
            "generated",
            "generated_files",
        ):
            out.append(name)
        elif key == "defence":
            from robustlab.defences import defence_label

            out.append(f"{name} {defence_label(a) or 'none'} -> {defence_label(b) or 'none'}")
        else:
            out.append(f"{name} {a} -> {b}")
    return out


def model_precision(model) -> str | None:
    """The numeric type a model computes in: its autocast type (``bfloat16 (autocast)``,
    see :mod:`robustlab.models.inference`), else its ``dtype``/``precision`` attribute,
    else the dtype of a torch module's first parameter, else None (unknown: e.g. ONNX).

    Without autocast the value is what it always was (``torch.float32``), so fp32 runs
    keep their ids; under autocast it differs, so a bf16 run never resumes an fp32 one.
    """
    inference = getattr(model, "inference", None)
    label = inference.precision_label() if inference is not None else None
    if label is not None:
        return label
    for attr in ("precision", "dtype"):
        value = getattr(model, attr, None)
        if value is not None:
            return str(value)
    module = getattr(model, "module", None)
    if module is not None and hasattr(module, "parameters"):
        for p in module.parameters():
            return str(p.dtype)
    return None


def inference_identity(model) -> dict[str, Any]:
    """Identity keys of how the forward pass runs, beyond its precision: ``compile`` when
    the model runs through ``torch.compile`` (other kernels, other roundings), and nothing
    otherwise, so uncompiled runs keep the ids they always had.

    ``channels_last`` is not here on purpose: every torch model has always run in it (see
    :class:`robustlab.models.TorchModel`), so it is part of what "the model" means, not a
    choice that can differ between two runs.
    """
    inference = getattr(model, "inference", None)
    return {"compile": "inductor"} if inference is not None and inference.compile else {}


def spaced_json(obj: Any) -> str:
    """``json.dumps``' own spelling (sorted keys, ``", "`` and ``": "`` separators): the one
    the VLM runs' ids were hashed over, kept so those runs resume."""
    return json.dumps(obj, sort_keys=True, default=str)


def run_id(
    identity: dict[str, Any], *, prefix: str = "", spelling: Callable[[Any], str] = canonical_json
) -> str:
    """A 16-hex-digit id from the identity fields (canonical JSON, BLAKE2b), after
    ``prefix``; ``spelling`` is how the identity is written before it is hashed."""
    return prefix + hashlib.blake2b(spelling(identity).encode(), digest_size=8).hexdigest()


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    """Read once per process (20 ms: ten package metadata lookups)."""
    out = {"python": platform.python_version()}
    for dist in (
        "robustlab",
        "numpy",
        "torch",
        "torchvision",
        "timm",
        "pillow",
        "opencv-python-headless",
        "scikit-image",
        "scipy",
        "duckdb",
    ):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return tuple(out.items())


def versions() -> dict[str, str]:
    """Versions of the packages whose behaviour can change a prediction."""
    return dict(_installed_versions())


@dataclasses.dataclass(frozen=True)
class RecordStyle:
    """How a workflow spells its run ids and stored records, where that differs from the
    default, so its runs stored before :func:`make_record` resume under their ids.

    Attributes:
        prefix: Put before the hash (vlm runs: ``vlm-``).
        spelling: The identity as text before hashing (vlm runs: :func:`spaced_json`).
        resolve_root: Store the data folder resolved (the default) or as given (holdout
            and vlm runs always stored it as given).
        versions: Store the package versions (vlm runs never did).
    """

    prefix: str = ""
    spelling: Callable[[Any], str] = canonical_json
    resolve_root: bool = True
    versions: bool = True


# Columns of a stored run that repeat the identity's value of the same name.
RECORD_COLUMNS = (
    "model_spec",
    "weights_hash",
    "suite",
    "suite_version",
    "data_fingerprint",
    "label_space",
    "preprocessing",
    "seed",
)


def make_record(
    identity: dict[str, Any],
    *,
    data_root: str | Path | None,
    config: dict[str, Any],
    n_samples: int,
    skipped: Iterable[Any] = (),
    extra_versions: dict[str, str] | None = None,
    style: RecordStyle = RecordStyle(),
    **columns: Any,
) -> RunRecord:
    """The stored record of the run ``identity`` describes.

    Args:
        identity: Everything that decides the run's rows; its hash is the run id
            (:func:`run_id`). Which keys it holds is the workflow's: a key added for a new
            option only when the option is used keeps the ids of runs without it.
        data_root: The data folder (stored resolved unless ``style`` says otherwise;
            None: no folder; not part of the id: a moved folder with the same content is
            the same run).
        config: The run's description (``runs.config``): cells, sources, the model's
            description, whatever the workflow reads back.
        n_samples: Images the run covers.
        skipped: ``(id, reason)`` pairs left out while listing the data.
        extra_versions: Versions beyond :func:`versions` (saliency's attribution library).
        style: The workflow's id and record spelling (:class:`RecordStyle`; holdout and
            vlm runs keep theirs).
        columns: Values of :data:`RECORD_COLUMNS` that differ from the identity's (saliency
            and segmentation store the protocol beside the model's preprocessing; a run
            without a label space stores None; holdout and vlm name their model and data
            here, their identity keys having other names).

    Returns:
        A :class:`robustlab.store.RunRecord` with status ``running``, ready for
        :meth:`robustlab.store.Store.start_run`.
    """
    from robustlab.store import RunRecord

    values: dict[str, Any] = {key: identity.get(key) for key in RECORD_COLUMNS}
    values.update(columns)
    values["seed"] = int(values["seed"] or 0)
    root = data_root if data_root is None or not style.resolve_root else Path(data_root).resolve()
    return RunRecord(
        run_id=run_id(identity, prefix=style.prefix, spelling=style.spelling),
        data_root=None if root is None else str(root),
        versions={**versions(), **(extra_versions or {})} if style.versions else {},
        config=config,
        n_samples=int(n_samples),
        skipped=[list(x) for x in skipped],
        **values,
    )
