"""``synth`` on Ray: an actor pool of diffusion pipelines draws and writes each chunk of
prompts with the local backend's work unit; the driver keeps the manifest."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import numpy as np

from robustlab.errors import InputError
from robustlab.execution.ray.pipeline import (
    StageTimes,
    StartReport,
    data_context,
    index_blocks,
    model_threads,
    objects,
    worker_errors_as_ours,
)
from robustlab.execution.ray.placement import Placement


log = logging.getLogger(__name__)


class _Synthesizer:
    """Model stage of ``synth``: one diffusion pipeline per actor, loaded from the
    checkpoint folder where the actor runs (a pipeline is gigabytes: paths travel, weights
    do not), checked against the driver's fingerprint of that folder. Each batch is drawn
    and written by the local backend's work unit (``draw``) on the chunk the local backend
    would draw in one pipeline call (a diffusion pipeline's pixels depend on which prompts
    share its batch, by a unit here and there), so the files are the same bytes."""

    def __init__(
        self,
        checkpoint: str,
        fingerprint: str,
        pipeline_args: dict,
        threads: int,
        chunks: Sequence[Sequence],
        out_root: str,
        settings: dict,
        draw: Callable,
    ):
        started = time.perf_counter()
        from pathlib import Path

        from robustlab.shifts.generative.text2image import TextToImage

        self.pipeline = TextToImage(checkpoint, **pipeline_args)
        model_threads(threads, self.pipeline.device)
        if self.pipeline.fingerprint != fingerprint:
            raise InputError(
                f"a Ray worker found another checkpoint at {checkpoint} (fingerprint "
                f"{self.pipeline.fingerprint}, the driver's {fingerprint})",
                hint="give every node the same checkpoint folder (a shared path)",
            )
        self.chunks, self.out_root = chunks, Path(out_root)
        self.settings, self.draw = dict(settings), draw
        self.record = self.pipeline.describe()
        self.start = StartReport(time.perf_counter() - started)

    def __call__(self, batch: dict) -> dict:
        import json

        import torch

        t0 = time.perf_counter()
        done = [
            pair
            for i in batch["index"]
            for pair in self.draw(self.pipeline, self.chunks[int(i)], self.out_root, self.settings)
        ]
        share = (time.perf_counter() - t0) / max(1, len(done))
        return {
            "file": objects([f for f, _ in done]),
            # "" for an image written: Ray Data turns None in an object column into NaN
            "reason": objects([r or "" for _, r in done]),
            "seconds": np.full(len(done), share, dtype=np.float64),
            "pipeline": objects([json.dumps(self.record, default=str)] * len(done)),
            "threads": np.full(len(done), torch.get_num_threads()),
            "start_s": self.start.column(len(done)),
        }


def synth_on_ray(
    items: Sequence,
    checkpoint: str,
    fingerprint: str,
    out_root: str,
    settings: dict,
    *,
    draw: Callable,
    collect: Callable,
    placement: Placement,
    batch_size: int,
    pipeline_args: dict,
) -> tuple[StageTimes, dict | None]:
    """Draw ``items`` with one pipeline per actor on the connected Ray cluster.

    The actors write the images (``out_root`` must be a path every node sees) with the
    local backend's atomic write; the driver only counts, so the caller's manifest and
    resume work as locally: a rerun skips the files that exist.

    Args:
        items: :class:`~robustlab.workflows.imagenet_d.synth.prompts.PromptItem` of the images still missing.
        checkpoint: The checkpoint folder, the same path on every node.
        fingerprint: The driver's fingerprint of it (a node with other weights is refused).
        out_root: The output folder.
        settings: Diffusion settings (steps, guidance, size, negative prompt).
        draw: ``draw(pipeline, chunk, out_root, settings) -> [(file, reason or None)]``,
            the local backend's work unit (:func:`robustlab.workflows.imagenet_d.synth.run.draw_chunk`).
        collect: Called on the driver with ``(file, reason or None)`` per image.
        placement: From :func:`plan_placement` on this cluster (``model=True``).
        batch_size: Prompts per pipeline call: ``items`` are cut into chunks of that many
            as the local backend cuts them, and each chunk is one call on one actor.
        pipeline_args: ``device``, ``dtype``, ``scheduler`` of
            :class:`~robustlab.shifts.generative.text2image.TextToImage`.

    Returns:
        The stage's worker time, and the pipeline's record (None when nothing ran).
    """
    import ray.data

    times = StageTimes()
    started = time.perf_counter()
    log.info(
        "ray: %d pipeline actor(s), %s",
        placement.actors,
        "a GPU each" if placement.model_gpus else f"{placement.model_threads} CPU thread(s) each",
    )
    # One stage of actors and nothing to reserve for: as generate, no per-operator reservation.
    chunks = [list(items[i : i + batch_size]) for i in range(0, len(items), batch_size)]
    with data_context(reserve=False), worker_errors_as_ours():
        ds = index_blocks(len(chunks), 1).map_batches(
            _Synthesizer,
            batch_size=1,
            fn_constructor_args=(
                checkpoint,
                fingerprint,
                dict(pipeline_args),
                placement.model_threads,
                chunks,
                out_root,
                dict(settings),
                draw,
            ),
            compute=ray.data.ActorPoolStrategy(size=placement.actors),
            num_gpus=placement.model_gpus,
            num_cpus=placement.model_cpus,
        )
        described = _collect(ds, times, collect)
    times.wall = time.perf_counter() - started
    return times, described


def _collect(ds, times: StageTimes, collect: Callable) -> dict | None:
    """Hand each image's ``(file, reason or None)`` from the actors to ``collect``, add the
    stage's worker time to ``times``; the pipeline's record (None when nothing ran)."""
    import json

    described = None
    for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
        for file, reason, sec, record, threads, start in zip(
            batch["file"],
            batch["reason"],
            batch["seconds"],
            batch["pipeline"],
            batch["threads"],
            batch["start_s"],
        ):
            if described is None:
                described = json.loads(record)
            times.add("synth", 1, sec, int(threads))
            if start > 0:
                times.add("actor start", 1, start)
            collect(str(file), str(reason) or None)
    return described
