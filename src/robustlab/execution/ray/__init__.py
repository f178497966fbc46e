"""The Ray backend (this package): ``generate``, ``evaluate`` and ``synth`` spread over a Ray cluster.

Why it can give exactly the local backend's output: every cell draws from
``derive_seed(seed, sample_id, shift, level)``, so where and in which order a cell is made
does not matter, and this package runs the local backend's own functions on the workers
(:func:`robustlab.workflows.generate.process_sample` for a generated image, the runner's
:class:`~robustlab.execution.tasks.TaskDataset` for the pixels the model sees, the model's
``predict_topk`` for the forward pass). Only the driver writes: the DuckDB store has one
writer, and the manifest one author.

The work is a Ray Data pipeline (Ray's streaming engine, no scheduler of our own):

* ``generate``: sample indices -> CPU tasks that decode, prepare, shift, encode and write
  each image's cells with the atomic write of the local backend -> outcomes streamed to
  the driver, which keeps the manifest. A task whose worker process dies is retried once,
  then its images are skipped as "a worker process crashed on it", as locally (a task
  holds a few images, :func:`.pipeline.task_size`; a rerun retries them).
* ``evaluate``: task indices -> CPU tasks that decode, prepare, shift and preprocess
  (uint8 pixels) -> an actor pool that holds the model (one actor per GPU, ``num_gpus=1``,
  when the cluster has GPUs) -> predictions streamed to the driver, which builds and
  stores the rows with the local runner's code. Without GPUs there is one CPU actor per
  node, with the node's CPUs as torch threads (:class:`.placement.Placement`); model
  actors kept across jobs (:func:`.actors.keep_model_actors`, ``mine``) on the CPU
  prepare their own tasks between forward passes instead of a CPU stage beside them, as
  the local backend's main process does. With ``--shift-device`` the CPU tasks only
  decode and prepare (:class:`~robustlab.execution.device_shifts.CleanTaskDataset`), and each
  actor applies the batched shifts, the JPEG round trip and the model's resize on its own
  device with the local runner's :class:`~robustlab.execution.device_shifts.DeviceShifts`
  before predicting: per-image seed-rule generators make the pixels independent of which
  tasks share an actor's batch, so the rows are the local ``--shift-device`` run's.
* ``synth``: chunks of prompts (the local backend's batches) -> an actor pool of diffusion
  pipelines (one per GPU, else one per node with all its CPUs) that draw and write each
  chunk with the local backend's work unit -> outcomes streamed to the driver, which keeps
  the manifest.

Resuming is the local backend's: a rerun skips files that exist and rows that are stored,
so a killed driver or a lost worker costs only the work in flight. Which backend ran a
job is not part of its identity: a run started locally may be finished on Ray and back.

Resources are checked from ``ray.cluster_resources()`` before anything is submitted, since
Ray waits forever (with a warning) for a GPU or CPU the cluster does not have.

The modules: :mod:`.session` (connect or start Ray), :mod:`.placement` (what each stage
asks the cluster for), :mod:`.pipeline` (the Ray Data plumbing every job shares: map tasks,
stage times, worker errors), :mod:`.generate`, :mod:`.evaluate` (with :mod:`.predictor`, the
model actor, and :mod:`.actors`, model actors kept across jobs) and :mod:`.synth`.
"""
