"""Model actors kept across the ``evaluate`` jobs of one block (:func:`keep_model_actors`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from robustlab.execution.ray.placement import Placement
from robustlab.execution.ray.predictor import Predictor, prepared
from robustlab.execution.ray.session import ray_session

# Placement -> the model actors of the open :func:`keep_model_actors` block (None: no block).
_KEPT: dict[tuple, list] | None = None


@contextlib.contextmanager
def keep_model_actors(address: str | None = None, cpus: int | None = None) -> Iterator[None]:
    """Inside the block, the ``evaluate`` jobs this process runs on Ray share their model
    actors, and one Ray session (:func:`ray_session`, same arguments).

    A Ray Data actor pool lives for one dataset, so each job started its model actor
    afresh: a new process importing torch, timm and robustlab, then building the model,
    4-5 s per job on 2 cores (benchmarks/README.md), paid again by every surrogate of a
    ``mine``. Here the actors (:class:`_ModelHost`) are plain Ray actors owned by this
    process: started once, they keep every model they built, so a later job with the same
    model and settings pays nothing and one with another model pays its build only. They
    end with the block (or with this process). Jobs with a shift device keep their own
    pools (their actors hold the job's shifter, whose tasks differ per job). Nested
    blocks are one block.
    """
    global _KEPT
    if _KEPT is not None:
        yield
        return
    with ray_session(address, cpus):
        _KEPT = {}
        try:
            yield
        finally:
            import ray

            pools, _KEPT = _KEPT, None
            for hosts in pools.values():
                for host in hosts:
                    with contextlib.suppress(Exception):
                        ray.kill(host)


class _ModelHost:
    """A model actor kept across jobs (:func:`keep_model_actors`): one :class:`Predictor`
    per distinct set of its arguments, built by the first batch that needs it and kept.

    Started with Ray's ``max_concurrency`` set to the predictors' lanes (a model on the
    CPU, :mod:`robustlab.execution.lanes`), it takes that many batches at once: one thread at a
    time builds a predictor or prepares its tasks, as the local backend's main process
    does, while the others' forward passes run, each on its share of the threads.
    """

    def __init__(self):
        self.predictors: dict[str, Predictor] = {}
        self.dataset: tuple = (None, None)  # (object id, the job's task dataset)
        self._lock = threading.Lock()  # predictors, dataset and preparing: one at a time

    def predict(self, key: str, args: list, batch: dict, dataset: list) -> dict:
        """``batch`` through the predictor of ``key``; ``args`` holds the object reference
        of its arguments (in a list, so Ray fetches them only when the predictor is new).
        ``dataset``: empty, or the reference of the job's task dataset when the batch
        holds task indices to prepare here first (a model on the CPU: no CPU stage runs
        beside it, see :func:`robustlab.execution.ray.evaluate.predict_on_ray`)."""
        import ray

        with self._lock:
            predictor = self.predictors.get(key)
            if predictor is None:
                predictor = self.predictors[key] = Predictor(*ray.get(args[0]))
            if dataset:
                ref = dataset[0]
                if self.dataset[0] != ref.hex():
                    self.dataset = (ref.hex(), ray.get(ref))
                batch = prepared(batch, self.dataset[1], predictor.failure)
        return predictor(batch)


def _to_host(batch: dict, *, hosts: list, key: str, args: list, dataset: list) -> dict:
    """Model stage of a job inside :func:`keep_model_actors`: hand the batch to a kept
    model actor (by its first task, so the actors share the batches) and wait for it."""
    import ray

    host = hosts[int(batch["index"][0]) % len(hosts)]
    return ray.get(host.predict.remote(key, args, batch, dataset))


def keeping() -> bool:
    """Whether a :func:`keep_model_actors` block is open in this process."""
    return _KEPT is not None


def kept_model_stage(
    ds,
    placement: Placement,
    predictor_args: tuple,
    tasks_per_batch: int,
    dataset=None,
    lanes: int = 1,
):
    """``ds`` through the kept model actors of ``placement`` (started now if this is the
    first job that needs them), with the resources :class:`Predictor`'s pool would take;
    with ``dataset`` (a model on the CPU), ``ds`` holds task indices that the actors
    prepare themselves; each actor takes ``lanes`` batches at a time (:class:`_ModelHost`).

    The stage's own tasks only wait for an actor: they take no CPU of the cluster."""
    import hashlib

    import ray
    import ray.data
    from ray import cloudpickle

    assert _KEPT is not None
    lanes = max(1, int(lanes))
    shape = (placement.model_cpus, placement.model_gpus, placement.actors, lanes)
    hosts = _KEPT.get(shape)
    if hosts is None:
        host = ray.remote(_ModelHost).options(
            num_cpus=placement.model_cpus,
            num_gpus=placement.model_gpus,
            scheduling_strategy="SPREAD",
            max_concurrency=lanes,
        )
        hosts = _KEPT[shape] = [host.remote() for _ in range(placement.actors)]
    key = hashlib.sha256(cloudpickle.dumps(predictor_args)).hexdigest()
    # One task per lane of each actor and one more: a batch waits at the actor while the
    # others run. Without a bound, tasks that take no CPU are all started at once, each in
    # a Ray worker process of its own that first imports Ray Data.
    return ds.map_batches(
        _to_host,
        batch_size=tasks_per_batch,
        fn_kwargs={
            "hosts": hosts,
            "key": key,
            "args": [ray.put(predictor_args)],
            "dataset": [] if dataset is None else [ray.put(dataset)],
        },
        num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=(lanes + 1) * len(hosts)),
    )
