"""JPEG round trip of a uint8 batch: libjpeg on the host (the protocol's), or nvJPEG.

On the CPU the round trip is :func:`robustlab.data.jpeg.roundtrip`, the very function
behind ``pipeline.as_stored`` (so the exact ``jpeg_compression`` and the protocol's stored
pixels, bit for bit: tests/test_batched_shifts.py checks it). On CUDA torchvision can use
nvJPEG for both directions (``codec="device"``), whose DCT and chroma upsampling are its
own: close, not identical (1.99 levels mean absolute difference at quality 85, and 4.4
points of impulse_noise's error on an H200: benchmarks/README.md), so ``"cpu"`` (libjpeg on
the host) is the default for CUDA batches too.

A caller that keeps shifting while the host codes (the shift device,
:mod:`robustlab.execution.device_shifts`) passes a pool of codec processes
(:func:`robustlab.execution.codec_pool.codec_pool`); a batch then travels to them in shared
memory and is coded in place, and :func:`jpeg_roundtrip_async` returns at once. Processes,
not threads: a codec call releases the GIL while it codes, but must take it back to
return, and the thread that shifts the next cell runs Python nearly all the time (kernel
launches), so threads waited for the GIL more than they coded (measured on 2 cores: 484
round trips/s with the calling thread idle, 55 with it running Python; on the H200 16
threads gave 1.3-2x one). Without a pool the batch is coded in the calling thread.
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np
import torch

CODECS = ("device", "cpu")

# Batches smaller than this are coded in the calling thread even with a pool: a few
# images are not worth the trip to another process.
POOL_MIN = 32
CHUNK = 64


def codec_name(device, codec: str = "device") -> str:
    """What encodes the JPEGs of a batch on ``device``: ``libjpeg`` or ``nvjpeg``."""
    if codec not in CODECS:
        raise ValueError(f"unknown JPEG codec choice {codec!r}; use one of {', '.join(CODECS)}")
    return "nvjpeg" if torch.device(device).type == "cuda" and codec == "device" else "libjpeg"


def jpeg_roundtrip(x: torch.Tensor, quality: int, codec: str = "device") -> torch.Tensor:
    """``decode(encode(x, quality))`` of every image of an (N, 3, H, W) uint8 batch."""
    return jpeg_roundtrip_async(x, quality, codec).result()


class RoundTrip:
    """A batch's round trip under way: :meth:`result` waits for it.

    The result is copied back to the device in the thread that asks for it, so every
    device operation stays in the caller's thread (and on its CUDA stream).
    """

    def __init__(self, device: torch.device, value=None, parts=(), block=None, shape=()):
        self.device, self.value, self.block, self.shape = device, value, block, shape
        self.parts = list(parts)

    @classmethod
    def done(cls, x: torch.Tensor) -> RoundTrip:
        """A batch that needs no coding (already final)."""
        return cls(x.device, value=x)

    def result(self) -> torch.Tensor:
        if self.value is None:
            try:
                for part in self.parts:
                    part.result()
                host = np.ndarray(self.shape, np.uint8, buffer=self.block.buf).copy()
            finally:
                self.parts = []
                self.block.close()
                self.block.unlink()
            self.value = torch.from_numpy(host).to(self.device)
        return self.value


def jpeg_roundtrip_async(
    x: torch.Tensor,
    quality: int,
    codec: str = "device",
    *,
    pool: tuple[Executor, int] | None = None,
    pool_min: int = POOL_MIN,
) -> RoundTrip:
    """:func:`jpeg_roundtrip` started now; ``.result()`` is the batch on ``x.device``.

    libjpeg: the batch is copied to the host (waiting for the device's pending work on
    it); with ``pool`` (an executor of codec processes and their number) and from
    ``pool_min`` images on, chunks of it go to the processes while the caller goes on,
    else it is coded here and now. nvJPEG: computed before returning (it runs on the
    device anyway).
    """
    from robustlab.data.jpeg import roundtrip_chw

    if codec_name(x.device, codec) == "nvjpeg":
        from torchvision.io import decode_jpeg, encode_jpeg

        data = encode_jpeg(list(x.contiguous()), quality=int(quality))
        # the encoded bytes (a few KB each) must be host tensors for the decoder
        return RoundTrip.done(torch.stack(decode_jpeg([d.cpu() for d in data], device=x.device)))
    host, q = x.contiguous().cpu().numpy(), int(quality)
    if pool is None or len(host) < max(1, pool_min):
        return RoundTrip.done(torch.from_numpy(roundtrip_chw(host, q)).to(x.device))
    from multiprocessing.shared_memory import SharedMemory

    from robustlab.data.jpeg import roundtrip_shared

    executor, n = pool
    block = SharedMemory(create=True, size=host.nbytes)
    np.ndarray(host.shape, np.uint8, buffer=block.buf)[:] = host
    # about one chunk per process, at least CHUNK images: each chunk costs the caller's
    # process two GIL hand-overs (sending it, taking its result), whatever its size
    step = max(CHUNK, -(-len(host) // n))
    parts = [
        executor.submit(roundtrip_shared, block.name, host.shape, i, min(i + step, len(host)), q)
        for i in range(0, len(host), step)
    ]
    return RoundTrip(x.device, parts=parts, block=block, shape=host.shape)
