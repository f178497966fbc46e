"""JPEG round trip of a uint8 batch with torchvision's codecs.

On the CPU torchvision drives libjpeg(-turbo) with the same settings Pillow and OpenCV use
here (standard tables scaled by quality, 4:2:0, integer DCT, fancy upsampling): measured
bit-identical to ``pipeline.as_stored`` at quality 85 and to the exact
``jpeg_compression`` (tests/test_batched_shifts.py checks it). On CUDA torchvision uses
nvJPEG for both directions, whose DCT and chroma upsampling are its own: close, not
identical (benchmarks/torch_shifts.py --device cuda measures the difference). ``codec``
``"cpu"`` keeps the round trip on the CPU (libjpeg) for CUDA batches too. (torchvision 0.29
marks its image codecs deprecated in favour of TorchCodec; they still work.)

libjpeg codes one image per call, so the images of a batch are spread over a thread pool
(torchvision's codecs release the GIL; each image's bytes do not depend on the thread):
on a 16-core GPU machine the host round trip is otherwise the batched path's bottleneck.
:func:`jpeg_roundtrip_async` returns at once, so the device can shift the next cell while
the host codes this one.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import torch

CODECS = ("device", "cpu")


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

    The codec threads only see host tensors; the copy back to the device happens in the
    thread that asks for the result, so every device operation stays in the caller's
    thread (and on its CUDA stream).
    """

    def __init__(self, device: torch.device, parts: list[Future] | None = None, value=None):
        self.device, self.parts, self.value = device, parts, value

    @classmethod
    def done(cls, x: torch.Tensor) -> RoundTrip:
        """A batch that needs no coding (already final)."""
        return cls(x.device, value=x)

    def result(self) -> torch.Tensor:
        if self.value is None:
            self.value = torch.stack([p.result() for p in self.parts or []]).to(self.device)
            self.parts = None
        return self.value


def jpeg_roundtrip_async(x: torch.Tensor, quality: int, codec: str = "device") -> RoundTrip:
    """:func:`jpeg_roundtrip` started now; ``.result()`` is the batch on ``x.device``.

    libjpeg: the batch is copied to the host (waiting for the device's pending work on
    it), and its images are coded by the pool while the caller goes on. nvJPEG: computed
    before returning (it runs on the device anyway).
    """
    from torchvision.io import decode_jpeg, encode_jpeg

    if codec_name(x.device, codec) == "nvjpeg":
        data = encode_jpeg(list(x.contiguous()), quality=int(quality))
        # the encoded bytes (a few KB each) must be host tensors for the decoder
        return RoundTrip.done(torch.stack(decode_jpeg([d.cpu() for d in data], device=x.device)))
    if not len(x):
        return RoundTrip.done(x.clone())
    host, q = x.cpu(), int(quality)

    def one(img: torch.Tensor) -> torch.Tensor:
        return decode_jpeg(encode_jpeg(img.contiguous(), quality=q))

    pool = _pool()
    return RoundTrip(x.device, parts=[pool.submit(one, img) for img in host])


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """This process's codec threads, one per usable core (made again after a fork: a
    pool's threads do not survive into a child)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            from robustlab.processes import available_cpus

            _POOL = (os.getpid(), ThreadPoolExecutor(available_cpus(), "robustlab-jpeg"))
        return _POOL[1]
