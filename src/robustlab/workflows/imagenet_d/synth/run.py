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
import io
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from robustlab.errors import InputError
from robustlab.files.atomic import atomic_write, remove_temp_files
from robustlab.files.outputs import LocalFolder
from robustlab.records.manifest import jsonable
from robustlab.records.folder_record import RUNNING, FolderRun, update_record
from robustlab.shifts.generative.text2image import SCHEDULERS, TextToImage, describe_checkpoint
from robustlab.shifts.generative.tiny import warn_if_random
from robustlab.workflows.keywords import build_specs
from robustlab.workflows.imagenet_d.synth.prompts import (
    PromptItem,
    build_grid,
    load_templates,
    load_vocabulary,
    select_classes,
)
from robustlab.records.manifest import MANIFEST
from robustlab.workflows.imagenet_d.synth.record import (
    FORMAT,
    LABELS,
    PROMPTS,
    begin_manifest,
    check_identity,
    finish_manifest,
    merge_prompts,
    write_labels,
    write_prompts,
)
from robustlab.workflows.imagenet_d.synth.request import SynthDiffusion, SynthExecution, SynthGrid

log = logging.getLogger(__name__)


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
        draw_seconds: The part of it spent drawing: from the loaded pipeline's first batch
            to the last file (planning and the pipeline's loading excluded; on Ray, the
            workers' loading is included), so that a rate says what the model does.
        backend: The pipeline's record, when one was loaded.
        stages: With the Ray backend: images and worker time per stage, and the wall time.
    """

    out: Path
    planned: int
    written: int = 0
    existing: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    draw_seconds: float = 0.0
    backend: dict[str, Any] | None = None
    stages: dict[str, Any] | None = None


def synth(
    out,
    checkpoint,
    *,
    grid: SynthGrid | None = None,
    diffusion: SynthDiffusion | None = None,
    execution: SynthExecution | None = None,
    **options: Any,
) -> SynthResult:
    """Synthesise every image of the prompt grid that ``out`` does not hold yet.

    Args:
        out: Output folder; rerunning with the same identity resumes.
        checkpoint: Local diffusers text-to-image folder (``save_pretrained`` layout).
        grid: Which images (:class:`SynthGrid`: ``label_space``, ``classes``,
            ``nuisances``, ``per_pair``, ``seed``, ``templates``, ``max_nuisances``,
            ``limit``).
        diffusion: How each is drawn (:class:`SynthDiffusion`: ``steps``,
            ``guidance_scale``, ``height``, ``width``, ``negative_prompt``, ``sampler``).
        execution: Where the pipeline runs (:class:`SynthExecution`: ``batch_size``,
            ``device``, ``dtype``, ``pipeline``, ``backend``, ``address``, ``progress``).
            ``backend="ray"`` draws the same files byte for byte with one pipeline per GPU
            of a Ray cluster (:func:`robustlab.execution.ray.synth.synth_on_ray`); ``out`` and
            ``checkpoint`` must then be paths every node sees.
        options: Any field of the three specs by name (``seed=3, steps=2``), for the spec
            not passed.

    Raises:
        TypeError: a keyword no spec has (with the closest names).
        InputError: bad arguments, unknown class, vocabulary without a name column.
        InputChangedError: ``out`` was made with another identity.
        MissingResourceError: the checkpoint folder or a vocabulary file is missing, Ray
            is not installed, or the Ray cluster lacks the GPU asked for.
        EnvironmentProblem: the Ray cluster at ``address`` does not answer.
    """
    started = time.perf_counter()
    specs = build_specs(
        "synth",
        options,
        {"grid": SynthGrid, "diffusion": SynthDiffusion, "execution": SynthExecution},
        {"grid": grid, "diffusion": diffusion, "execution": execution},
    )
    plan = plan_synth(checkpoint, specs["grid"], specs["diffusion"], specs["execution"])
    result = _run(plan, Path(out).expanduser(), specs["execution"], started)
    result.seconds = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class SynthPlan:
    """What a ``synth`` run draws, decided before the folder is touched.

    Attributes:
        checkpoint: The checkpoint folder as given.
        ckpt: Its description (path, fingerprint, pipeline, scheduler).
        grid: The images, in grid order (``limit`` applied).
        classes: Class ids drawn.
        vocabs: The nuisance vocabularies.
        templates: Prompt template per subset (``*``: the fallback).
        identity: What the folder's images are (refused when it differs).
        settings: The pipeline call's keyword arguments.
        grid_spec, sampler: As asked (recorded in the run's entry, sampler for the load).
    """

    checkpoint: str | Path
    ckpt: dict[str, Any]
    grid: list[PromptItem]
    classes: list[int]
    vocabs: list[Any]
    templates: dict[str, str]
    identity: dict[str, Any]
    settings: dict[str, Any]
    grid_spec: SynthGrid
    sampler: str | None


def plan_synth(
    checkpoint, grid: SynthGrid, diffusion: SynthDiffusion, execution: SynthExecution
) -> SynthPlan:
    """The grid, the checkpoint's description and the folder identity they make."""
    from robustlab.data.labels import get_label_space

    try:
        space = get_label_space(grid.label_space)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    class_ids = select_classes(space, grid.classes)
    vocabs = [load_vocabulary(v) for v in grid.nuisances]
    if not vocabs:
        raise InputError("no nuisance vocabulary given")
    template_map = load_templates(grid.templates)
    items = build_grid(
        space,
        vocabs,
        classes=class_ids,
        per_pair=int(grid.per_pair),
        seed=int(grid.seed),
        templates=template_map,
        max_nuisances=grid.max_nuisances,
    )
    if grid.limit is not None:
        items = items[: int(grid.limit)]
    pipeline = execution.pipeline
    ckpt = pipeline.describe() if pipeline is not None else describe_checkpoint(checkpoint)
    warn_if_random(ckpt.get("path") or checkpoint)  # a tiny-checkpoints folder: say so
    settings = diffusion.settings()
    identity = {
        "checkpoint_fingerprint": ckpt["fingerprint"],
        "pipeline": ckpt["pipeline"],
        "sampler": SCHEDULERS[diffusion.sampler] if diffusion.sampler else ckpt["scheduler"],
        **{k: settings[k] for k in ("steps", "guidance_scale", "height", "width")},
        "negative_prompt": diffusion.negative_prompt,
        "seed": int(grid.seed),
        "templates": {
            v.subset: template_map.get(v.subset) or template_map.get("*") for v in vocabs
        },
        "label_space": space.name,
    }
    return SynthPlan(
        checkpoint,
        ckpt,
        items,
        class_ids,
        vocabs,
        template_map,
        identity,
        settings,
        grid,
        diffusion.sampler,
    )


def _run(plan: SynthPlan, out_root: Path, execution: SynthExecution, started: float) -> SynthResult:
    """Refuse another identity, write the records, draw what is missing, record the
    outcome (always: an interrupted run's entry says so and the rerun resumes)."""
    manifest_path = out_root / MANIFEST
    check_identity(LocalFolder(out_root).load_manifest(), plan.identity, manifest_path)
    rows = merge_prompts(out_root / PROMPTS, plan.grid)
    result = SynthResult(out_root, len(plan.grid))
    todo = []
    for item in plan.grid:
        if (out_root / item.file).is_file():
            result.existing += 1
        else:
            todo.append(item)
    with contextlib.ExitStack() as stack:
        placement = None
        if execution.backend == "ray" and todo:  # nothing left to draw: no cluster to start
            from robustlab.execution.ray.placement import plan_placement
            from robustlab.execution.ray.session import node_cpus, ray_session

            # Connected and the cluster's resources checked before anything is written.
            resources = stack.enter_context(ray_session(execution.address))
            placement = plan_placement(
                resources, execution.device, cpu_stage=False, node_cpus=node_cpus()
            )
        out_root.mkdir(parents=True, exist_ok=True)
        run, begun = _start(plan, out_root, execution, rows, started)
        tally = _Tally(result, len(todo), execution.progress and bool(todo))

        def finish(status: str) -> None:
            _finish(plan, out_root, rows, result, run, status, begun)

        try:
            with run.track(finish):
                _draw(plan, todo, out_root, execution, placement, run, tally)
        finally:
            tally.close()
    return result


def _start(
    plan: SynthPlan, out_root: Path, execution: SynthExecution, rows: dict, started: float
) -> tuple[FolderRun, dict]:
    """This run's entry, written with the identity and prompts.csv before any image, so
    no image is ever of unknown making; returns it and the manifest written."""
    grid = plan.grid_spec
    run = FolderRun(
        clock_from=started,
        status=RUNNING,
        planned=len(plan.grid),
        classes=len(plan.classes),
        subsets=[v.subset for v in plan.vocabs],
        per_pair=int(grid.per_pair),
        max_nuisances=grid.max_nuisances,
        limit=grid.limit,
        backend=execution.backend,
        **({"address": execution.address} if execution.backend == "ray" else {}),
    )

    def merge(prev: dict | None) -> dict:
        write_prompts(out_root / PROMPTS, rows)
        return begin_manifest(
            prev, plan.identity, plan.ckpt, plan.vocabs, plan.templates, rows, run
        )

    begun = update_record(LocalFolder(out_root), merge)
    removed = remove_temp_files(out_root, [v.subset for v in plan.vocabs])
    if removed:
        log.info("removed %d temp files left by an interrupted run", removed)
    return run, begun


def _draw(
    plan: SynthPlan,
    todo: list[PromptItem],
    out_root: Path,
    execution: SynthExecution,
    placement,
    run: FolderRun,
    tally: _Tally,
) -> None:
    """The missing images drawn on Ray's workers (``placement``) or in this process."""
    if not todo:
        return
    log.info(
        "synthesising %d images (%d already there) into %s",
        len(todo),
        tally.result.existing,
        out_root,
    )
    pipeline_args = dict(device=execution.device, dtype=execution.dtype, scheduler=plan.sampler)
    job = dict(out_root=out_root, settings=plan.settings, batch_size=execution.batch_size)
    if placement is not None:
        _draw_on_ray(todo, plan.ckpt, pipeline_args, placement, job, run.record, tally)
    else:
        pipeline = execution.pipeline or TextToImage(plan.checkpoint, **pipeline_args)
        _draw_here(todo, pipeline, job, run.record, tally)


def _finish(
    plan: SynthPlan,
    out_root: Path,
    rows: dict,
    result: SynthResult,
    run: FolderRun,
    status: str,
    began: dict,
) -> None:
    """The outcome merged into the manifest on disk now (a concurrent run's entry too;
    ``began``, the one this run wrote, if it is gone), counted there, and labels.csv of
    the images that exist."""
    run.finish(
        status, written=result.written, existing=result.existing, failed=len(result.failures)
    )
    if result.backend:
        run.record["pipeline"] = jsonable(result.backend)

    def merge(current: dict | None) -> dict:
        write_labels(out_root, rows)
        return finish_manifest(
            current or began,
            result.written,
            result.existing,
            result.failures,
            run,
            plan.grid,
            out_root,
        )

    update_record(LocalFolder(out_root), merge)


class _Tally:
    """Counts each drawn image into the result (a failure is a logged, counted skip) and
    moves the progress bar: one bookkeeping for both backends."""

    def __init__(self, result: SynthResult, total: int, progress: bool):
        self.result, self.total, self.progress = result, total, progress
        self.bar = None
        self.drawing_since: float | None = None

    def start(self) -> None:
        """Start the drawing clock and show the bar (once the pipeline is loaded: a load
        error stays one clean line)."""
        if self.drawing_since is None:
            self.drawing_since = time.perf_counter()
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
        if self.drawing_since is not None:
            self.result.draw_seconds = time.perf_counter() - self.drawing_since
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
    from robustlab.execution.ray.synth import synth_on_ray

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
