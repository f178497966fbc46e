"""``robustlab synth``: draw the prompt grid with a diffusion model into the ImageNet-D layout.

Output: ``<out>/<subset>/<class folder>/<nuisance>_<k>.png`` (ImageNet-D's published
``<subset>/<class>/<id>.png``), plus

- ``<out>/manifest.json``: the identity of the images (checkpoint fingerprint, pipeline,
  sampler, steps, guidance, size, seed, templates, label space), the vocabularies, counts,
  failures with reasons and every run's record (device, dtype, batch size). It is written
  *before* the first image, so a folder never holds images whose making is unrecorded;
- ``<out>/prompts.csv``: every image of the grid with its prompt and seed;
- ``<out>/labels.csv``: the images that exist, with their class folder (``file,class,...``),
  so ``robustlab evaluate`` / ``robustlab mine`` read the whole tree at once.

Like ``generate``, images are written atomically (hidden temp file + rename) and a rerun
skips the ones that exist, so a killed run (even ``kill -9``) resumes without a broken or
duplicated file. A rerun whose identity differs from the folder's is refused
(:class:`~robustlab.errors.InputChangedError` naming what changed); a rerun may add classes,
nuisances or images per pair. A prompt the model fails on is a counted, recorded skip.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robustlab.errors import InputChangedError, InputError
from robustlab.workflows.generate import (
    _jsonable,
    _now,
    atomic_write,
    library_versions,
    remove_temp_files,
)
from robustlab.manifest import load_manifest, manifest_lock, mark_dead_runs, this_process
from robustlab.shifts.generative.tiny import warn_if_random
from robustlab.shifts.generative.text2image import SCHEDULERS, TextToImage, describe_checkpoint
from robustlab.workflows.imagenet_d.synth.prompts import (
    VOCABULARIES,
    PromptItem,
    build_grid,
    load_templates,
    load_vocabulary,
    select_classes,
)

log = logging.getLogger(__name__)

FORMAT = "robustlab-synth/1"
MANIFEST = "manifest.json"
PROMPTS = "prompts.csv"
LABELS = "labels.csv"
PROMPT_COLUMNS = ("file", "class", "subset", "nuisance", "k", "prompt", "seed")


@dataclass
class SynthResult:
    """What a ``synth`` call did (the manifest holds the full record).

    Attributes:
        out: Output folder.
        planned: Images in the grid asked for.
        written: Images written by this call.
        existing: Images found finished and left untouched.
        failures: ``(file, reason)`` of images the model failed on (counted skips).
        seconds: Wall time.
        backend: The pipeline's record, when one was loaded.
        stages: With the Ray backend: images and worker time per stage, and the wall time.
    """

    out: Path
    planned: int
    written: int = 0
    existing: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    backend: dict[str, Any] | None = None
    stages: dict[str, Any] | None = None


def synth(
    out,
    checkpoint,
    *,
    label_space: str = "imagenet-d",
    classes: Sequence[str] | None = None,
    nuisances: Sequence[str] = VOCABULARIES,
    per_pair: int = 1,
    seed: int = 0,
    steps: int = 30,
    guidance_scale: float = 7.5,
    height: int = 512,
    width: int = 512,
    negative_prompt: str = "",
    templates=None,
    sampler: str | None = None,
    max_nuisances: int | None = None,
    limit: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    pipeline: TextToImage | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: bool = False,
) -> SynthResult:
    """Synthesise every image of the prompt grid that ``out`` does not hold yet.

    Args:
        out: Output folder; rerunning with the same identity resumes.
        checkpoint: Local diffusers text-to-image folder (``save_pretrained`` layout).
        label_space: Label space whose classes are drawn (name or CSV).
        classes: Only these classes (folder, name or index); default all.
        nuisances: Built-in vocabularies (``background``, ``texture``, ``material``) and/or
            CSV files with a ``name`` column (subset = file stem).
        per_pair: Images per (class, nuisance) pair.
        seed: Global seed of the seed rule.
        steps, guidance_scale, height, width, negative_prompt: Diffusion settings.
        templates: Mapping or CSV (``subset,template``) replacing the default templates.
        sampler: A key of :data:`robustlab.shifts.generative.text2image.SCHEDULERS`; None keeps the
            checkpoint's scheduler.
        max_nuisances: Only the first N names of each vocabulary.
        limit: Only the first N images of the grid (in grid order).
        batch_size: Prompts per pipeline call (default 8 on a GPU, 1 on the CPU).
        device, dtype: Where and how the pipeline runs (see :class:`TextToImage`).
        pipeline: An already loaded :class:`TextToImage` for ``checkpoint`` (local backend).
        backend: ``"local"`` (the pipeline runs in this process) or ``"ray"`` (one pipeline
            per GPU of a Ray cluster, or per node without GPUs, each loaded from
            ``checkpoint``: :func:`robustlab.run.ray_backend.synth_on_ray`). The same files
            byte for byte; a folder started on one backend is finished on the other.
        address: The Ray cluster's ``HOST:PORT`` (None: a Ray instance on this machine).
            ``out`` and ``checkpoint`` must be paths every node of that cluster sees.
        progress: A tqdm bar on stderr.

    Raises:
        InputError: bad arguments, unknown class, vocabulary without a name column.
        InputChangedError: ``out`` was made with another identity.
        MissingResourceError: the checkpoint folder or a vocabulary file is missing, Ray
            is not installed, or the Ray cluster lacks the GPU asked for.
        EnvironmentProblem: the Ray cluster at ``address`` does not answer.
    """
    started = time.perf_counter()
    from robustlab.data.labels import get_label_space
    from robustlab.run.executors import check_backend

    check_backend(backend, address)
    if backend == "ray" and pipeline is not None:
        raise InputError(
            "a loaded pipeline runs in this process; the Ray backend loads one per worker",
            hint="pass the checkpoint path only, or leave out backend='ray'",
        )

    for name, value, low in (("seed", seed, 0), ("steps", steps, 1), ("per_pair", per_pair, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
    if limit is not None and int(limit) < 1:
        raise InputError(f"limit must be at least 1, got {limit}")
    if sampler is not None and sampler not in SCHEDULERS:
        raise InputError(f"unknown sampler {sampler!r}; use one of {', '.join(SCHEDULERS)}")
    for side in (height, width):
        if int(side) < 8 or int(side) % 8:
            raise InputError(f"image size {side} must be a positive multiple of 8")
    try:
        space = get_label_space(label_space)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    class_ids = select_classes(space, classes)
    vocabs = [load_vocabulary(v) for v in nuisances]
    if not vocabs:
        raise InputError("no nuisance vocabulary given")
    template_map = load_templates(templates)
    grid = build_grid(
        space,
        vocabs,
        classes=class_ids,
        per_pair=int(per_pair),
        seed=int(seed),
        templates=template_map,
        max_nuisances=max_nuisances,
    )
    if limit is not None:
        grid = grid[: int(limit)]
    ckpt = pipeline.describe() if pipeline is not None else describe_checkpoint(checkpoint)
    warn_if_random(ckpt.get("path") or checkpoint)  # a tiny-checkpoints folder: say so
    identity = {
        "checkpoint_fingerprint": ckpt["fingerprint"],
        "pipeline": ckpt["pipeline"],
        "sampler": SCHEDULERS[sampler] if sampler else ckpt["scheduler"],
        "steps": int(steps),
        "guidance_scale": float(guidance_scale),
        "height": int(height),
        "width": int(width),
        "negative_prompt": negative_prompt,
        "seed": int(seed),
        "templates": {
            v.subset: template_map.get(v.subset) or template_map.get("*") for v in vocabs
        },
        "label_space": space.name,
    }

    out_root = Path(out).expanduser()
    manifest_path = out_root / MANIFEST
    prev = load_manifest(manifest_path)
    if prev is not None:
        _check_identity(prev, identity, manifest_path)
    rows = _merge_prompts(out_root / PROMPTS, grid)
    result = SynthResult(out_root, len(grid))
    todo = []
    for item in grid:
        if (out_root / item.file).is_file():
            result.existing += 1
        else:
            todo.append(item)
    if batch_size is not None and int(batch_size) < 1:
        raise InputError(f"batch size must be at least 1, got {batch_size}")
    settings = dict(
        steps=int(steps),
        guidance_scale=float(guidance_scale),
        height=int(height),
        width=int(width),
        negative_prompt=negative_prompt,
    )
    with contextlib.ExitStack() as stack:
        placement = None
        if backend == "ray" and todo:  # nothing left to draw: no cluster to start
            from robustlab.run.ray_backend import node_cpus, plan_placement, ray_session

            # Connected and the cluster's resources checked before anything is written.
            resources = stack.enter_context(ray_session(address))
            placement = plan_placement(resources, device, cpu_stage=False, node_cpus=node_cpus())
        out_root.mkdir(parents=True, exist_ok=True)
        run_record: dict[str, Any] = {
            "id": uuid.uuid4().hex[:12],
            "started_at": _now(),
            **this_process(),  # a later run tells a killed one by its gone process
            "status": "running",
            "planned": len(grid),
            "classes": len(class_ids),
            "subsets": [v.subset for v in vocabs],
            "per_pair": int(per_pair),
            "max_nuisances": max_nuisances,
            "limit": limit,
            "backend": backend,
        }
        if backend == "ray":
            run_record["address"] = address
        # The record goes down before any image, so no image is ever of unknown making.
        with manifest_lock(out_root):
            prev = load_manifest(manifest_path)
            manifest = _manifest(prev, identity, ckpt, vocabs, template_map, rows, run_record)
            _write_prompts(out_root / PROMPTS, rows)
            _write_json(manifest_path, manifest)
        removed = remove_temp_files(out_root, [v.subset for v in vocabs])
        if removed:
            log.info("removed %d temp files left by an interrupted run", removed)

        status = "interrupted"
        tally = _Tally(result, len(todo), progress and bool(todo))
        try:
            if todo:
                log.info(
                    "synthesising %d images (%d already there) into %s",
                    len(todo),
                    result.existing,
                    out_root,
                )
                pipeline_args = dict(device=device, dtype=dtype, scheduler=sampler)
                job = dict(out_root=out_root, settings=settings, batch_size=batch_size)
                if placement is not None:
                    _draw_on_ray(todo, ckpt, pipeline_args, placement, job, run_record, tally)
                else:
                    pipeline = pipeline or TextToImage(checkpoint, **pipeline_args)
                    _draw_here(todo, pipeline, job, run_record, tally)
            status = "complete"
        finally:
            tally.close()
            result.seconds = time.perf_counter() - started
            run_record.update(
                finished_at=_now(),
                status=status,
                seconds=round(result.seconds, 3),
                written=result.written,
                existing=result.existing,
                failed=len(result.failures),
            )
            if result.backend:
                run_record["pipeline"] = _jsonable(result.backend)
            # Merged into what is on disk now (a concurrent run's record too), counted there.
            with manifest_lock(out_root):
                current = load_manifest(manifest_path) or manifest
                manifest = _finish_manifest(current, result, run_record, grid, out_root)
                _write_json(manifest_path, manifest)
                _write_labels(out_root, rows)
    result.seconds = time.perf_counter() - started
    return result


class _Tally:
    """Counts each drawn image into the result (a failure is a logged, counted skip) and
    moves the progress bar: one bookkeeping for both backends."""

    def __init__(self, result: SynthResult, total: int, progress: bool):
        self.result, self.total, self.progress = result, total, progress
        self.bar = None

    def start(self) -> None:
        """Show the bar (once the pipeline is loaded: a load error stays one clean line)."""
        if self.progress and self.bar is None:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.total, unit="img", desc="synth", dynamic_ncols=True)

    def __call__(self, file: str, reason: str | None) -> None:
        if reason is not None:
            self.result.failures.append((file, reason))
            log.warning("skipped %s: %s", file, reason)
        else:
            self.result.written += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(
                written=self.result.written, failed=len(self.result.failures), refresh=False
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def draw_chunk(
    pipeline: TextToImage, chunk: Sequence[PromptItem], out_root: Path, settings: dict
) -> list[tuple[str, str | None]]:
    """Draw one batch and write its images atomically: ``(file, None)`` per image written,
    ``(file, reason)`` per image the pipeline failed on (a failing batch is retried prompt
    by prompt). The work unit of both backends, so their files are the same bytes."""
    done: list[tuple[str, str | None]] = []
    for item, image in _generate(pipeline, list(chunk), settings):
        if isinstance(image, str):
            done.append((item.file, image))
        else:
            atomic_write(out_root / item.file, _png(image))
            done.append((item.file, None))
    return done


def _draw_here(
    todo: list[PromptItem], pipeline: TextToImage, job: dict, run_record: dict, tally: _Tally
) -> None:
    """The local backend: the grid's missing images drawn batch by batch in this process
    (``job``: out_root, settings, batch_size)."""
    tally.result.backend = pipeline.describe()
    tally.start()
    run_record.update(device=pipeline.device, dtype=pipeline.dtype)
    batch = int(job["batch_size"] or (8 if pipeline.device.startswith("cuda") else 1))
    run_record["batch_size"] = batch
    for start in range(0, len(todo), batch):
        for file, reason in draw_chunk(
            pipeline, todo[start : start + batch], job["out_root"], job["settings"]
        ):
            tally(file, reason)


def _draw_on_ray(
    todo: list[PromptItem],
    ckpt: dict,
    pipeline_args: dict,
    placement,
    job: dict,
    run_record: dict,
    tally: _Tally,
) -> None:
    """The grid's missing images drawn by pipelines on Ray's workers, which write the files;
    this process only tallies them and keeps the manifest."""
    from robustlab.run.ray_backend import synth_on_ray

    batch = int(job["batch_size"] or (8 if placement.model_gpus else 1))
    run_record.update(batch_size=batch, workers=placement.actors)
    tally.start()
    times, described = synth_on_ray(
        todo,
        ckpt["path"],
        ckpt["fingerprint"],
        str(Path(job["out_root"]).resolve()),
        job["settings"],
        draw=draw_chunk,
        collect=tally,
        placement=placement,
        batch_size=batch,
        pipeline_args=pipeline_args,
    )
    if described:
        tally.result.backend = described
        run_record.update(device=described["device"], dtype=described["dtype"])
    run_record["stages"] = tally.result.stages = times.summary()
    log.info("%s", times.line())


def _generate(backend: TextToImage, chunk: list[PromptItem], settings: dict):
    """(item, image or reason) per item; one item's failure never costs the others."""
    try:
        images = backend([i.prompt for i in chunk], [i.seed for i in chunk], **settings)
        return list(zip(chunk, images))
    except (KeyboardInterrupt, InputError):
        raise
    except Exception as exc:  # noqa: BLE001 - the model failing on a prompt is a counted skip
        if len(chunk) > 1:
            log.warning(
                "a batch of %d failed (%s); retrying one prompt at a time",
                len(chunk),
                _one_line(exc),
            )
            return [pair for item in chunk for pair in _generate(backend, [item], settings)]
        return [(chunk[0], f"the pipeline failed: {_one_line(exc)}")]


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _png(image) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image, "RGB").save(buf, format="PNG")
    return buf.getvalue()


def _check_identity(prev: dict, identity: dict, path: Path) -> None:
    """Refuse to add images made another way to a folder; say which settings differ."""
    if prev.get("format") != FORMAT:
        raise InputChangedError(
            f"{path} is not a robustlab synth manifest ({prev.get('format')!r})",
            hint="use a new --out folder",
        )
    old = prev.get("identity") or {}
    changed = []
    for key, value in identity.items():
        if key == "templates":
            before = old.get(key) or {}
            changed += [
                f"template of {s} ({before[s]!r} -> {t!r})"
                for s, t in value.items()
                if s in before and before[s] != t
            ]
        elif key in old and old[key] != value:
            changed.append(f"{key} ({old[key]!r} -> {value!r})")
    if changed:
        raise InputChangedError(
            f"{path.parent} was synthesised with other settings: " + "; ".join(changed),
            hint="use a new --out folder to synthesise with other settings",
        )


def _merge_prompts(path: Path, grid: list[PromptItem]) -> dict[str, dict]:
    """The previous runs' prompts.csv rows (keyed by file) updated with this grid."""
    rows: dict[str, dict] = {}
    if path.is_file():
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                rows = {r["file"]: r for r in csv.DictReader(fh)}
        except (OSError, csv.Error, KeyError) as exc:
            raise InputError(
                f"cannot read {path}: {exc}", hint="move it away to start over"
            ) from None
    for item in grid:
        rows[item.file] = {
            "file": item.file,
            "class": item.class_folder,
            "subset": item.subset,
            "nuisance": item.nuisance,
            "k": str(item.k),
            "prompt": item.prompt,
            "seed": str(item.seed),
        }
    return dict(sorted(rows.items()))


def _csv_bytes(rows, columns) -> bytes:
    buf = io.StringIO()
    writer = csv.DictWriter(
        buf, fieldnames=list(columns), lineterminator="\n", extrasaction="ignore"
    )
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue().encode()


def _write_prompts(path: Path, rows: dict[str, dict]) -> None:
    atomic_write(path, _csv_bytes(rows.values(), PROMPT_COLUMNS))


def _write_labels(out_root: Path, rows: dict[str, dict]) -> None:
    """labels.csv of the images that exist (a CSV listing missing files would make every
    reader report them)."""
    present = [r for f, r in rows.items() if (out_root / f).is_file()]
    atomic_write(out_root / LABELS, _csv_bytes(present, PROMPT_COLUMNS))


def _write_json(path: Path, data: dict) -> None:
    import json

    atomic_write(path, (json.dumps(_jsonable(data), indent=2) + "\n").encode())


def _manifest(prev, identity, ckpt, vocabs, templates, rows, run_record) -> dict:
    prev = prev or {}
    vocab_records = {v["subset"]: v for v in prev.get("vocabularies", [])}
    vocab_records.update(
        {v.subset: {"subset": v.subset, "source": v.source, "n": len(v.names)} for v in vocabs}
    )
    return {
        "format": FORMAT,
        "identity": identity,
        "checkpoint": {k: ckpt.get(k) for k in ("path", "fingerprint", "pipeline", "scheduler")},
        "versions": {**library_versions(), **_ml_versions()},
        "seed_rule": "derive_seed(seed, class_folder, 'synth/<subset>/<nuisance>', k) -> torch CPU generator",
        "layout": "<out>/<subset>/<class folder>/<nuisance>_<k>.png",
        "prompts_file": PROMPTS,
        "labels_file": LABELS,
        "templates": templates,
        "vocabularies": sorted(vocab_records.values(), key=lambda v: v["subset"]),
        "grid_size": len(rows),
        "counts": (prev.get("counts") or {}),
        "failures": prev.get("failures", []),
        "created_at": prev.get("created_at", run_record["started_at"]),
        "updated_at": _now(),
        # A run still "running" whose process is gone was killed: said so now.
        "runs": mark_dead_runs(list(prev.get("runs", []))) + [run_record],
    }


def _finish_manifest(
    manifest: dict,
    result: SynthResult,
    run_record: dict,
    grid: list[PromptItem],
    out_root: Path,
) -> dict:
    """This run's outcome merged into ``manifest`` (the one on disk now): a failure retried
    now either failed again or exists; this run's record replaces its ``running`` one.

    ``counts.written`` is the number of images in the folder, counted on disk: a sum of
    what each process wrote would miss a killed run's images and count an image twice
    when two runs draw into one folder."""
    considered = {i.file for i in grid}
    failures = {
        d["file"]: d["reason"]
        for d in manifest.get("failures", [])
        if d.get("file") not in considered
    }
    failures.update(dict(result.failures))
    manifest = dict(manifest)
    runs = [
        r for r in mark_dead_runs(list(manifest.get("runs", []))) if r.get("id") != run_record["id"]
    ]
    manifest["runs"] = [*runs, run_record]
    manifest["failures"] = [{"file": f, "reason": r} for f, r in sorted(failures.items())]
    subsets = [v["subset"] for v in manifest.get("vocabularies", [])]
    manifest["counts"] = {
        "written": images_on_disk(out_root, subsets),
        "written_this_run": result.written,
        "existing": result.existing,
        "failed": len(failures),
        "planned_this_run": result.planned,
    }
    manifest["updated_at"] = _now()
    return manifest


def images_on_disk(out_root: Path, subsets: Sequence[str]) -> int:
    """PNG images under the subset folders of a synth folder (temp files not counted)."""
    n = 0
    for subset in subsets:
        for _, _, files in os.walk(Path(out_root) / subset):
            n += sum(1 for f in files if f.endswith(".png") and not f.startswith("."))
    return n


def _ml_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for dist in ("torch", "diffusers", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def result_summary(result: SynthResult) -> dict[str, Any]:
    """A JSON-able summary (what the CLI prints)."""
    d = asdict(result)
    d["out"] = str(result.out)
    d["failed"] = len(result.failures)
    return d


__all__ = [
    "synth",
    "draw_chunk",
    "SynthResult",
    "FORMAT",
    "MANIFEST",
    "PROMPTS",
    "LABELS",
    "result_summary",
]
