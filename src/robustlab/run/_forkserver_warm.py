"""Imported only by the multiprocessing forkserver (see :func:`robustlab.run.lifeline.worker_context`).

Workers fork from the forkserver, so whatever it has loaded they start with. Importing
torch and robustlab and loading every compiled (numba) corruption kernel here, once per
robustlab process, means that each later pool of workers forks ready instead of every
worker importing and loading the same things at once, and that a first run on a new
machine compiles each kernel once instead of in every worker. Measured on a 16-core H200
machine (15 workers, 9,120 ImageNet-C cells, the second pool of one process): first task
after 0.57 s instead of 4.14 s, 3.05 s instead of 8.45 s for the whole pool.

OpenCV and torch are set to one thread *before* anything runs, so the forkserver never
starts a thread pool that its forked children could deadlock on.
"""

import cv2
import numpy as np
import torch

cv2.setNumThreads(1)
torch.set_num_threads(1)


def _warm() -> None:
    from robustlab.pipeline import apply_shift
    from robustlab.shifts.registry import list_shifts

    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    for shift in list_shifts():
        if shift.needs:  # masks, donors, configured models: nothing compiled to load
            continue
        level = next(iter(shift.params))
        try:
            apply_shift(image, "warm-up", shift, level, 0)
        except Exception:  # noqa: BLE001 - a warm-up only; the worker reports real errors
            pass


try:
    _warm()
except Exception:  # noqa: BLE001 - the forkserver must start even if the warm-up cannot
    pass
