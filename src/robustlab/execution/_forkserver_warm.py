"""Imported only by the multiprocessing forkserver (see :func:`robustlab.execution.lifeline.worker_context`).

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
import torch

cv2.setNumThreads(1)
torch.set_num_threads(1)


try:
    from robustlab.shifts.kernels import warm

    warm()
except Exception:  # noqa: BLE001 - the forkserver must start even if the warm-up cannot
    pass
