"""The batched path's host JPEG round trip while the calling thread keeps running Python.

On ``--shift-device`` the thread that launches the next cell's shifts (Python, kernel
launches) is busy while the host codes the last cell's JPEGs. This script codes batches of
real 224 x 224 photos three ways while the calling thread spins in Python, and prints
round trips per second and each way's ratio to the first:

* ``here``: the calling thread codes the batch itself (nothing overlaps);
* ``threads``: a thread pool, one thread per core (the first version of the overlap:
  a codec call releases the GIL while it codes but must take it back to return, so its
  threads queue behind the busy caller);
* ``processes``: :func:`robustlab.shifts.batched.jpeg.jpeg_roundtrip_async` with the
  codec processes of :func:`robustlab.execution.codec_pool.codec_pool` (what the shift device
  uses).

Usage:
    PYTHONPATH=src python benchmarks/jpeg_host.py [--batch 256] [--seconds 6]
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

PHOTOS = Path(__file__).resolve().parents[1] / "tests/fixtures/shared-mini/imagenet-samples"


def batch(n: int) -> torch.Tensor:
    files = sorted(PHOTOS.glob("*.JPEG"))
    imgs = [np.array(Image.open(files[i % len(files)]).convert("RGB").resize((224, 224)))
            for i in range(n)]  # fmt: skip
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()


def spin(stop: threading.Event) -> None:
    """The caller's Python work (a shift loop launching kernels, reduced to its essence)."""
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i


def rate(way: str, x: torch.Tensor, seconds: float, busy: bool) -> float:
    from robustlab.data.jpeg import roundtrip_chw
    from robustlab.processes import available_cpus
    from robustlab.execution.codec_pool import codec_pool
    from robustlab.shifts.batched.jpeg import jpeg_roundtrip_async

    host = x.numpy()
    threads = ThreadPoolExecutor(available_cpus()) if way == "threads" else None

    def once() -> None:
        if way == "here":
            roundtrip_chw(host, 85)
        elif threads is not None:
            list(threads.map(lambda img: roundtrip_chw(img[None], 85), host))
        else:
            jpeg_roundtrip_async(x, 85, "cpu", pool=codec_pool()).result()

    once()  # warm: pools started, codecs loaded
    stop = threading.Event()
    done = [0]

    def work() -> None:
        while not stop.is_set():
            once()
            done[0] += len(host)

    worker = threading.Thread(target=work)
    t0 = time.perf_counter()
    worker.start()
    if busy:
        spinner = threading.Thread(target=spin, args=(stop,))
        spinner.start()
    time.sleep(seconds)
    stop.set()
    worker.join()
    if busy:
        spinner.join()
    if threads is not None:
        threads.shutdown()
    return done[0] / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    import os

    x = batch(args.batch)
    print(f"# {args.batch} photos of 224 x 224 per batch; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for busy in (False, True):
        base = None
        for way in ("here", "threads", "processes"):
            r = rate(way, x, args.seconds, busy)
            base = base or r
            print(f"caller {'busy' if busy else 'idle'}: {way:9s} {r:7.0f} round trips/s "
                  f"(x{r / base:.2f} of here)", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
