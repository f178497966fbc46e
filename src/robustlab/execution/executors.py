"""Executors: how tasks are spread over processes.

``local`` (the default) is a ``torch.utils.data.DataLoader`` over the task dataset: its
worker processes decode, shift and preprocess ahead of the model while the main process
runs the forward pass, and results come back in task order, so output never depends on
the worker count. ``workers=0`` runs everything in the calling process (debugging,
tests, tiny jobs).
"""

from __future__ import annotations

from collections.abc import Iterator

from robustlab.errors import InputError
from robustlab.execution.lifeline import die_with_parent, worker_context
from robustlab.execution.tasks import TaskDataset, worker_init


def _identity(item):
    return item


def _worker_init(worker_id: int) -> None:
    die_with_parent()  # a killed evaluate must not leave its workers behind
    worker_init(worker_id)


def iterate_local(
    dataset: TaskDataset, *, workers: int, prefetch: int = 2, pin_memory: bool = False
) -> Iterator:
    """Yield ``dataset`` items in order, computed by ``workers`` processes ahead of use.

    Args:
        dataset: The tasks.
        workers: Worker processes (0: in this process).
        prefetch: Tasks each worker keeps ready; bounds memory independently of the
            dataset size.
        pin_memory: Put tensors in page-locked memory (a CUDA model then copies them
            to the GPU asynchronously).
    """
    if workers <= 0:
        for i in range(len(dataset)):
            yield dataset[i]
        return
    from torch.utils.data import DataLoader

    # Workers must not be forked from this process: after a forward pass its OpenMP and
    # OpenCV thread pools exist, and a forked child that touches them can deadlock (seen:
    # cv2.setNumThreads hanging in worker_init). forkserver children start clean.
    loader = DataLoader(
        dataset,
        batch_size=None,
        shuffle=False,
        num_workers=int(workers),
        collate_fn=_identity,
        prefetch_factor=max(1, int(prefetch)),
        worker_init_fn=_worker_init,
        persistent_workers=False,
        pin_memory=bool(pin_memory),
        multiprocessing_context=worker_context(),
    )
    yield from loader


EXECUTORS = {"local": iterate_local}


def get_executor(name: str):
    try:
        return EXECUTORS[name]
    except KeyError:
        raise InputError(
            f"unknown backend {name!r}; available: {', '.join([*EXECUTORS, 'ray'])}"
        ) from None


def check_backend(name: str, address: str | None = None) -> None:
    """Refuse an unknown backend, a missing Ray install or an ``address`` without Ray before
    any work starts (a model load, a hash of every image)."""
    if name == "ray":
        from robustlab.execution.ray.session import check_address, require_ray

        require_ray()
        if address:
            check_address(address)
        return
    get_executor(name)
    if address:
        raise InputError(
            f"--address {address} names a Ray cluster, but the backend is {name!r}",
            hint="add --backend ray (backend='ray' in Python)",
        )
